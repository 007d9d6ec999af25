// llama-server's own completion API (POST /completion and /completions, as its users and code
// editors call it): its request fields turned into the OpenAI completions body the rest of the
// server parses, and its response objects built from a finished (or running) choice.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"
#include "server/api/openai_response.h"

namespace inferd::server {

// The /v1/completions body a native request means: prompt (text or token ids), n_predict
// (absent or -1: until the context ends, or the server's -n), n_probs (with post_sampling_probs:
// the sampler's probabilities), stream, temperature, top_k, top_p, min_p, seed, stop, penalties
// (repeat_penalty, presence_penalty, frequency_penalty), ignore_eos, logit_bias (llama.cpp's [[id
// or text, bias or false]] list or an object), json_schema, grammar. Fields that only steer
// llama.cpp's slots and caches (cache_prompt, id_slot, return_tokens, ...) change nothing here and
// are dropped; a sampler inferd does not have, set to anything but its neutral value (mirostat,
// typical_p, XTC, DRY, dynamic temperature, ...), is an ApiError naming it rather than ignored.
nlohmann::ordered_json native_to_openai(const nlohmann::ordered_json& body,
                                        const ParseContext& ctx);

// llama-server's prompt forms, as the prompts they hold: a text; token ids; a sequence mixing
// ids and texts (the texts tokenized without special tokens, joined in order); an object
// {"prompt_string": text} (with "multimodal_data": 400, no vision here); or a list of any of
// those for several prompts (a list of texts included). One prompt: a list of one. Each comes
// back as a text or a list of token ids, the forms the OpenAI body takes.
std::vector<nlohmann::ordered_json> native_prompts(const nlohmann::ordered_json& prompt,
                                                   const ParseContext& ctx);

// The parse context for a native request: its n_predict (or, without one, the server's -n or
// the whole context) becomes the default max_tokens, kept within the context after the prompt.
ParseContext native_parse_context(const nlohmann::ordered_json& body, const ParseContext& ctx);

// What a native response needs besides the choice.
struct NativeOptions {
  std::string model;
  bool return_tokens = false;        // "tokens": the ids (streamed chunks always carry theirs)
  int32_t n_probs = 0;               // completion_probabilities: this many alternatives per token
  bool post_sampling_probs = false;  // probabilities ("prob") instead of log-probabilities
};

// Sampling settings as llama-server names them (its generation_settings and /props params);
// a seed drawn per request shows as 4294967295, llama.cpp's "random".
nlohmann::ordered_json native_sampling_settings(const sampling::SamplingParams& sampling,
                                                int64_t n_predict);
// A streamed piece: {"index", "content", "tokens", "stop": false, "id_slot"} (+ probabilities).
nlohmann::ordered_json native_chunk(const std::string& content,
                                    const std::vector<TokenInfo>& tokens,
                                    const NativeOptions& options, const tokenizer::Tokenizer& tok);
// The whole answer, or a stream's last object ("stop": true): content (empty for a stream's
// last object), tokens, stop_type ("eos", "word", "limit"; "none" when cancelled),
// stopping_word, tokens_predicted, tokens_evaluated, tokens_cached, truncated, has_new_line,
// generation_settings (the sampling that ran), timings.
nlohmann::ordered_json native_final(const ChoiceOutput& choice, const CompletionRequest& request,
                                    const NativeOptions& options, const tokenizer::Tokenizer& tok,
                                    bool with_content);

}  // namespace inferd::server
