#include "engine/speculative.h"

#include <algorithm>

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
  }
  return "unknown";
}

SpecMethod parse_spec_method(std::string_view name) {
  if (name == "off") return SpecMethod::kOff;
  if (name == "ngram") return SpecMethod::kNgram;
  if (name == "draft") return SpecMethod::kDraftModel;
  fail("unknown speculative method '{}' (off, ngram, draft)", name);
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
}

size_t propose_ngram(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                     std::span<int32_t> out) {
  const auto len = static_cast<int64_t>(tokens.size());
  if (out.empty() || len < min_n + 1) return 0;
  // Scan candidate match ends from the most recent back; the first one matching max_n tokens
  // wins, otherwise the most recent of the longest matches.
  const int32_t last = tokens[static_cast<size_t>(len - 1)];
  int64_t best_end = -1, best_n = 0;
  for (int64_t end = len - 2; end >= 0; --end) {  // tokens[end] would be the suffix's last
    if (tokens[static_cast<size_t>(end)] != last) continue;
    int64_t n = 1;
    const int64_t limit = std::min<int64_t>(max_n, end + 1);
    while (n < limit &&
           tokens[static_cast<size_t>(end - n)] == tokens[static_cast<size_t>(len - 1 - n)])
      ++n;
    if (n > best_n) {
      best_n = n;
      best_end = end;
      if (n == max_n) break;
    }
  }
  if (best_n < min_n) return 0;
  // What followed the match; it may run into the suffix itself (a repeating pattern).
  const size_t count = std::min<size_t>(out.size(), static_cast<size_t>(len - 1 - best_end));
  std::copy_n(tokens.begin() + best_end + 1, count, out.begin());
  return count;
}

}  // namespace inferd::engine
