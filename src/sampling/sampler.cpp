#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float log_sum_exp(std::span<const float> logits, float max_logit) {
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max_logit);
  return max_logit + static_cast<float>(std::log(sum));
}

// Orders candidates most likely first; equal logits by token id, so results are deterministic.
template <typename C>
bool more_likely(const C& a, const C& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.token < b.token;
}

struct Candidate {
  float logit;
  int32_t token;
};

uint64_t resolve_seed(uint64_t seed) {
  if (seed != SamplingParams::kRandomSeed) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

}  // namespace

TokenScore score_token(std::span<float> logits, int32_t token, std::span<TokenLogprob> out) {
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    fail("score_token: token {} outside {} logits", token, logits.size());
  const float mine = logits[static_cast<size_t>(token)];
  float max_logit = kNegInf;
  int32_t above = 0;
  // The k most likely so far, sorted (insertion: k is at most a few dozen).
  const size_t k = std::min(out.size(), logits.size());
  size_t kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    max_logit = std::max(max_logit, v);
    above += v > mine ? 1 : 0;
    const Candidate c{v, static_cast<int32_t>(i)};
    if (k == 0 || (kept == k && !more_likely(c, Candidate{out[k - 1].logprob, out[k - 1].token})))
      continue;
    size_t at = kept < k ? kept++ : k - 1;
    for (; at > 0 && more_likely(c, Candidate{out[at - 1].logprob, out[at - 1].token}); --at)
      out[at] = out[at - 1];
    out[at] = {c.token, c.logit};
  }
  const float sum = kernels::active_kernels().attention.exp_sum(
      logits.data(), static_cast<int>(logits.size()), max_logit);
  const float lse = max_logit + std::log(sum);
  for (size_t i = 0; i < kept; ++i) out[i].logprob -= lse;
  return {mine - lse, above + 1, kept};
}

