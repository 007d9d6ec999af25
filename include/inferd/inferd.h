/* inferd's C ABI: open a GGUF model, generate from prompts or chat messages (batched through
 * the engine's scheduler), stream text through a callback, read the results.
 *
 * Lifetimes are explicit: what inferd_engine_open and inferd_generate/inferd_chat hand out
 * (an engine, a result, an error string) belongs to the caller until it is given back with
 * inferd_engine_close, inferd_result_free or inferd_string_free. Strings and arrays read from
 * a result live as long as the result. Nothing else is allocated for the caller.
 *
 * Errors: every function that can fail returns an inferd_status; on failure, when `error` is
 * not NULL, *error receives a message naming the problem (free it with inferd_string_free), and
 * the output handle is left NULL. No function lets a C++ exception escape.
 *
 * Thread safety is stated per function. In short: different engines are independent; one
 * engine serves one call at a time (calls from several threads wait for one another);
 * inferd_engine_cancel may be called from any thread at any time; a result may be read from
 * several threads at once. Structs are versioned by their first field, `size`, which the
 * *_init functions set: always start from them.
 */
#ifndef INFERD_INFERD_H
#define INFERD_INFERD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum inferd_status {
  INFERD_OK = 0,
  INFERD_ERROR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option, a prompt that does not fit */
  INFERD_ERROR_MODEL = 2,            /* the model file could not be opened, read or run */
  INFERD_ERROR_OUT_OF_MEMORY = 3,
  INFERD_ERROR_CANCELLED = 4, /* inferd_engine_cancel or a stream callback stopped the call; the
                                 result holds what was made */
  INFERD_ERROR_INTERNAL = 5
} inferd_status;

typedef enum inferd_finish_reason {
  INFERD_FINISH_STOP = 0,   /* end-of-generation token, stop string or completed grammar */
  INFERD_FINISH_LENGTH = 1, /* max_tokens or a full context */
  INFERD_FINISH_CANCELLED = 2,
  INFERD_FINISH_ERROR = 3
} inferd_finish_reason;

typedef enum inferd_kv_type {
  INFERD_KV_F16 = 0,
  INFERD_KV_Q8_0 = 1,
  INFERD_KV_Q4_0 = 2
} inferd_kv_type;

typedef struct inferd_engine inferd_engine; /* a loaded model and its KV cache */
typedef struct inferd_result inferd_result; /* the outputs of one generate/chat call */

typedef struct inferd_engine_options {
  size_t size;                /* sizeof(inferd_engine_options), set by inferd_engine_options_init */
  int32_t threads;            /* 0: the number of cores, at most 4 */
  int64_t context;            /* tokens per sequence; 0: the model's, at most 4096 */
  int32_t max_seqs;           /* sequences decoded together (default 16) */
  int64_t max_batched_tokens; /* tokens per engine step (default 512) */
  inferd_kv_type kv_type_k;
  inferd_kv_type kv_type_v;
  int32_t prefix_caching;    /* nonzero (default): reuse cached prompt prefixes */
  const char* chat_template; /* NULL: the model's; else a built-in name or a file */
  /* Since 0.1.3 (an older, shorter struct gets none). n_lora_adapters LoRA adapters in
   * llama.cpp's GGUF form, applied to every request: lora_scales[i] (NULL: 1 each) scales
   * lora_paths[i] as llama.cpp's --lora-scaled does. CPU, one process. */
  const char* const* lora_paths;
  const float* lora_scales;
  size_t n_lora_adapters;
} inferd_engine_options;

