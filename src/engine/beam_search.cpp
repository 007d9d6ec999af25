#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace inferd::engine {

double beam_score(double cum_logprob, int64_t length, float length_penalty) {
  return cum_logprob / std::pow(static_cast<double>(std::max<int64_t>(length, 1)), length_penalty);
}

void top_logprobs(std::span<const float> logits, std::span<sampling::TokenLogprob> out) {
  const size_t k = std::min(out.size(), logits.size());
  // Min-heap of the k best so far under "more likely": the root is the weakest kept.
  const auto better = [](const sampling::TokenLogprob& a, const sampling::TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0;
  size_t n = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    sum += std::exp(static_cast<double>(logits[i] - max_logit));
    const sampling::TokenLogprob c{static_cast<int32_t>(i), logits[i]};
    if (n < k) {
      out[n++] = c;
      std::push_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
    } else if (k > 0 && better(c, out[0])) {
      std::pop_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), better);
      out[k - 1] = c;
      std::push_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), better);
    }
  }
  std::sort_heap(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), better);
  const auto log_z = static_cast<float>(static_cast<double>(max_logit) + std::log(sum));
  for (size_t i = 0; i < n; ++i) out[i].logprob -= log_z;
}

BeamSearch::BeamSearch(int32_t width, int32_t num_results, float length_penalty, int64_t max_tokens)
    : width_(width),
      num_results_(num_results),
      length_penalty_(length_penalty),
      max_tokens_(max_tokens) {
  if (width < 1) fail("beam search: width must be at least 1, got {}", width);
  if (num_results < 1 || num_results > width)
    fail("beam search: {} results asked of {} beams (1 to the width)", num_results, width);
  if (!std::isfinite(length_penalty)) fail("beam search: length_penalty must be finite");
  if (max_tokens < 1) fail("beam search: max_tokens must be at least 1");
  const auto per_step = static_cast<size_t>(width) * static_cast<size_t>(candidates_per_beam());
  candidates_.reserve(per_step);
  ended_.reserve(per_step);
  next_.reserve(static_cast<size_t>(width));
  kept_.resize(static_cast<size_t>(num_results));
  for (Hypothesis& h : kept_) h.tokens.reserve(static_cast<size_t>(max_tokens));
}

void BeamSearch::add_candidate(int32_t beam, int32_t token, double cum_logprob, bool ends) {
  if (candidates_.size() == candidates_.capacity())
    fail("beam search: more than {} candidates in a step", candidates_.capacity());
  // An ending candidate is recorded with a negative token so that select() can tell it apart.
  candidates_.push_back({beam, ends ? -1 - token : token, cum_logprob});
}

void BeamSearch::select() {
  std::sort(candidates_.begin(), candidates_.end(), [](const Choice& a, const Choice& b) {
    if (a.cum_logprob != b.cum_logprob) return a.cum_logprob > b.cum_logprob;
    if (a.parent != b.parent) return a.parent < b.parent;
    return a.token < b.token;
  });
  next_.clear();
  ended_.clear();
  for (const Choice& c : candidates_) {
    if (c.token < 0) {
      ended_.push_back({c.parent, -1 - c.token, c.cum_logprob});
    } else if (std::ssize(next_) < width_) {
      next_.push_back(c);
    }
  }
}

void BeamSearch::offer(std::span<const int32_t> tokens, double cum_logprob, FinishReason reason) {
  const double score = beam_score(cum_logprob, std::ssize(tokens), length_penalty_);
  // Its rank among the kept ones (after equal scores: the first offered wins ties).
  size_t at = 0;
  while (at < num_kept_ && kept_[at].score >= score) ++at;
  if (at >= kept_.size()) return;
  // Shift the weaker ones down one place, reusing the vector that falls off the end.
  if (num_kept_ < kept_.size()) ++num_kept_;
  std::rotate(kept_.begin() + static_cast<std::ptrdiff_t>(at),
              kept_.begin() + static_cast<std::ptrdiff_t>(num_kept_ - 1),
              kept_.begin() + static_cast<std::ptrdiff_t>(num_kept_));
  Hypothesis& h = kept_[at];
  h.tokens.assign(tokens.begin(), tokens.end());
  h.cum_logprob = cum_logprob;
  h.score = score;
  h.reason = reason;
}

double BeamSearch::bound(double cum_logprob, int64_t length) const {
  // Descendants have a cumulative log-probability <= this one's (log-probabilities are <= 0)
  // and a length from `length` to max_tokens; the divisor favours the longest for a positive
  // penalty and the shortest for a negative one.
  const int64_t best_length = length_penalty_ >= 0 ? max_tokens_ : length;
  return beam_score(cum_logprob, best_length, length_penalty_);
}

bool BeamSearch::settled(std::span<const double> live_cum,
                         std::span<const int64_t> live_length) const {
  if (live_cum.empty()) return true;
  if (num_kept_ < kept_.size()) return false;
  const double worst = kept_[num_kept_ - 1].score;
  for (size_t i = 0; i < live_cum.size(); ++i) {
    if (bound(live_cum[i], live_length[i]) > worst) return false;
  }
  return true;
}

}  // namespace inferd::engine