void SamplingParams::validate(int32_t n_vocab) const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) {
    fail("temperature must be between 0 and 100, got {}", temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || repetition_penalty > 100.0f) {
    fail("repetition_penalty must be in (0, 100], got {}", repetition_penalty);
  }
  if (repeat_last_n < -1)
    fail("repeat_last_n must be -1 (all) or at least 0, got {}", repeat_last_n);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (n_vocab > 0 && token >= n_vocab)) {
      fail("logit_bias names token {}, outside the vocabulary of {}", token, n_vocab);
    }
    if (std::isnan(bias)) fail("logit_bias of token {} is not a number", token);
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab, bool logprobs)
    : params_(params), n_vocab_(n_vocab), rng_(resolve_seed(params.seed)), logprobs_(logprobs) {
  params_.validate(n_vocab);
  candidates_.resize(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
  touched_.reserve(static_cast<size_t>(n_vocab));
}

void Sampler::apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                                       std::span<const int32_t> output) {
  for (const auto& [token, bias] : params_.logit_bias) logits[static_cast<size_t>(token)] += bias;
  auto count = [&](int32_t token) {
    if (counts_[static_cast<size_t>(token)]++ == 0) touched_.push_back(token);
  };
  auto reset = [&] {
    for (int32_t token : touched_) counts_[static_cast<size_t>(token)] = 0;
    touched_.clear();
  };
  if (params_.repetition_penalty != 1.0f && params_.repeat_last_n != 0) {
    // The window is the last repeat_last_n tokens of prompt followed by output.
    const size_t total = prompt.size() + output.size();
    const size_t window =
        params_.repeat_last_n < 0 ? total : std::min<size_t>(total, size_t(params_.repeat_last_n));
    for (size_t i = total - window; i < total; ++i)
      count(i < prompt.size() ? prompt[i] : output[i - prompt.size()]);
    for (int32_t token : touched_) {
      float& v = logits[static_cast<size_t>(token)];
      v = v > 0 ? v / params_.repetition_penalty : v * params_.repetition_penalty;
    }
    reset();
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (int32_t token : output) count(token);
    for (int32_t token : touched_) {
      const auto n = static_cast<float>(counts_[static_cast<size_t>(token)]);
      logits[static_cast<size_t>(token)] -=
          params_.frequency_penalty * n + params_.presence_penalty;
    }
    reset();
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output) {
  if (static_cast<int32_t>(logits.size()) != n_vocab_) {
    fail("sampler: {} logits for a vocabulary of {}", logits.size(), n_vocab_);
  }
  apply_bias_and_penalties(logits, prompt, output);
  const auto best = static_cast<int32_t>(kernels::active_kernels().argmax(logits.data(), n_vocab_));
  if (!(logits[static_cast<size_t>(best)] > kNegInf)) return kNoToken;  // (argmax of all -inf)
  const int32_t token = params_.greedy() ? best : draw(logits);
  if (logprobs_) {
    last_logsumexp_ = log_sum_exp(logits, logits[static_cast<size_t>(best)]);
    last_logprob_ = logits[static_cast<size_t>(token)] - last_logsumexp_;
  } else {
    last_logprob_ = std::numeric_limits<float>::quiet_NaN();
  }
  return token;
}

size_t Sampler::select_candidates(std::span<const float> logits, float& max_logit) {
  if (params_.llama_cpp_order) return select_llama_cpp_order(logits, max_logit);
  const float inv_temp = 1.0f / params_.temperature;
  max_logit = kNegInf;
  for (float v : logits) max_logit = std::max(max_logit, v);
  max_logit *= inv_temp;
  // min-p: p >= min_p * p_max  <=>  logit >= max_logit + log(min_p), after temperature.
  const float floor = params_.min_p > 0 ? max_logit + std::log(params_.min_p) : kNegInf;
  size_t count = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float z = logits[static_cast<size_t>(i)] * inv_temp;
    if (z >= floor && z > kNegInf) candidates_[count++] = {z, i};
  }
  if (count == 0) fail("sampler: every token is banned");
  count = keep_top_k(count);
  if (params_.top_p < 1.0f) count = keep_top_p(count, max_logit);
  return count;
}

size_t Sampler::keep_top_k(size_t count) {
  if (params_.top_k <= 0 || static_cast<size_t>(params_.top_k) >= count) return count;
  std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k,
                   candidates_.begin() + count, more_likely<Candidate>);
  count = static_cast<size_t>(params_.top_k);
  std::sort(candidates_.begin(), candidates_.begin() + count, more_likely<Candidate>);
  return count;
}

size_t Sampler::select_llama_cpp_order(std::span<const float> logits, float& max_logit) {
  max_logit = kNegInf;
  size_t count = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float z = logits[static_cast<size_t>(i)];
    if (z > kNegInf) candidates_[count++] = {z, i};
    max_logit = std::max(max_logit, z);
  }
  if (count == 0) fail("sampler: every token is banned");
  count = keep_top_k(count);
  if (params_.top_p < 1.0f) count = keep_top_p(count, max_logit);
  // min-p against the most likely token, which every filter before keeps.
  if (params_.min_p > 0) {
    const float floor = max_logit + std::log(params_.min_p);
    const auto kept = std::remove_if(candidates_.begin(), candidates_.begin() + count,
                                     [floor](const Candidate& c) { return c.logit < floor; });
    count = static_cast<size_t>(kept - candidates_.begin());
  }
  const float inv_temp = 1.0f / params_.temperature;
  for (size_t i = 0; i < count; ++i) candidates_[i].logit *= inv_temp;
  max_logit *= inv_temp;
  return count;
}

double Sampler::mass(size_t count, float max_logit) const {
  double total = 0;
  for (size_t i = 0; i < count; ++i) total += std::exp(double(candidates_[i].logit) - max_logit);
  return total;
}

