// Sampler: the chain that turns one row of logits into the next token. Order (vLLM's):
// logit bias, penalties (repetition, frequency, presence, DRY), then greedy argmax or
// temperature, min-p, top-k, top-p and a seeded draw. llama.cpp's order (SamplingParams::
// llama_cpp_order, or any sampler only llama.cpp has): after the penalties top-n-sigma, top-k,
// typical, top-p, min-p, XTC, then temperature (dynamic or not). Mirostat: after the penalties
// temperature and Mirostat's own truncation. All buffers are allocated at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sampling/dry.h"
#include "sampling/rng.h"
#include "sampling/sampling_params.h"

namespace inferd::sampling {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

// A token's log-probability under softmax(logits), its rank (1 + the tokens with a larger
// logit) and the out.size() most likely tokens, most likely first (equal logits by id), of
// which `top` says how many were written. `logits` is overwritten with exp(logit - max): the
// normalizer is summed by the kernels' exp_sum in float (Sampler's logprobs sum in double; the
// two agree to about 1e-6), so a row of 128K logits costs microseconds, not a millisecond.
// Allocates nothing (prompt logprobs score every prompt position this way, several threads at
// once).
struct TokenScore {
  float logprob = 0;
  int32_t rank = 0;
  size_t top = 0;
};
TokenScore score_token(std::span<float> logits, int32_t token, std::span<TokenLogprob> out);

class Sampler {
 public:
  // Throws inferd::Error for invalid parameters. Without `logprobs` the sampler skips the
  // normalisation over the vocabulary that only logprobs need (last_logprob() is then NaN and
  // top_logprobs() must not be called). `dry_breakers`: DRY's sequence breakers as tokens
  // (DryBreakers::build of params.dry_sequence_breakers); none without it.
  Sampler(const SamplingParams& params, int32_t n_vocab, bool logprobs = true,
          std::shared_ptr<const DryBreakers> dry_breakers = nullptr);

  // What sample() returns when no token is left: every logit is -inf once the bias is applied
  // (a logit_bias of -inf on each token the caller's masks had left).
  static constexpr int32_t kNoToken = -1;

  // Chooses the next token, or kNoToken. `logits` ([n_vocab]) is modified in place: afterwards
  // it holds the biased and penalised logits, the distribution logprobs are reported from.
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> output);

  // The distribution sample() draws from, after the whole chain (bias, penalties, temperature,
  // min-p, top-k, top-p, ...): probs[i] for every token, zero outside the kept ones, one-hot at
  // the argmax when greedy. `logits` is modified as by sample(). XTC tosses its coin as sample()
  // would; Mirostat's target does not move. Speculative decoding compares a draft's
  // distribution with this one (sampling/speculative_sampling.h).
  void distribution(std::span<float> logits, std::span<const int32_t> prompt,
                    std::span<const int32_t> output, std::span<float> probs);
  Rng& rng() { return rng_; }

  // Log-probability of the token chosen by the last sample(), under softmax of the penalised
  // logits (the model's distribution; temperature and truncation are not applied, as OpenAI
  // reports logprobs).
  float last_logprob() const { return last_logprob_; }
  // The `out.size()` most likely tokens of the last sample()'s penalised logits, most likely
  // first. Returns how many were written.
  size_t top_logprobs(std::span<const float> logits, std::span<TokenLogprob> out);
  // The same from the distribution the last sample() drew from, after the whole chain (one-hot
  // when greedy): at most out.size() of the tokens it kept, most likely first (the ones it
  // removed have probability 0 and are not listed), and the chosen `token`'s log-probability
  // in `token_logprob`. `logits` as sample() left them; XTC's coin and Mirostat's target are
  // the last sample()'s. Returns how many were written.
  size_t post_sampling_top(std::span<const float> logits, int32_t token,
                           std::span<TokenLogprob> out, float& token_logprob);

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    int32_t token;
  };

  void apply_bias_and_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                                std::span<const int32_t> output);
  int32_t draw(std::span<const float> logits);
  // Fills candidates_ with the tokens that survive the chain's filters in the params' order
  // (logits divided by the temperature); returns how many, and the largest scaled logit.
  size_t select_candidates(std::span<const float> logits, float& max_logit);
  size_t select_llama_cpp_order(std::span<const float> logits, float& max_logit);
  size_t select_mirostat(std::span<const float> logits, float& max_logit);
  // Keeps the k most likely of the first `count` candidates, sorted.
  size_t keep_top_k(size_t count, int32_t k);
  size_t keep_top_p(size_t count, float max_logit);
  size_t keep_typical(size_t count);
  size_t keep_xtc(size_t count);
  size_t apply_dynamic_temperature(size_t count);
  // The largest logit of the first `count` candidates.
  float max_of(size_t count) const;
  // The softmax entropy (nats) of the first `count` candidates; `total` is mass(count, top).
  double entropy(size_t count, float top, double total) const;
  // The softmax denominator of the first `count` candidates, relative to max_logit.
  double mass(size_t count, float max_logit) const;

  SamplingParams params_;
  int32_t n_vocab_;
  Rng rng_;
  std::vector<Candidate> candidates_;  // [n_vocab]
  std::vector<int32_t> counts_;        // [n_vocab] occurrences in the penalty window
  std::vector<int32_t> touched_;       // ids whose count is non-zero, to reset cheaply
  std::vector<float> scores_;          // [n_vocab] typical sampling's distance from the entropy
  std::unique_ptr<DryPenalty> dry_;    // when DRY is on
  // Mirostat's target surprise (mu), and the one the last sample() truncated with.
  float mu_ = 0;
  float last_mu_ = 0;
  bool last_xtc_fired_ = false;  // whether the last sample()'s XTC coin removed tokens
  bool replaying_ = false;       // post_sampling_top: the last sample()'s coin and target
  bool logprobs_;
  float last_logsumexp_ = 0;
  float last_logprob_ = 0;
};

}  // namespace inferd::sampling