typedef struct inferd_sampling_params {
  size_t size;              /* sizeof(inferd_sampling_params), set by inferd_sampling_params_init */
  int32_t n;                /* choices per prompt (default 1) */
  float temperature;        /* default 0.8; 0: greedy */
  int32_t top_k;            /* default 40; 0: off */
  float top_p;              /* default 0.95; 1: off */
  float min_p;              /* default 0.05; 0: off */
  float repetition_penalty; /* default 1: off */
  int32_t repeat_last_n;    /* default 64 */
  float presence_penalty;
  float frequency_penalty;
  /* -1 (default): a new seed each call; else reproducible, choice i sampling with seed + i. */
  int64_t seed;
  int64_t max_tokens; /* default 256 */
  /* n_stop stop strings: the text ends before the first one and never holds it. */
  const char* const* stop;
  size_t n_stop;
  int32_t ignore_eos;
  /* -1 (default): none; k >= 0: each token's log-probability (k alternatives in the C++ API). */
  int32_t logprobs;
  const char* json_schema; /* structured output, at most one of the three (NULL: none) */
  const char* grammar;     /* GBNF, start rule root */
  const char* regex;
  /* Since 0.1.1; a caller built against an older header passes a smaller size and gets the
   * defaults below. */
  /* n_stop_token_ids token ids that end the output as an end-of-generation token does (the
   * finish reason is INFERD_FINISH_STOP; the token is not in the text), ignore_eos or not. */
  const int32_t* stop_token_ids;
  size_t n_stop_token_ids;
  int64_t min_tokens;   /* no end-of-generation or stop token before this many (default 0) */
  int32_t beam_width;   /* > 0: beam search, its n best beams as the choices (default 0) */
  float length_penalty; /* beam score: cumulative logprob / length ^ length_penalty (default 1) */
  /* The stop string that ends the text is kept at its end (nonzero; default 0). */
  int32_t include_stop_str_in_output;
  /* n_allowed_token_ids > 0: only these tokens are sampled (end-of-generation ones if listed). */
  const int32_t* allowed_token_ids;
  size_t n_allowed_token_ids;
  /* n_logit_bias biases: logit_bias_values[i] is added to token logit_bias_tokens[i]'s logit. */
  const int32_t* logit_bias_tokens;
  const float* logit_bias_values;
  size_t n_logit_bias;
  /* Since 0.1.2. -1 (default): none; k >= 0: each prompt token's log-probability under the
   * model's distribution before it (inferd_result_prompt_logprobs; k alternatives in the C++
   * API). Such a prompt is computed whole, never from the prefix cache. */
  int32_t prompt_logprobs;
  /* Since 0.1.3: vLLM's bad words (n_bad_words texts the output never spells), and llama.cpp's
   * samplers with its defaults (inferd_sampling_params_init: all off; SamplingParams in
   * sampling_params.h says what each does). dry_sequence_breakers NULL: llama.cpp's default
   * breakers; else n_dry_sequence_breakers of them (0: none). */
  const char* const* bad_words;
  size_t n_bad_words;
  float typical_p;
  float top_n_sigma;
  float xtc_probability;
  float xtc_threshold;
  float dynatemp_range;
  float dynatemp_exponent;
  int32_t mirostat;
  float mirostat_tau;
  float mirostat_eta;
  float dry_multiplier;
  float dry_base;
  int32_t dry_allowed_length;
  int32_t dry_penalty_last_n;
  const char* const* dry_sequence_breakers;
  size_t n_dry_sequence_breakers;
  /* Since 0.1.4. n_lora_scales > 0: this call's scale of each of the engine's LoRA adapters
   * (inferd_engine_options.lora_paths, one each, in that order; 0 leaves one out); 0 (default):
   * the adapters' own scales. Calls with different scales share the engine's cached prompt
   * blocks only with calls of the same scales. */
  const float* lora_scales;
  size_t n_lora_scales;
} inferd_sampling_params;

typedef struct inferd_chat_message {
  const char* role; /* "system", "user", "assistant" */
  const char* content;
} inferd_chat_message;