int32_t Sampler::draw(std::span<const float> logits) {
  float max_logit = 0;
  const size_t count = select_candidates(logits, max_logit);
  const double total = mass(count, max_logit);
  double target = double(rng_.uniform()) * total;
  for (size_t i = 0; i < count; ++i) {
    target -= std::exp(double(candidates_[i].logit) - max_logit);
    if (target < 0) return candidates_[i].token;
  }
  return candidates_[count - 1].token;  // rounding left a sliver at the end
}

void Sampler::distribution(std::span<float> logits, std::span<const int32_t> prompt,
                           std::span<const int32_t> output, std::span<float> probs) {
  if (static_cast<int32_t>(logits.size()) != n_vocab_ || probs.size() != logits.size()) {
    fail("sampler: {} logits and {} probabilities for a vocabulary of {}", logits.size(),
         probs.size(), n_vocab_);
  }
  apply_bias_and_penalties(logits, prompt, output);
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (params_.greedy()) {
    probs[kernels::active_kernels().argmax(logits.data(), n_vocab_)] = 1.0f;
    return;
  }
  float max_logit = 0;
  const size_t count = select_candidates(logits, max_logit);
  const double total = mass(count, max_logit);
  for (size_t i = 0; i < count; ++i) {
    probs[static_cast<size_t>(candidates_[i].token)] =
        static_cast<float>(std::exp(double(candidates_[i].logit) - max_logit) / total);
  }
}

// Keeps the most likely candidates whose probability adds up to top_p (at least one). Sorts
// only as far as needed: the top 64 first, widening until the mass is reached.
size_t Sampler::keep_top_p(size_t count, float max_logit) {
  const double total = mass(count, max_logit);
  const double needed = double(params_.top_p) * total;
  size_t sorted = 0;
  double mass = 0;
  for (size_t want = 64;; want *= 4) {
    const size_t upto = std::min(want, count);
    if (upto > sorted) {
      std::partial_sort(candidates_.begin() + sorted, candidates_.begin() + upto,
                        candidates_.begin() + count, more_likely<Candidate>);
    }
    for (size_t i = sorted; i < upto; ++i) {
      mass += std::exp(double(candidates_[i].logit) - max_logit);
      if (mass >= needed) return i + 1;
    }
    sorted = upto;
    if (upto == count) return count;
  }
}

size_t Sampler::top_logprobs(std::span<const float> logits, std::span<TokenLogprob> out) {
  const size_t n = std::min(out.size(), logits.size());
  for (int32_t i = 0; i < n_vocab_; ++i)
    candidates_[static_cast<size_t>(i)] = {logits[static_cast<size_t>(i)], i};
  std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(),
                    more_likely<Candidate>);
  for (size_t i = 0; i < n; ++i)
    out[i] = {candidates_[i].token, candidates_[i].logit - last_logsumexp_};
  return n;
}

size_t Sampler::post_sampling_top(std::span<const float> logits, int32_t token,
                                  std::span<TokenLogprob> out, float& token_logprob) {
  if (params_.greedy()) {
    token_logprob = 0;  // the argmax, with probability 1
    if (out.empty()) return 0;
    out[0] = {token, 0.0f};
    return 1;
  }
  float max_logit = 0;
  const size_t count = select_candidates(logits, max_logit);
  const double total = mass(count, max_logit);
  const double offset = max_logit + std::log(total);  // logprob = scaled logit - offset
  token_logprob = kNegInf;
  for (size_t i = 0; i < count; ++i) {
    if (candidates_[i].token == token)
      token_logprob = static_cast<float>(double(candidates_[i].logit) - offset);
  }
  const size_t n = std::min(out.size(), count);
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n),
                    candidates_.begin() + static_cast<std::ptrdiff_t>(count),
                    more_likely<Candidate>);
  for (size_t i = 0; i < n; ++i)
    out[i] = {candidates_[i].token, static_cast<float>(double(candidates_[i].logit) - offset)};
  return n;
}

}  // namespace inferd::sampling
