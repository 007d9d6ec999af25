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
  const auto finite = [](float v) { return std::isfinite(v); };
  if (!(typical_p > 0.0f && typical_p <= 1.0f))
    fail("typical_p must be in (0, 1], got {}", typical_p);
  if (!finite(top_n_sigma)) fail("top_n_sigma must be a number, got {}", top_n_sigma);
  if (!(xtc_probability >= 0.0f && xtc_probability <= 1.0f))
    fail("xtc_probability must be in [0, 1], got {}", xtc_probability);
  if (!(xtc_threshold >= 0.0f && xtc_threshold <= 1.0f))
    fail("xtc_threshold must be in [0, 1], got {}", xtc_threshold);
  if (!(dynatemp_range >= 0.0f) || !finite(dynatemp_range))
    fail("dynatemp_range must be at least 0, got {}", dynatemp_range);
  if (!(dynatemp_exponent >= 0.0f) || !finite(dynatemp_exponent))
    fail("dynatemp_exponent must be at least 0, got {}", dynatemp_exponent);
  if (mirostat < 0 || mirostat > 2) fail("mirostat must be 0 (off), 1 or 2, got {}", mirostat);
  if (!(mirostat_tau >= 0.0f) || !finite(mirostat_tau))
    fail("mirostat_tau must be at least 0, got {}", mirostat_tau);
  if (!(mirostat_eta >= 0.0f) || !finite(mirostat_eta))
    fail("mirostat_eta must be at least 0, got {}", mirostat_eta);
  if (!(dry_multiplier >= 0.0f) || !finite(dry_multiplier))
    fail("dry_multiplier must be at least 0, got {}", dry_multiplier);
  if (!(dry_base >= 1.0f) || !finite(dry_base))
    fail("dry_base must be at least 1, got {}", dry_base);
  if (dry_allowed_length < 0)
    fail("dry_allowed_length must be at least 0, got {}", dry_allowed_length);
  if (dry_penalty_last_n < -1)
    fail("dry_penalty_last_n must be -1 (all) or at least 0, got {}", dry_penalty_last_n);
  if (dry_sequence_breakers.size() > kMaxDryBreakers)
    fail("at most {} DRY sequence breakers, got {}", kMaxDryBreakers, dry_sequence_breakers.size());
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (n_vocab > 0 && token >= n_vocab)) {
      fail("logit_bias names token {}, outside the vocabulary of {}", token, n_vocab);
    }
    if (std::isnan(bias)) fail("logit_bias of token {} is not a number", token);
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab, bool logprobs,
                 std::shared_ptr<const DryBreakers> dry_breakers)
    : params_(params), n_vocab_(n_vocab), rng_(resolve_seed(params.seed)), logprobs_(logprobs) {
  params_.validate(n_vocab);
  candidates_.resize(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
  touched_.reserve(static_cast<size_t>(n_vocab));
  if (params_.dry()) dry_ = std::make_unique<DryPenalty>(params_, std::move(dry_breakers), n_vocab);
  mu_ = last_mu_ = 2.0f * params_.mirostat_tau;  // (llama.cpp's start)
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
  if (dry_) dry_->apply(prompt, output, logits);
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
  if (params_.mirostat != 0) return select_mirostat(logits, max_logit);
  if (params_.llama_cpp_order || params_.uses_llama_cpp_samplers())
    return select_llama_cpp_order(logits, max_logit);
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
  count = keep_top_k(count, params_.top_k);
  if (params_.top_p < 1.0f) count = keep_top_p(count, max_logit);
  return count;
}

size_t Sampler::keep_top_k(size_t count, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= count) return count;
  std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.begin() + count,
                   more_likely<Candidate>);
  count = static_cast<size_t>(k);
  std::sort(candidates_.begin(), candidates_.begin() + count, more_likely<Candidate>);
  return count;
}

