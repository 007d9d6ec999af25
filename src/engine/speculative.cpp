#include "engine/speculative.h"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace inferd::engine {

std::string_view spec_method_name(SpecMethod method) {
  switch (method) {
    case SpecMethod::kOff:
      return "off";
    case SpecMethod::kNgram:
      return "ngram";
    case SpecMethod::kDraftModel:
      return "draft";
    case SpecMethod::kMtp:
      return "mtp";
    case SpecMethod::kEagle3:
      return "eagle3";
  }
  return "unknown";
}

SpecMethod parse_spec_method(std::string_view name) {
  if (name == "off") return SpecMethod::kOff;
  if (name == "ngram") return SpecMethod::kNgram;
  if (name == "draft") return SpecMethod::kDraftModel;
  if (name == "mtp") return SpecMethod::kMtp;
  if (name == "eagle3") return SpecMethod::kEagle3;
  fail("unknown speculative method '{}' (off, ngram, draft, mtp, eagle3)", name);
}

void SpeculativeConfig::validate() const {
  if (num_tokens < 0 || num_tokens > SpecDecodeStats::kMaxPositions)
    fail("speculative tokens must be 0 to {}, got {}", SpecDecodeStats::kMaxPositions, num_tokens);
  if (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min || prompt_lookup_max > 64) {
    fail("prompt_lookup_min {} and prompt_lookup_max {} must satisfy 1 <= min <= max <= 64",
         prompt_lookup_min, prompt_lookup_max);
  }
  if (max_step_rows < 0) fail("speculative max_step_rows must not be negative");
  if (!(row_cost >= 0.0f && row_cost <= 10.0f)) fail("speculative row_cost must be in [0, 10]");
  if (method == SpecMethod::kDraftModel && draft_model.empty())
    fail("speculative decoding with a draft model needs its file (--draft-model)");
  if (method == SpecMethod::kEagle3 && draft_model.empty())
    fail("EAGLE-3 drafting needs the head's file (--draft-model)");
}

SpeculativeConfig parse_speculative_config(std::string_view json, SpeculativeConfig base) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    fail("speculative config is not valid JSON: {}", e.what());
  }
  if (!object.is_object()) fail("speculative config must be a JSON object");
  const auto integer = [](const nlohmann::json& v, const std::string& key) {
    if (!v.is_number_integer()) fail("speculative config: '{}' must be an integer", key);
    return v.get<int32_t>();
  };
  for (const auto& [key, value] : object.items()) {
    if (key == "method") {
      if (!value.is_string()) fail("speculative config: 'method' must be a string");
      const std::string method = value.get<std::string>();
      if (method == "draft_model") {
        base.method = SpecMethod::kDraftModel;
      } else if (method == "ngram") {
        base.method = SpecMethod::kNgram;
      } else if (method == "mtp" || method == "qwen3_next_mtp" || method == "deepseek_mtp") {
        base.method = SpecMethod::kMtp;  // vLLM's names of the model's own MTP layers
      } else if (method == "eagle3") {
        base.method = SpecMethod::kEagle3;  // the head's file is `model`
      } else {
        fail("speculative config: method '{}' is not supported (ngram, draft_model, mtp, eagle3)",
             method);
      }
    } else if (key == "num_speculative_tokens") {
      base.num_tokens = integer(value, key);
    } else if (key == "prompt_lookup_min") {
      base.prompt_lookup_min = integer(value, key);
    } else if (key == "prompt_lookup_max") {
      base.prompt_lookup_max = integer(value, key);
    } else if (key == "model") {
      if (!value.is_string()) fail("speculative config: 'model' must be a file path");
      base.draft_model = value.get<std::string>();
      if (!object.contains("method")) base.method = SpecMethod::kDraftModel;
    } else {
      fail(
          "speculative config: field '{}' is not supported (method, num_speculative_tokens, "
          "prompt_lookup_min, prompt_lookup_max, model)",
          key);
    }
  }
  // vLLM takes prompt_lookup_min from max when only max is given.
  if (object.contains("prompt_lookup_max") && !object.contains("prompt_lookup_min"))
    base.prompt_lookup_min = std::min(base.prompt_lookup_min, base.prompt_lookup_max);
  base.validate();
  return base;
}

namespace {

// How many tokens before tokens[end] equal the last ones of `tokens`, up to `max_n`.
int32_t match_before(std::span<const int32_t> tokens, int64_t end, int32_t max_n) {
  const auto len = static_cast<int64_t>(tokens.size());
  const int64_t limit = std::min<int64_t>(max_n, end);
  int32_t n = 0;
  while (n < limit &&
         tokens[static_cast<size_t>(end - 1 - n)] == tokens[static_cast<size_t>(len - 1 - n)])
    ++n;
  return n;
}

}  // namespace

NgramProposal propose_ngram(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                            std::span<int32_t> out, int64_t resume) {
  const auto len = static_cast<int64_t>(tokens.size());
  NgramProposal best;
  if (out.empty() || len < 2) return best;
  // The most recent of the longest matches: scan where a match could end, from the most recent
  // back; the first one of max_n tokens wins.
  for (int64_t source = len - 1; source >= 1 && best.match < max_n; --source) {
    const int32_t n = match_before(tokens, source, max_n);
    if (n > best.match) best = {0, source, n, false};
  }
  if (best.match < min_n) best = {};
  // Near where the text was copying from: the longest match, the nearest of equal ones.
  if (resume >= 0) {
    NgramProposal near;
    const int64_t last = std::min(len - 1, resume + kNgramNearWindow);
    for (int64_t source = std::max<int64_t>(resume - 1, 1); source <= last; ++source) {
      const int32_t n = match_before(tokens, source, max_n);
      if (n > near.match ||
          (n == near.match && n > 0 && std::abs(source - resume) < std::abs(near.source - resume)))
        near = {0, source, n, true};
    }
    if (near.match > 0 && near.match >= best.match) best = near;
  }
  if (best.match == 0) return {};
  // What followed the match. Where it runs into the end (a repeating pattern: the match is one
  // period back), the copy continues from what it has just written, as an LZ77 copy overlaps.
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t pos = best.source + static_cast<int64_t>(i);
    out[i] = pos < len ? tokens[static_cast<size_t>(pos)] : out[static_cast<size_t>(pos - len)];
  }
  best.count = out.size();
  return best;
}

int ngram_kind(const NgramProposal& proposal) {
  const int length = std::clamp(proposal.match, 1, kNgramMatchKinds) - 1;
  return (proposal.near ? kNgramMatchKinds : 0) + length;
}

int64_t next_copy_position(std::span<const int32_t> tokens, const NgramProposal& proposal,
                           int64_t accepted) {
  if (proposal.source < 0 || tokens.empty()) return -1;
  const int64_t next = proposal.source + accepted;
  const auto last = static_cast<int64_t>(tokens.size()) - 1;  // the model's own token
  return next < last && tokens[static_cast<size_t>(next)] == tokens.back() ? next + 1 : next;
}

}  // namespace inferd::engine
