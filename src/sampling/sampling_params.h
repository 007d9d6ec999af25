// SamplingParams: how the next token is chosen from the logits. Defaults are llama.cpp's
// command-line defaults; the server maps OpenAI fields onto the same struct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace inferd::sampling {

struct SamplingParams {
  static constexpr uint64_t kRandomSeed = ~uint64_t{0};  // draw a seed from the OS
  static constexpr size_t kMaxDryBreakers = 64;

  float temperature = 0.8f;  // below 1e-5: greedy (argmax, lowest id on ties)
  int32_t top_k = 40;        // keep the k most likely tokens; <= 0: off
  float top_p = 0.95f;       // keep the smallest set with this much probability; 1: off
  float min_p = 0.05f;       // drop tokens below min_p * p(most likely); 0: off
  // Repetition penalty (CTRL / llama.cpp): over the last `repeat_last_n` tokens of prompt and
  // output (-1: all of them), a positive logit is divided by it and a negative one multiplied.
  float repetition_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  // OpenAI / vLLM penalties over the generated tokens only:
  // logit -= frequency_penalty * count + presence_penalty * (count > 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  uint64_t seed = kRandomSeed;
  // The order of the filters. vLLM's (false): temperature first, then min-p, top-k and top-p on
  // the scaled probabilities. llama.cpp's (true, its own /completion API): top-k, top-p, then
  // min-p on the unscaled probabilities, temperature last, so the kept set does not depend on
  // the temperature and top-p's mass is that of the top-k tokens, not of min-p's survivors.
  bool llama_cpp_order = false;

  // llama.cpp's own samplers (vLLM has none of them). Any of typical_p, top_n_sigma, XTC and
  // dynamic temperature samples the request by llama.cpp's chain, whatever llama_cpp_order
  // says: penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, then temperature.
  float typical_p = 1.0f;     // locally typical sampling's mass; 1: off
  float top_n_sigma = -1.0f;  // keep logits within n standard deviations of the top; <= 0: off
  // XTC: with this probability a step removes every token at or above the threshold but the
  // least likely of them (off unless two or more are there).
  float xtc_probability = 0.0f;
  float xtc_threshold = 0.1f;  // above 0.5: off
  // Dynamic temperature: temperature +- range, by the normalised entropy of the candidates
  // raised to the exponent.
  float dynatemp_range = 0.0f;
  float dynatemp_exponent = 1.0f;
  // Mirostat 1 or 2 (0: off) replaces top-k/top-p/min-p and the rest: after the penalties and
  // temperature it keeps the tokens whose surprise fits the running target (llama.cpp applies
  // no penalties under Mirostat; inferd applies the ones a request asks for).
  int32_t mirostat = 0;
  float mirostat_tau = 5.0f;  // target surprise in bits
  float mirostat_eta = 0.1f;  // learning rate
  // DRY ("don't repeat yourself"): a token that would extend a repeat of the last
  // dry_penalty_last_n tokens (prompt and output) longer than dry_allowed_length loses
  // dry_multiplier * dry_base ^ (length - allowed) of its logit. A repeat does not reach back
  // over a sequence breaker. 0 multiplier: off; -1 last_n: the whole context.
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_penalty_last_n = 64;
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};

  bool dry() const { return dry_multiplier != 0.0f && dry_penalty_last_n != 0; }
  // Whether a sampler only llama.cpp's chain has is on (llama_cpp_order is then implied).
  bool uses_llama_cpp_samplers() const {
    return typical_p < 1.0f || top_n_sigma > 0.0f ||
           (xtc_probability > 0.0f && xtc_threshold <= 0.5f) || dynatemp_range > 0.0f;
  }

  // Greedy: argmax (dynamic temperature, without Mirostat, moves a zero temperature up by the
  // entropy).
  bool greedy() const { return temperature < 1e-5f && !(dynatemp_range > 0.0f && mirostat == 0); }
  // Throws inferd::Error naming the first parameter outside its range. `n_vocab` > 0 also
  // checks the logit_bias token ids.
  void validate(int32_t n_vocab = 0) const;
};

}  // namespace inferd::sampling