size_t Sampler::select_llama_cpp_order(std::span<const float> logits, float& max_logit) {
  max_logit = kNegInf;
  for (float v : logits) max_logit = std::max(max_logit, v);
  // top-n-sigma: the logits within n standard deviations (of the finite logits) of the top.
  float floor = kNegInf;
  if (params_.top_n_sigma > 0.0f) {
    double sum = 0, squares = 0;
    size_t finite = 0;
    for (float v : logits) {
      if (v > kNegInf) sum += v, ++finite;
    }
    const double mean = finite > 0 ? sum / double(finite) : 0;
    for (float v : logits) {
      if (v > kNegInf) squares += (v - mean) * (v - mean);
    }
    const double sigma = finite > 0 ? std::sqrt(squares / double(finite)) : 0;
    floor = static_cast<float>(max_logit - params_.top_n_sigma * sigma);
  }
  size_t count = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float z = logits[static_cast<size_t>(i)];
    if (z > kNegInf && z >= floor) candidates_[count++] = {z, i};
  }
  if (count == 0) fail("sampler: every token is banned");
  count = keep_top_k(count, params_.top_k);
  if (params_.typical_p < 1.0f) count = keep_typical(count);
  // The filters after typical sampling see the most likely token it kept.
  if (params_.top_p < 1.0f) count = keep_top_p(count, max_of(count));
  if (params_.min_p > 0) {
    const float min_floor = max_of(count) + std::log(params_.min_p);
    const auto kept =
        std::remove_if(candidates_.begin(), candidates_.begin() + count,
                       [min_floor](const Candidate& c) { return c.logit < min_floor; });
    count = static_cast<size_t>(kept - candidates_.begin());
  }
  count = keep_xtc(count);
  if (params_.dynatemp_range > 0.0f) {
    count = apply_dynamic_temperature(count);
  } else {
    const float inv_temp = 1.0f / params_.temperature;
    for (size_t i = 0; i < count; ++i) candidates_[i].logit *= inv_temp;
  }
  max_logit = max_of(count);
  return count;
}

// Locally typical sampling: the tokens whose surprise (-log p) is nearest the entropy, nearest
// first, until their mass passes typical_p.
size_t Sampler::keep_typical(size_t count) {
  const float top = max_of(count);
  const double total = mass(count, top);
  const double log_total = std::log(total);
  // -log p - entropy = (top + log_total - entropy) - logit
  const double centre = top + log_total - entropy(count, top, total);
  const auto distance = [centre](const Candidate& c) { return std::abs(centre - c.logit); };
  std::sort(candidates_.begin(), candidates_.begin() + count,
            [&](const Candidate& a, const Candidate& b) {
              const double da = distance(a), db = distance(b);
              return da != db ? da < db : more_likely(a, b);
            });
  double kept_mass = 0;
  for (size_t i = 0; i < count; ++i) {
    kept_mass += std::exp(double(candidates_[i].logit) - top - log_total);
    if (kept_mass > params_.typical_p) return i + 1;
  }
  return count;
}

// XTC ("exclude top choices"): with probability xtc_probability, the tokens at or above the
// threshold go, but the least likely of them, when there are two or more.
size_t Sampler::keep_xtc(size_t count) {
  if (!(params_.xtc_probability > 0.0f) || params_.xtc_threshold > 0.5f || count < 2) return count;
  if (!replaying_) last_xtc_fired_ = rng_.uniform() <= params_.xtc_probability;
  if (!last_xtc_fired_) return count;
  const float top = max_of(count);
  const double total = mass(count, top);
  const auto above = [&](const Candidate& c) {
    return std::exp(double(c.logit) - top) / total >= params_.xtc_threshold;
  };
  size_t n_above = 0;
  const Candidate* last = nullptr;  // the least likely at or above the threshold
  for (size_t i = 0; i < count; ++i) {
    if (!above(candidates_[i])) continue;
    ++n_above;
    if (last == nullptr || more_likely(*last, candidates_[i])) last = &candidates_[i];
  }
  if (n_above < 2) return count;
  const Candidate keep = *last;
  const auto kept =
      std::remove_if(candidates_.begin(), candidates_.begin() + count,
                     [&](const Candidate& c) { return above(c) && (c.token != keep.token); });
  return static_cast<size_t>(kept - candidates_.begin());
}

// Dynamic temperature: between temperature - range (at least 0) and temperature + range, by
// the candidates' entropy over the largest it could be (all equally likely) to the exponent.
// One candidate needs no temperature; a temperature of 0 keeps the most likely.
size_t Sampler::apply_dynamic_temperature(size_t count) {
  if (count <= 1) return count;
  const float low = std::max(0.0f, params_.temperature - params_.dynatemp_range);
  const float high = params_.temperature + params_.dynatemp_range;
  const float top = max_of(count);
  const double normalized = entropy(count, top, mass(count, top)) / std::log(double(count));
  const auto temperature = static_cast<float>(
      low + (high - low) * std::pow(normalized, double(params_.dynatemp_exponent)));
  if (!(temperature > 0.0f)) {
    const auto best =
        std::min_element(candidates_.begin(), candidates_.begin() + count, more_likely<Candidate>);
    candidates_[0] = *best;
    return 1;
  }
  const float inv_temp = 1.0f / temperature;
  for (size_t i = 0; i < count; ++i) candidates_[i].logit *= inv_temp;
  return count;
}

