// BeamSearch: which beams live on at each step of a beam search, apart from the sequences that
// carry them (the engine forks and drops those). The rules are vLLM's beam search:
//  - every live beam offers its 2 * width most likely next tokens; a candidate's cumulative
//    log-probability is its beam's plus the token's;
//  - candidates are taken best first: one that ends the text (EOS) becomes a finished
//    hypothesis, the others become the next beams until there are `width` of them;
//  - at the end the hypotheses (and the beams still live when max_tokens is reached) are
//    ranked by score = cumulative log-probability / length ^ length_penalty, the length being
//    the generated tokens without the EOS (at least 1).
// One addition: the search stops as soon as no live beam can produce a hypothesis that beats
// the `num_results` best finished ones (their score can only fall below a bound computed from
// max_tokens), which gives the same results as running to max_tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "sampling/sampler.h"

namespace inferd::engine {

// cumulative log-probability / max(length, 1) ^ length_penalty.
double beam_score(double cum_logprob, int64_t length, float length_penalty);

// The `out.size()` most likely tokens of `logits` with their log-probabilities (log-softmax),
// most likely first (ties: lower id first). No scratch memory: a heap of out.size() entries.
void top_logprobs(std::span<const float> logits, std::span<sampling::TokenLogprob> out);

class BeamSearch {
 public:
  struct Choice {
    int32_t parent;  // the beam it extends
    int32_t token;
    double cum_logprob;
  };
  struct Hypothesis {
    std::vector<int32_t> tokens;  // generated tokens, no EOS
    double cum_logprob = 0;
    double score = 0;
    FinishReason reason = FinishReason::kStop;
  };

  // width beams, the num_results best hypotheses kept, at most max_tokens generated tokens.
  BeamSearch(int32_t width, int32_t num_results, float length_penalty, int64_t max_tokens);

  int32_t width() const { return width_; }
  int32_t candidates_per_beam() const { return 2 * width_; }

  // One step: the candidates of every live beam, then select().
  void clear_candidates() { candidates_.clear(); }
  void add_candidate(int32_t beam, int32_t token, double cum_logprob, bool ends);
  // The next beams, best first (at most width), and the candidates that ended the text, each
  // to be offered as a hypothesis by the caller (who holds the beams' tokens).
  void select();
  std::span<const Choice> next() const { return next_; }
  std::span<const Choice> ended() const { return ended_; }

  // A finished hypothesis: kept when it is among the num_results best so far.
  void offer(std::span<const int32_t> tokens, double cum_logprob, FinishReason reason);
  // True when no beam that is still live (given by cumulative log-probability and generated
  // length) can beat the kept hypotheses.
  bool settled(std::span<const double> live_cum, std::span<const int64_t> live_length) const;
  // The kept hypotheses, best first (ties: the one offered first).
  std::span<const Hypothesis> results() const { return {kept_.data(), num_kept_}; }

 private:
  // The highest score a descendant of a live beam can reach.
  double bound(double cum_logprob, int64_t length) const;

  int32_t width_;
  int32_t num_results_;
  float length_penalty_;
  int64_t max_tokens_;
  std::vector<Choice> candidates_;  // [width * 2 * width]
  std::vector<Choice> next_;        // [width]
  std::vector<Choice> ended_;       // [width * 2 * width]
  std::vector<Hypothesis> kept_;    // [num_results], tokens reserved to max_tokens
  size_t num_kept_ = 0;
};

}  // namespace inferd::engine
