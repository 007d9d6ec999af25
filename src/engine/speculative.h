// Speculative decoding: a drafter proposes the next few tokens of a sequence; the engine runs
// them through the model with the real ones in one step and keeps the longest prefix that the
// model's own sampling agrees with, plus the token it sampled where they part (engine.cpp).
//
// Why sampling stays exact: a draft token d proposed without a distribution (n-gram lookup, a
// draft model's argmax) is a one-hot proposal q. Rejection sampling accepts d with probability
// min(1, p(d) / q(d)) = p(d) and otherwise draws from normalize(max(p - q, 0)), which is p
// without d. Drawing x from p and accepting d when x == d gives exactly that: d with
// probability p(d), any other x with probability p(x). So the engine samples each row with
// the request's own sampler and compares; with a fixed seed it draws the same random numbers in
// the same order as without speculation, and the text is the same. Drafts that come with a
// distribution q use speculative_draw (sampling/speculative_sampling.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace inferd::engine {

// kMtp: the model's own multi-token-prediction layer drafts (engine/mtp_drafter.h); kEagle3: an
// EAGLE-3 head (SpeculativeConfig::draft_model) from the model's hidden states, the same way.
enum class SpecMethod { kOff, kNgram, kDraftModel, kMtp, kEagle3 };
std::string_view spec_method_name(SpecMethod method);
SpecMethod parse_spec_method(std::string_view name);  // "off", "ngram", "draft", "mtp", "eagle3"

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kOff;
  // The most draft tokens a sequence brings to one step (vLLM's num_speculative_tokens); each
  // sequence starts at this and adapts to its acceptance.
  int32_t num_tokens = 6;
  // N-gram prompt lookup: the last n tokens, n from max down to min, are looked for earlier in
  // the prompt and output; what followed the match is the draft.
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 5;
  // Back-off under load: a step's draft tokens are limited so that its decode rows (one per
  // running sequence plus drafts) stay within this; beyond it a step is bound by computation,
  // not by reading the weights, and a rejected draft costs as much as it may save. 0: no limit.
  int32_t max_step_rows = 16;
  // A draft row's cost relative to a one-row decode step, used until the engine has timed
  // enough decode steps of different widths to know it (on a 2-core AVX2 EPYC it measured
  // about 0.6: decode there is bound by arithmetic as much as by memory). With a sequence's
  // acceptance it sets how many drafts pay.
  float row_cost = 0.5f;
  // false: row_cost is a draft token's whole cost, draft model included, never measured (tests:
  // 0 drafts the most every step)
  bool measure_row_cost = true;

  // kDraftModel: the GGUF file of the draft model (engine/draft_model.h); kEagle3: the head's.
  std::string draft_model;

  bool enabled() const { return method != SpecMethod::kOff && num_tokens > 0; }
  void validate() const;  // inferd::Error naming the bad field
};

// vLLM's --speculative-config: a JSON object with `method` ("ngram", "draft_model", "mtp", "eagle3"),
// `num_speculative_tokens`, `prompt_lookup_min`, `prompt_lookup_max` and `model` (the draft
// model's file; implies draft_model). Applied over `base`; a field inferd does not know, or a
// value of the wrong type, is an inferd::Error naming it (never silently ignored).
SpeculativeConfig parse_speculative_config(std::string_view json, SpeculativeConfig base);

// An n-gram proposal: out[0, count) continue the sequence's tokens from index `source`, and the
// `match` tokens before `source` equal its last ones. `near`: found next to where the text was
// last copying from (propose_ngram's `resume`).
struct NgramProposal {
  size_t count = 0;
  int64_t source = -1;
  int32_t match = 0;
  bool near = false;
};

// How far past `resume` a match still counts as the text going on with the passage it was
// copying (a few tokens left out or put in, a word replaced).
constexpr int64_t kNgramNearWindow = 8;

// Prompt lookup. The tokens that followed the most recent earlier occurrence of the longest
// suffix of `tokens` of length prompt_lookup_max down to prompt_lookup_min, continued as a
// repeating pattern where they reach the end; out.size() of them are written (count 0: no
// match). With `resume` >= 0, the index the text was copying from when the last proposal was
// checked, a match that continues from within [resume - 1, resume + kNgramNearWindow] is taken
// instead when it is at least as long, even a single token: where a model quotes a passage
// and changes a word, the token after the change names the place to go on from.
NgramProposal propose_ngram(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                            std::span<int32_t> out, int64_t resume = -1);

// Kinds of n-gram proposal whose drafts are accepted at different rates, each counted on its
// own: near or not, by match length 1 .. kNgramMatchKinds (longer ones with the longest).
constexpr int kNgramMatchKinds = 5;
constexpr int kNgramKinds = 2 * kNgramMatchKinds;
int ngram_kind(const NgramProposal& proposal);  // 0 .. kNgramKinds - 1; proposal.count > 0

// Where the text copies from after a checked proposal: `accepted` of its tokens were kept and
// the model chose the last token of `tokens` after them. The proposal's source moves on by
// `accepted`, and by one more when that token is also the source's next one (the text still
// copies); -1 without a proposal.
int64_t next_copy_position(std::span<const int32_t> tokens, const NgramProposal& proposal,
                           int64_t accepted);

// Counters of verified drafts, as vLLM reports them.
struct SpecDecodeStats {
  static constexpr int kMaxPositions = 16;
  int64_t num_drafts = 0;           // verification steps that had at least one draft token
  int64_t num_draft_tokens = 0;     // draft tokens proposed
  int64_t num_accepted_tokens = 0;  // of those, accepted
  int64_t accepted_per_position[kMaxPositions] = {};  // accepted at draft position i
};

}  // namespace inferd::engine