/* Streamed text: `text` (text_len bytes, not NUL-terminated, whole UTF-8 characters) of choice
 * `choice` of prompt `prompt_index`; `finished` is nonzero on a choice's last call (text_len may
 * be 0 then; text is never NULL). Called on the thread of inferd_generate/inferd_chat, between
 * engine steps. Return 0 to go on, nonzero to cancel the whole call (INFERD_ERROR_CANCELLED). */
typedef int (*inferd_stream_fn)(void* user_data, size_t prompt_index, int32_t choice,
                                const char* text, size_t text_len, int32_t finished);

/* "MAJOR.MINOR.PATCH". Thread-safe. */
const char* inferd_version(void);
/* A static name for a status ("ok", "invalid argument", ...). Thread-safe. */
const char* inferd_status_name(inferd_status status);
/* Frees a string the library handed out (NULL is fine). Thread-safe. */
void inferd_string_free(char* string);

/* Defaults, as `inferd run`'s. Thread-safe. */
void inferd_engine_options_init(inferd_engine_options* options);
void inferd_sampling_params_init(inferd_sampling_params* params);

/* Loads a model. options NULL: defaults. On success *out is the engine; on failure NULL and
 * the status says why (INFERD_ERROR_MODEL for a missing or bad file). Thread-safe. */
inferd_status inferd_engine_open(const char* model_path, const inferd_engine_options* options,
                                 inferd_engine** out, char** error);
/* Frees the engine (NULL is fine). Not while another thread uses it. */
void inferd_engine_close(inferd_engine* engine);

/* Generates for n_prompts prompts, all batched together. params NULL: defaults. stream may be
 * NULL. On success (and on INFERD_ERROR_CANCELLED) *out is the result. Thread-safe: calls on
 * one engine run one after another. */
inferd_status inferd_generate(inferd_engine* engine, const char* const* prompts, size_t n_prompts,
                              const inferd_sampling_params* params, inferd_stream_fn stream,
                              void* user_data, inferd_result** out, char** error);
/* One conversation through the chat template, answered as the assistant; the result has one
 * prompt. Thread-safe as inferd_generate. */
inferd_status inferd_chat(inferd_engine* engine, const inferd_chat_message* messages,
                          size_t n_messages, const inferd_sampling_params* params,
                          inferd_stream_fn stream, void* user_data, inferd_result** out,
                          char** error);
/* Cancels the call running on `engine`, if any (its requests finish as cancelled at the next
 * step). Thread-safe, and safe from a stream callback. */
void inferd_engine_cancel(inferd_engine* engine);

/* Reading a result: thread-safe (a result is not changed after it is made). An index out of
 * range gives 0 / NULL. */
size_t inferd_result_num_prompts(const inferd_result* result);
size_t inferd_result_num_choices(const inferd_result* result, size_t prompt_index);
/* NUL-terminated; *len (when not NULL) gets its length in bytes. */
const char* inferd_result_text(const inferd_result* result, size_t prompt_index, size_t choice,
                               size_t* len);
const int32_t* inferd_result_tokens(const inferd_result* result, size_t prompt_index, size_t choice,
                                    size_t* count);
/* With logprobs >= 0: one log-probability per generated token (count as for the tokens). */
const float* inferd_result_logprobs(const inferd_result* result, size_t prompt_index, size_t choice,
                                    size_t* count);
/* With prompt_logprobs >= 0: one log-probability per prompt token, the first NaN (nothing
 * predicts it); count as for the tokens. NULL when not asked for. */
const float* inferd_result_prompt_logprobs(const inferd_result* result, size_t prompt_index,
                                           size_t* count);
inferd_finish_reason inferd_result_finish_reason(const inferd_result* result, size_t prompt_index,
                                                 size_t choice);
size_t inferd_result_prompt_tokens(const inferd_result* result, size_t prompt_index);
/* Frees a result (NULL is fine). Not while another thread reads it. */
void inferd_result_free(inferd_result* result);

#ifdef __cplusplus
}
#endif

#endif /* INFERD_INFERD_H */
