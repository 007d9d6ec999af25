// inferd::SamplingParams: how a request's tokens are chosen and when its output ends, as vLLM's
// SamplingParams and llama.cpp's flags name them. The defaults are `inferd run`'s (llama.cpp's
// command-line defaults), so a program and the command given the same values make the same text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace inferd {

struct SamplingParams {
  // Choices per prompt. They share the prompt's KV blocks; with a seed, choice i samples with
  // seed + i, so every choice is reproducible on its own.
  int32_t n = 1;
  float temperature = 0.8f;  // below 1e-5: greedy (the most likely token, lowest id on ties)
  int32_t top_k = 40;        // keep the k most likely tokens; <= 0: off
  float top_p = 0.95f;       // keep the smallest set with this much probability; 1: off
  float min_p = 0.05f;       // drop tokens below min_p * p(most likely); 0: off
  // Over the last repeat_last_n tokens of prompt and output (-1: all): a positive logit is
  // divided by it, a negative one multiplied (llama.cpp's repeat penalty). 1: off.
  float repetition_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  // OpenAI's penalties over the generated tokens: logit -= frequency * count + presence * (count >
  // 0).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to a token's logit before sampling (OpenAI's and vLLM's logit_bias): token id, bias.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Unset: a new seed from the OS for each request. Set: the same prompt, settings and seed
  // give the same text.
  std::optional<uint64_t> seed;
  int64_t max_tokens = 256;  // most tokens generated per choice
  // Stop strings: the output ends before the first one and never contains it.
  std::vector<std::string> stop;
  bool ignore_eos = false;  // keep generating past the model's end-of-generation tokens
  // Token ids that end the output as an end-of-generation token does (not part of the text;
  // CompletionOutput::stop_token_id says which), ignore_eos or not.
  std::vector<int32_t> stop_token_ids;
  // Until this many tokens are generated, neither an end-of-generation token nor one of
  // stop_token_ids is sampled (at most max_tokens; not with beam search).
  int64_t min_tokens = 0;
  // The stop string that ends the text is kept at its end (CompletionOutput::stop_reason).
  bool include_stop_str_in_output = false;
  // When not empty, only these tokens are sampled (end-of-generation tokens only if listed).
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words: the output never spells one of these words in the tokens the tokenizer
  // gives it (alone, and after a space); at most 128 (not with beam search).
  std::vector<std::string> bad_words;
  // -1: none; k >= 0: each generated token's log-probability and its k most likely alternatives
  // (CompletionOutput::logprobs).
  int32_t logprobs = -1;
  // -1: none; k >= 0: each prompt token's log-probability, rank and the k most likely tokens at
  // its place, from the model's logits (RequestOutput::prompt_logprobs). Such a prompt is
  // computed whole, never started from the prefix cache (not with beam search).
  int32_t prompt_logprobs = -1;
  // Structured output, at most one of the three: the whole output matches a JSON schema (the
  // schema's text), a GBNF grammar (start rule `root`) or a regular expression.
  std::string json_schema;
  std::string grammar;
  std::string regex;
  // Beam search when > 0 (vLLM's BeamSearchParams): that many beams ranked by the model's
  // log-probabilities, score = cumulative logprob / length ^ length_penalty; the sampling
  // fields above do not apply, n hypotheses are returned best first, and text is delivered
  // only at the end (no stream deltas). Needs EngineOptions::max_seqs >= beam_width.
  int32_t beam_width = 0;
  float length_penalty = 1.0f;

  // llama.cpp's own samplers, with its defaults (all off). Any of typical_p, top_n_sigma, XTC
  // and dynamic temperature samples by llama.cpp's chain: penalties, DRY, top-n-sigma, top-k,
  // typical, top-p, min-p, XTC, then the temperature. Not with beam search.
  float typical_p = 1.0f;        // locally typical sampling's mass; 1: off
  float top_n_sigma = -1.0f;     // keep logits within n standard deviations of the top; <= 0: off
  float xtc_probability = 0.0f;  // XTC: the chance a step removes the top choices; 0: off
  float xtc_threshold = 0.1f;    // ... those at or above this probability but the least likely
  float dynatemp_range = 0.0f;   // dynamic temperature: temperature +- this, by the entropy
  float dynatemp_exponent = 1.0f;
  // Mirostat 1 or 2 (0: off): truncation that steers the surprise of the text to tau bits.
  int32_t mirostat = 0;
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  // DRY: a token that would extend a repeat of the last dry_penalty_last_n tokens (-1: all)
  // longer than dry_allowed_length loses dry_multiplier * dry_base ^ (length - allowed) of its
  // logit; repeats do not reach back over a sequence breaker. 0 multiplier: off.
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_penalty_last_n = 64;
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};

  // This request's scale of each of EngineOptions::lora_adapters, in their order (one each;
  // 0 leaves an adapter out), as llama-server's per-request `lora` gives them; empty: each
  // adapter's own scale. Requests with different scales run in the same steps and share cached
  // prompt blocks only with requests of the same scales.
  std::vector<float> lora_scales;

  // Greedy decoding: temperature 0 (what `inferd run --temp 0` does).
  static SamplingParams greedy() {
    SamplingParams params;
    params.temperature = 0.0f;
    return params;
  }
};

}  // namespace inferd
