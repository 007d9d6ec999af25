// The C ABI (include/inferd/inferd.h) over the C++ API: handles own C++ objects, exceptions
// become status codes with a malloc'd message, and nothing throws across the boundary.
#include "inferd/inferd.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "inferd/engine.h"

struct inferd_engine {
  explicit inferd_engine(inferd::Engine e) : engine(std::move(e)) {}
  inferd::Engine engine;
  std::mutex call_mutex;    // one call at a time, so that `running` is the call that runs
  std::mutex cancel_mutex;  // guards `running`
  std::optional<inferd::CancelToken> running;
};

struct inferd_result {
  std::vector<inferd::RequestOutput> outputs;
  std::vector<std::vector<std::vector<float>>> logprobs;  // [prompt][choice][token]
  std::vector<std::vector<float>> prompt_logprobs;        // [prompt][prompt token]
};

namespace {

char* copy_string(const std::string& text) {
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy != nullptr) std::memcpy(copy, text.c_str(), text.size() + 1);
  return copy;
}

inferd_status fail(char** error, inferd_status status, const std::string& message) {
  if (error != nullptr) *error = copy_string(message);
  return status;
}

// Runs `body`, turning what it throws into a status and message. `load` says whether an
// inferd::Error is about the model file (opening) or the call's arguments.
template <typename Body>
inferd_status guarded(char** error, bool load, Body&& body) {
  if (error != nullptr) *error = nullptr;
  try {
    return body();
  } catch (const inferd::Error& e) {
    return fail(error, load ? INFERD_ERROR_MODEL : INFERD_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(error, INFERD_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(error, INFERD_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(error, INFERD_ERROR_INTERNAL, "unknown error");
  }
}

// A struct given by a caller built against an older header is shorter: read only the fields
// it has. `minimum`: the size of the struct's first release (inferd_sampling_params grew in
// 0.1.1, 0.1.2, 0.1.3 and 0.1.4; inferd_engine_options in 0.1.3).
template <typename T>
bool valid_size(const T* s, size_t minimum = sizeof(T)) {
  return s->size >= minimum;
}

// A caller's array of n values (`count` names n): NULL with n > 0 is an error naming it.
void check_array(const void* array, size_t n, const char* name, const char* count) {
  if (n > 0 && array == nullptr)
    throw inferd::Error(std::string(name) + " is NULL but " + count + " is not 0");
}

// A caller's array of n strings (`count` names n) as std::strings: a NULL array with n > 0, or a
// NULL string in it, is an error naming it.
std::vector<std::string> c_strings(const char* const* array, size_t n, const char* name,
                                   const char* count) {
  check_array(array, n, name, count);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    if (array[i] == nullptr)
      throw inferd::Error(std::string(name) + "[" + std::to_string(i) + "] is NULL");
    out.emplace_back(array[i]);
  }
  return out;
}

inferd::SamplingParams to_params(const inferd_sampling_params* p) {
  inferd::SamplingParams params;
  if (p == nullptr) return params;
  if (!valid_size(p, offsetof(inferd_sampling_params, stop_token_ids)))
    throw inferd::Error(
        "inferd_sampling_params: size is not set; call inferd_sampling_params_init");
  params.n = p->n;
  params.temperature = p->temperature;
  params.top_k = p->top_k;
  params.top_p = p->top_p;
  params.min_p = p->min_p;
  params.repetition_penalty = p->repetition_penalty;
  params.repeat_last_n = p->repeat_last_n;
  params.presence_penalty = p->presence_penalty;
  params.frequency_penalty = p->frequency_penalty;
  if (p->seed < -1) throw inferd::Error("seed must be -1 (random) or a non-negative number");
  if (p->seed >= 0) params.seed = static_cast<uint64_t>(p->seed);
  params.max_tokens = p->max_tokens;
  params.stop = c_strings(p->stop, p->n_stop, "stop", "n_stop");
  params.ignore_eos = p->ignore_eos != 0;
  params.logprobs = p->logprobs;
  if (p->json_schema != nullptr) params.json_schema = p->json_schema;
  if (p->grammar != nullptr) params.grammar = p->grammar;
  if (p->regex != nullptr) params.regex = p->regex;
  // The fields added in 0.1.1, where the caller's struct has them.
  if (p->size >= offsetof(inferd_sampling_params, prompt_logprobs)) {
    check_array(p->stop_token_ids, p->n_stop_token_ids, "stop_token_ids", "n_stop_token_ids");
    check_array(p->allowed_token_ids, p->n_allowed_token_ids, "allowed_token_ids",
                "n_allowed_token_ids");
    check_array(p->logit_bias_tokens, p->n_logit_bias, "logit_bias_tokens", "n_logit_bias");
    check_array(p->logit_bias_values, p->n_logit_bias, "logit_bias_values", "n_logit_bias");
    params.stop_token_ids.assign(p->stop_token_ids, p->stop_token_ids + p->n_stop_token_ids);
    params.min_tokens = p->min_tokens;
    params.beam_width = p->beam_width;
    params.length_penalty = p->length_penalty;
    params.include_stop_str_in_output = p->include_stop_str_in_output != 0;
    params.allowed_token_ids.assign(p->allowed_token_ids,
                                    p->allowed_token_ids + p->n_allowed_token_ids);
    for (size_t i = 0; i < p->n_logit_bias; ++i)
      params.logit_bias.emplace_back(p->logit_bias_tokens[i], p->logit_bias_values[i]);
  }
  // 0.1.2's.
  if (p->size >= offsetof(inferd_sampling_params, prompt_logprobs) + sizeof(p->prompt_logprobs))
    params.prompt_logprobs = p->prompt_logprobs;
  // 0.1.3's.
  if (p->size >= offsetof(inferd_sampling_params, lora_scales)) {
    params.bad_words = c_strings(p->bad_words, p->n_bad_words, "bad_words", "n_bad_words");
    params.typical_p = p->typical_p;
    params.top_n_sigma = p->top_n_sigma;
    params.xtc_probability = p->xtc_probability;
    params.xtc_threshold = p->xtc_threshold;
    params.dynatemp_range = p->dynatemp_range;
    params.dynatemp_exponent = p->dynatemp_exponent;
    params.mirostat = p->mirostat;
    params.mirostat_tau = p->mirostat_tau;
    params.mirostat_eta = p->mirostat_eta;
    params.dry_multiplier = p->dry_multiplier;
    params.dry_base = p->dry_base;
    params.dry_allowed_length = p->dry_allowed_length;
    params.dry_penalty_last_n = p->dry_penalty_last_n;
    if (p->dry_sequence_breakers != nullptr || p->n_dry_sequence_breakers > 0)
      params.dry_sequence_breakers = c_strings(p->dry_sequence_breakers, p->n_dry_sequence_breakers,
                                               "dry_sequence_breakers", "n_dry_sequence_breakers");
  }
  // 0.1.4's.
  if (p->size >= sizeof(inferd_sampling_params)) {
    check_array(p->lora_scales, p->n_lora_scales, "lora_scales", "n_lora_scales");
    params.lora_scales.assign(p->lora_scales, p->lora_scales + p->n_lora_scales);
  }
  return params;
}

inferd::KvCacheType kv_type(inferd_kv_type type) {
  switch (type) {
    case INFERD_KV_F16:
      return inferd::KvCacheType::kF16;
    case INFERD_KV_Q8_0:
      return inferd::KvCacheType::kQ8_0;
    case INFERD_KV_Q4_0:
      return inferd::KvCacheType::kQ4_0;
  }
  throw inferd::Error("unknown KV cache type " + std::to_string(static_cast<int>(type)));
}

inferd_finish_reason c_reason(inferd::FinishReason reason) {
  switch (reason) {
    case inferd::FinishReason::kStop:
      return INFERD_FINISH_STOP;
    case inferd::FinishReason::kLength:
      return INFERD_FINISH_LENGTH;
    case inferd::FinishReason::kCancelled:
      return INFERD_FINISH_CANCELLED;
    case inferd::FinishReason::kError:
      return INFERD_FINISH_ERROR;
  }
  return INFERD_FINISH_ERROR;
}

// Runs one call of `engine` with a fresh cancel token that inferd_engine_cancel can reach, and
// packs its outputs into a result.
template <typename Call>
inferd_status run_call(inferd_engine* engine, inferd_stream_fn stream, void* user_data,
                       inferd_result** out, Call&& call) {
  std::lock_guard call_lock(engine->call_mutex);
  inferd::CancelToken token;
  {
    std::lock_guard lock(engine->cancel_mutex);
    engine->running = token;
  }
  struct Clear {
    inferd_engine* engine;
    ~Clear() {
      std::lock_guard lock(engine->cancel_mutex);
      engine->running.reset();
    }
  } clear{engine};
  inferd::StreamCallback on_delta;
  if (stream != nullptr) {
    on_delta = [&](const inferd::StreamDelta& d) {
      if (stream(user_data, d.prompt_index, d.choice, d.text.data(), d.text.size(),
                 d.finished ? 1 : 0) != 0)
        token.cancel();
    };
  }
  auto result = std::make_unique<inferd_result>();
  result->outputs = call(on_delta, token);
  result->logprobs.resize(result->outputs.size());
  for (size_t p = 0; p < result->outputs.size(); ++p) {
    for (const inferd::CompletionOutput& choice : result->outputs[p].outputs) {
      std::vector<float> values;
      values.reserve(choice.logprobs.size());
      for (const inferd::TokenLogprobs& t : choice.logprobs) values.push_back(t.logprob);
      result->logprobs[p].push_back(std::move(values));
    }
    std::vector<float>& prompt = result->prompt_logprobs.emplace_back();
    for (const inferd::PromptTokenLogprobs& t : result->outputs[p].prompt_logprobs)
      prompt.push_back(t.logprob);
  }
  *out = result.release();
  return token.cancelled() ? INFERD_ERROR_CANCELLED : INFERD_OK;
}

const inferd::CompletionOutput* choice_of(const inferd_result* r, size_t prompt, size_t choice) {
  if (r == nullptr || prompt >= r->outputs.size() || choice >= r->outputs[prompt].outputs.size())
    return nullptr;
  return &r->outputs[prompt].outputs[choice];
}

}  // namespace

extern "C" {

const char* inferd_version(void) {
  return inferd::version();
}

const char* inferd_status_name(inferd_status status) {
  switch (status) {
    case INFERD_OK:
      return "ok";
    case INFERD_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case INFERD_ERROR_MODEL:
      return "model error";
    case INFERD_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case INFERD_ERROR_CANCELLED:
      return "cancelled";
    case INFERD_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

void inferd_string_free(char* string) {
  std::free(string);
}

void inferd_engine_options_init(inferd_engine_options* options) {
  if (options == nullptr) return;
  const inferd::EngineOptions defaults;
  *options = inferd_engine_options{};
  options->size = sizeof(inferd_engine_options);
  options->threads = defaults.threads;
  options->context = defaults.context;
  options->max_seqs = defaults.max_seqs;
  options->max_batched_tokens = defaults.max_batched_tokens;
  options->kv_type_k = INFERD_KV_F16;
  options->kv_type_v = INFERD_KV_F16;
  options->prefix_caching = defaults.prefix_caching ? 1 : 0;
  options->chat_template = nullptr;
}

void inferd_sampling_params_init(inferd_sampling_params* params) {
  if (params == nullptr) return;
  const inferd::SamplingParams defaults;
  *params = inferd_sampling_params{};
  params->size = sizeof(inferd_sampling_params);
  params->n = defaults.n;
  params->temperature = defaults.temperature;
  params->top_k = defaults.top_k;
  params->top_p = defaults.top_p;
  params->min_p = defaults.min_p;
  params->repetition_penalty = defaults.repetition_penalty;
  params->repeat_last_n = defaults.repeat_last_n;
  params->presence_penalty = defaults.presence_penalty;
  params->frequency_penalty = defaults.frequency_penalty;
  params->seed = -1;
  params->max_tokens = defaults.max_tokens;
  params->logprobs = defaults.logprobs;
  params->min_tokens = defaults.min_tokens;
  params->beam_width = defaults.beam_width;
  params->length_penalty = defaults.length_penalty;
  params->prompt_logprobs = defaults.prompt_logprobs;
  params->typical_p = defaults.typical_p;
  params->top_n_sigma = defaults.top_n_sigma;
  params->xtc_probability = defaults.xtc_probability;
  params->xtc_threshold = defaults.xtc_threshold;
  params->dynatemp_range = defaults.dynatemp_range;
  params->dynatemp_exponent = defaults.dynatemp_exponent;
  params->mirostat = defaults.mirostat;
  params->mirostat_tau = defaults.mirostat_tau;
  params->mirostat_eta = defaults.mirostat_eta;
  params->dry_multiplier = defaults.dry_multiplier;
  params->dry_base = defaults.dry_base;
  params->dry_allowed_length = defaults.dry_allowed_length;
  params->dry_penalty_last_n = defaults.dry_penalty_last_n;
  params->dry_sequence_breakers = nullptr;  // llama.cpp's defaults
}

inferd_status inferd_engine_open(const char* model_path, const inferd_engine_options* options,
                                 inferd_engine** out, char** error) {
  if (out != nullptr) *out = nullptr;
  if (out == nullptr)
    return fail(error, INFERD_ERROR_INVALID_ARGUMENT, "inferd_engine_open: out is NULL");
  if (model_path == nullptr)
    return fail(error, INFERD_ERROR_INVALID_ARGUMENT, "inferd_engine_open: model_path is NULL");
  inferd::EngineOptions opts;
  if (options != nullptr) {
    if (!valid_size(options, offsetof(inferd_engine_options, lora_paths)))
      return fail(error, INFERD_ERROR_INVALID_ARGUMENT,
                  "inferd_engine_options: size is not set; call inferd_engine_options_init");
    const inferd_status status = guarded(error, false, [&] {
      opts.threads = options->threads;
      opts.context = options->context;
      opts.max_seqs = options->max_seqs;
      opts.max_batched_tokens = options->max_batched_tokens;
      opts.kv_cache_type_k = kv_type(options->kv_type_k);
      opts.kv_cache_type_v = kv_type(options->kv_type_v);
      opts.prefix_caching = options->prefix_caching != 0;
      if (options->chat_template != nullptr) opts.chat_template = options->chat_template;
      if (options->size >= sizeof(inferd_engine_options)) {  // 0.1.3's LoRA adapters
        const std::vector<std::string> paths = c_strings(
            options->lora_paths, options->n_lora_adapters, "lora_paths", "n_lora_adapters");
        for (size_t i = 0; i < paths.size(); ++i)
          opts.lora_adapters.push_back(
              {paths[i], options->lora_scales ? options->lora_scales[i] : 1.0f});
      }
      // Checked here too (the engine checks them again) so that a bad option is
      // INFERD_ERROR_INVALID_ARGUMENT, not taken for a problem with the model.
      if (opts.threads < 0) throw inferd::Error("threads must be 0 (default) or more");
      if (opts.max_seqs < 1) throw inferd::Error("max_seqs must be at least 1");
      if (opts.context < 0) throw inferd::Error("context must be 0 (the model's) or more");
      if (opts.max_batched_tokens < 1) throw inferd::Error("max_batched_tokens must be at least 1");
      return INFERD_OK;
    });
    if (status != INFERD_OK) return status;
  }
  return guarded(error, true, [&] {
    *out = new inferd_engine(inferd::Engine(model_path, opts));
    return INFERD_OK;
  });
}

void inferd_engine_close(inferd_engine* engine) {
  delete engine;
}

void inferd_engine_cancel(inferd_engine* engine) {
  if (engine == nullptr) return;
  std::lock_guard lock(engine->cancel_mutex);
  if (engine->running) engine->running->cancel();
}

inferd_status inferd_generate(inferd_engine* engine, const char* const* prompts, size_t n_prompts,
                              const inferd_sampling_params* params, inferd_stream_fn stream,
                              void* user_data, inferd_result** out, char** error) {
  if (out != nullptr) *out = nullptr;
  if (engine == nullptr || out == nullptr || (prompts == nullptr && n_prompts > 0))
    return fail(error, INFERD_ERROR_INVALID_ARGUMENT,
                "inferd_generate: engine, out and prompts must not be NULL");
  return guarded(error, false, [&] {
    std::vector<std::string> texts;
    for (size_t i = 0; i < n_prompts; ++i) {
      if (prompts[i] == nullptr) throw inferd::Error("prompts[" + std::to_string(i) + "] is NULL");
      texts.emplace_back(prompts[i]);
    }
    const inferd::SamplingParams sampling = to_params(params);
    return run_call(engine, stream, user_data, out,
                    [&](const inferd::StreamCallback& on_delta, const inferd::CancelToken& token) {
                      return engine->engine.generate(texts, sampling, on_delta, token);
                    });
  });
}

inferd_status inferd_chat(inferd_engine* engine, const inferd_chat_message* messages,
                          size_t n_messages, const inferd_sampling_params* params,
                          inferd_stream_fn stream, void* user_data, inferd_result** out,
                          char** error) {
  if (out != nullptr) *out = nullptr;
  if (engine == nullptr || out == nullptr || (messages == nullptr && n_messages > 0))
    return fail(error, INFERD_ERROR_INVALID_ARGUMENT,
                "inferd_chat: engine, out and messages must not be NULL");
  return guarded(error, false, [&] {
    std::vector<inferd::ChatMessage> conversation;
    for (size_t i = 0; i < n_messages; ++i) {
      if (messages[i].role == nullptr || messages[i].content == nullptr)
        throw inferd::Error("messages[" + std::to_string(i) +
                            "]: role and content must not be NULL");
      conversation.push_back({messages[i].role, messages[i].content});
    }
    const inferd::SamplingParams sampling = to_params(params);
    return run_call(engine, stream, user_data, out,
                    [&](const inferd::StreamCallback& on_delta, const inferd::CancelToken& token) {
                      return engine->engine.chat_batch({conversation}, sampling, on_delta, token);
                    });
  });
}

size_t inferd_result_num_prompts(const inferd_result* result) {
  return result == nullptr ? 0 : result->outputs.size();
}

size_t inferd_result_num_choices(const inferd_result* result, size_t prompt_index) {
  if (result == nullptr || prompt_index >= result->outputs.size()) return 0;
  return result->outputs[prompt_index].outputs.size();
}

const char* inferd_result_text(const inferd_result* result, size_t prompt_index, size_t choice,
                               size_t* len) {
  const inferd::CompletionOutput* c = choice_of(result, prompt_index, choice);
  if (len != nullptr) *len = c == nullptr ? 0 : c->text.size();
  return c == nullptr ? nullptr : c->text.c_str();
}

const int32_t* inferd_result_tokens(const inferd_result* result, size_t prompt_index, size_t choice,
                                    size_t* count) {
  const inferd::CompletionOutput* c = choice_of(result, prompt_index, choice);
  if (count != nullptr) *count = c == nullptr ? 0 : c->token_ids.size();
  return c == nullptr ? nullptr : c->token_ids.data();
}

const float* inferd_result_logprobs(const inferd_result* result, size_t prompt_index, size_t choice,
                                    size_t* count) {
  const inferd::CompletionOutput* c = choice_of(result, prompt_index, choice);
  if (count != nullptr) *count = 0;
  if (c == nullptr) return nullptr;
  const std::vector<float>& values = result->logprobs[prompt_index][choice];
  if (count != nullptr) *count = values.size();
  return values.empty() ? nullptr : values.data();
}

const float* inferd_result_prompt_logprobs(const inferd_result* result, size_t prompt_index,
                                           size_t* count) {
  if (count != nullptr) *count = 0;
  if (result == nullptr || prompt_index >= result->prompt_logprobs.size()) return nullptr;
  const std::vector<float>& values = result->prompt_logprobs[prompt_index];
  if (count != nullptr) *count = values.size();
  return values.empty() ? nullptr : values.data();
}

inferd_finish_reason inferd_result_finish_reason(const inferd_result* result, size_t prompt_index,
                                                 size_t choice) {
  const inferd::CompletionOutput* c = choice_of(result, prompt_index, choice);
  return c == nullptr ? INFERD_FINISH_ERROR : c_reason(c->finish_reason);
}

size_t inferd_result_prompt_tokens(const inferd_result* result, size_t prompt_index) {
  if (result == nullptr || prompt_index >= result->outputs.size()) return 0;
  return result->outputs[prompt_index].prompt_token_ids.size();
}

void inferd_result_free(inferd_result* result) {
  delete result;
}

}  // extern "C"