// Mirostat: after the temperature, the tokens whose surprise fits the target mu. Version 2
// keeps those with -log2 p <= mu (at least the most likely); version 1 estimates the Zipf
// exponent of the 100 most likely and keeps the top k that gives a surprise of mu.
size_t Sampler::select_mirostat(std::span<const float> logits, float& max_logit) {
  const float inv_temp = 1.0f / params_.temperature;
  max_logit = kNegInf;
  size_t count = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) {
    const float z = logits[static_cast<size_t>(i)] * inv_temp;
    if (z > kNegInf) candidates_[count++] = {z, i};
    max_logit = std::max(max_logit, z);
  }
  if (count == 0) fail("sampler: every token is banned");
  const double mu = replaying_ ? last_mu_ : mu_;
  if (params_.mirostat == 2) {
    const double floor = max_logit + std::log(mass(count, max_logit)) - mu * std::log(2.0);
    const auto kept = std::remove_if(candidates_.begin(), candidates_.begin() + count,
                                     [floor](const Candidate& c) { return c.logit < floor; });
    if (kept == candidates_.begin()) return keep_top_k(count, 1);
    return static_cast<size_t>(kept - candidates_.begin());
  }
  constexpr size_t kZipfTokens = 100;
  const size_t m = std::min(count, kZipfTokens);
  std::partial_sort(candidates_.begin(), candidates_.begin() + m, candidates_.begin() + count,
                    more_likely<Candidate>);
  if (m < 2) return 1;
  double sum_tb = 0, sum_tt = 0;
  for (size_t i = 0; i + 1 < m; ++i) {
    const double t = std::log(double(i + 2) / double(i + 1));
    const double b = double(candidates_[i].logit) - candidates_[i + 1].logit;  // log(p_i / p_i+1)
    sum_tb += t * b;
    sum_tt += t * t;
  }
  const double s_hat = sum_tb / sum_tt;
  const double epsilon = s_hat - 1;
  const double k =
      std::pow(epsilon * std::pow(2.0, mu) / (1 - std::pow(double(n_vocab_), -epsilon)), 1 / s_hat);
  // (NaN or out of range: all equally likely, or one far ahead.)
  const double clamped = std::isnan(k) ? 1.0 : std::clamp(k, 1.0, double(count));
  return keep_top_k(count, static_cast<int32_t>(clamped));
}

double Sampler::entropy(size_t count, float top, double total) const {
  const double log_total = std::log(total);
  double h = 0;
  for (size_t i = 0; i < count; ++i) {
    const double log_p = double(candidates_[i].logit) - top - log_total;
    h -= std::exp(log_p) * log_p;
  }
  return h;
}

float Sampler::max_of(size_t count) const {
  float top = kNegInf;
  for (size_t i = 0; i < count; ++i) top = std::max(top, candidates_[i].logit);
  return top;
}

double Sampler::mass(size_t count, float max_logit) const {
  double total = 0;
  for (size_t i = 0; i < count; ++i) total += std::exp(double(candidates_[i].logit) - max_logit);
  return total;
}

int32_t Sampler::draw(std::span<const float> logits) {
  float max_logit = 0;
  if (!replaying_) last_xtc_fired_ = false;
  const size_t count = select_candidates(logits, max_logit);
  const double total = mass(count, max_logit);
  double target = double(rng_.uniform()) * total;
  size_t chosen = count - 1;  // where rounding leaves a sliver at the end
  for (size_t i = 0; i < count; ++i) {
    target -= std::exp(double(candidates_[i].logit) - max_logit);
    if (target < 0) {
      chosen = i;
      break;
    }
  }
  if (params_.mirostat != 0) {  // the target moves by the surprise of what was drawn
    const double log2_p =
        (double(candidates_[chosen].logit) - max_logit - std::log(total)) / std::log(2.0);
    last_mu_ = mu_;
    mu_ = static_cast<float>(mu_ - params_.mirostat_eta * (-log2_p - params_.mirostat_tau));
  }
  return candidates_[chosen].token;
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
  replaying_ = true;  // the last draw's XTC coin and Mirostat target
  size_t count = 0;
  try {
    count = select_candidates(logits, max_logit);
  } catch (...) {
    replaying_ = false;
    throw;
  }
  replaying_ = false;
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
