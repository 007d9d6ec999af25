// SamplingParams: how the next token is chosen from the logits. Defaults are llama.cpp's
// command-line defaults; the server maps OpenAI fields onto the same struct.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace inferd::sampling {

struct SamplingParams {
  static constexpr uint64_t kRandomSeed = ~uint64_t{0};  // draw a seed from the OS

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

  bool greedy() const { return temperature < 1e-5f; }
  // Throws inferd::Error naming the first parameter outside its range. `n_vocab` > 0 also
  // checks the logit_bias token ids.
  void validate(int32_t n_vocab = 0) const;
};

}  // namespace inferd::sampling
