// The public C++ API (include/inferd/engine.h) over the engine: options become an EngineConfig,
// each prompt a Request whose output channels collect text, tokens and logprobs and forward
// stream deltas; generate() queues them all and steps the engine until they finish.
#include "inferd/engine.h"

#include <algorithm>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/ranges.h>

#include "engine/bad_words.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "gguf/gguf.h"
#include "structured/grammar.h"
#include "tokenizer/builtin_templates.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"

#ifndef INFERD_VERSION_STRING
#define INFERD_VERSION_STRING "0.0.0"
#endif

namespace inferd {

const char* version() {
  return INFERD_VERSION_STRING;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

namespace {

DType kv_type(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF16:
      return DType::F16;
    case KvCacheType::kQ8_0:
      return DType::Q8_0;
    case KvCacheType::kQ4_0:
      return DType::Q4_0;
  }
  fail("unknown KV cache type {}", static_cast<int>(type));
}

FinishReason public_reason(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return FinishReason::kStop;
    case engine::FinishReason::kLength:
      return FinishReason::kLength;
    case engine::FinishReason::kCancelled:
      return FinishReason::kCancelled;
    case engine::FinishReason::kError:
      return FinishReason::kError;
  }
  return FinishReason::kError;
}

// The `inferd` command's default: the cores, at most 4 (small models gain nothing past that).
int default_threads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

engine::EngineConfig engine_config(const EngineOptions& options) {
  if (options.threads < 0) fail("threads must be 0 (default) or more, got {}", options.threads);
  if (options.max_seqs < 1) fail("max_seqs must be at least 1, got {}", options.max_seqs);
  if (options.context < 0) fail("context must be 0 (the model's) or more, got {}", options.context);
  if (options.max_batched_tokens < 1)
    fail("max_batched_tokens must be at least 1, got {}", options.max_batched_tokens);
  engine::EngineConfig config;
  config.threads = options.threads > 0 ? options.threads : default_threads();
  config.pin_threads = options.pin_threads;
  config.context = options.context;
  config.max_seqs = options.max_seqs;
  config.max_batched_tokens = options.max_batched_tokens;
  config.kv_key_type = kv_type(options.kv_cache_type_k);
  config.kv_value_type = kv_type(options.kv_cache_type_v);
  if (options.kv_exact_recent_tokens < 0)
    fail("kv_exact_recent_tokens must be at least 0, got {}", options.kv_exact_recent_tokens);
  config.kv_exact_recent = options.kv_exact_recent_tokens;
  config.swa_full = options.swa_full;
  config.prefix_caching = options.prefix_caching;
  config.device = options.device == Device::kCuda ? model::Device::kCuda : model::Device::kCpu;
  for (const EngineOptions::LoraAdapter& a : options.lora_adapters)
    config.lora.push_back({a.path, a.scale});
  config.tensor_parallel = options.tensor_parallel;
  config.pipeline_parallel = options.pipeline_parallel;
  config.data_parallel = options.data_parallel;
  config.expert_parallel = options.expert_parallel;
  config.grammar_thread = options.grammar_thread == GrammarThread::kOn ? engine::GrammarThread::kOn
                          : options.grammar_thread == GrammarThread::kOff
                              ? engine::GrammarThread::kOff
                              : engine::GrammarThread::kAuto;
  const SpeculativeOptions& spec = options.speculative;
  config.spec.method = engine::parse_spec_method(spec.method);
  config.spec.draft_model = spec.draft_model;
  config.spec.num_tokens = spec.num_tokens;
  config.spec.prompt_lookup_min = spec.prompt_lookup_min;
  config.spec.prompt_lookup_max = spec.prompt_lookup_max;
  config.spec.max_step_rows = spec.max_step_rows;
  return config;
}

sampling::SamplingParams engine_sampling(const SamplingParams& params) {
  sampling::SamplingParams s;
  s.temperature = params.temperature;
  s.top_k = params.top_k;
  s.top_p = params.top_p;
  s.min_p = params.min_p;
  s.repetition_penalty = params.repetition_penalty;
  s.repeat_last_n = params.repeat_last_n;
  s.presence_penalty = params.presence_penalty;
  s.frequency_penalty = params.frequency_penalty;
  s.logit_bias = params.logit_bias;
  s.seed = params.seed ? *params.seed : sampling::SamplingParams::kRandomSeed;
  s.typical_p = params.typical_p;
  s.top_n_sigma = params.top_n_sigma;
  s.xtc_probability = params.xtc_probability;
  s.xtc_threshold = params.xtc_threshold;
  s.dynatemp_range = params.dynatemp_range;
  s.dynatemp_exponent = params.dynatemp_exponent;
  s.mirostat = params.mirostat;
  s.mirostat_tau = params.mirostat_tau;
  s.mirostat_eta = params.mirostat_eta;
  s.dry_multiplier = params.dry_multiplier;
  s.dry_base = params.dry_base;
  s.dry_allowed_length = params.dry_allowed_length;
  s.dry_penalty_last_n = params.dry_penalty_last_n;
  s.dry_sequence_breakers = params.dry_sequence_breakers;
  return s;
}

// What one call shares among its output channels: the caller's stream callback and cancel
// token, and the first exception the callback threw.
struct CallState {
  const StreamCallback* on_delta = nullptr;
  CancelToken cancel;
  bool aborted = false;  // a later prompt was refused, or the callback threw: stop everything
  std::exception_ptr callback_error;

  void deliver(const StreamDelta& delta) {
    if (on_delta == nullptr || !*on_delta || callback_error) return;
    try {
      (*on_delta)(delta);
    } catch (...) {  // the engine's channels must not throw: keep it for generate() to rethrow
      callback_error = std::current_exception();
      aborted = true;
    }
  }
};

// One choice's channel: collects its output and streams its text.
class ChoiceChannel final : public engine::OutputChannel {
 public:
  ChoiceChannel(CallState& call, size_t prompt_index, int32_t choice)
      : call_(call), prompt_index_(prompt_index) {
    output_.index = choice;
  }
  void on_text(std::string_view text) override {
    output_.text.append(text);
    call_.deliver(StreamDelta{prompt_index_, output_.index, text, false, FinishReason::kStop});
  }
  void on_token(int32_t token, float logprob,
                std::span<const sampling::TokenLogprob> top) override {
    TokenLogprobs entry{token, logprob, {}};
    entry.top.reserve(top.size());
    for (const sampling::TokenLogprob& t : top) entry.top.push_back({t.token, t.logprob});
    output_.logprobs.push_back(std::move(entry));
  }
  void on_finish(const engine::RequestResult& result) override {
    result_ = result;
    finished_ = true;
    output_.finish_reason = public_reason(result.finish_reason);
    output_.error = result.error;
    output_.stop_reason = result.stop_word;
    output_.stop_token_id = result.stop_token;
    output_.token_ids = result.output_tokens;
    double sum = 0;
    for (const TokenLogprobs& t : output_.logprobs) sum += t.logprob;
    output_.cumulative_logprob = sum;
    // Empty text that still points somewhere: a callback may hand data() to fwrite or memcpy,
    // which must not get a null pointer even for no bytes (the C ABI passes it on as is).
    const std::string_view none("", 0);
    call_.deliver(StreamDelta{prompt_index_, output_.index, none, true, output_.finish_reason});
  }
  bool cancelled() const override { return call_.aborted || call_.cancel.cancelled(); }

  CompletionOutput& output() { return output_; }
  const engine::RequestResult& result() const { return result_; }
  bool finished() const { return finished_; }

 private:
  CallState& call_;
  size_t prompt_index_;
  CompletionOutput output_;
  engine::RequestResult result_;
  bool finished_ = false;
};

tokenizer::ChatTemplate read_template_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    fail("chat template '{}' is neither a built-in template ({}) nor a readable file", path,
         fmt::join(tokenizer::builtin_template_names(), ", "));
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return tokenizer::ChatTemplate(text.str());
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace

// Hidden: the version script exports inferd::Engine::*, and the Impl's functions are not API.
struct __attribute__((visibility("hidden"))) Engine::Impl {
  // The engine reads the weights in place from the file's map: the file goes first and is
  // destroyed last.
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<engine::Engine> engine;
  EngineOptions options;
  std::optional<tokenizer::ChatTemplate> chat_template;  // loaded at the first chat
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler;
  mutable std::mutex mutex;  // one call at a time: the engine is not thread-safe

  const tokenizer::ChatTemplate& templ() {
    if (!chat_template) {
      if (options.chat_template.empty()) {
        chat_template = tokenizer::ChatTemplate::from_gguf(*file);
      } else if (auto builtin = tokenizer::ChatTemplate::builtin(options.chat_template)) {
        chat_template = std::move(*builtin);
      } else {
        chat_template = read_template_file(options.chat_template);
      }
    }
    return *chat_template;
  }

  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
    std::vector<tokenizer::ChatMessage> plain;
    plain.reserve(messages.size());
    for (const ChatMessage& m : messages) plain.push_back({m.role, m.content});
    tokenizer::ChatInputs inputs;
    inputs.messages = tokenizer::to_json(plain);
    inputs.add_generation_prompt = add_generation_prompt;
    return tokenizer::render_chat_prompt(templ(), engine->tokenizer(), std::move(inputs));
  }

  std::shared_ptr<const structured::CompiledGrammar> compile(const SamplingParams& params) {
    using Kind = structured::GrammarSpec::Kind;
    const int given = !params.json_schema.empty() + !params.grammar.empty() + !params.regex.empty();
    if (given == 0) return nullptr;
    if (given > 1) fail("json_schema, grammar and regex: give at most one");
    structured::GrammarSpec spec;
    const char* field = "json_schema";
    if (!params.json_schema.empty()) {
      spec = {Kind::kJsonSchema, params.json_schema, {}};
    } else if (!params.grammar.empty()) {
      spec = {Kind::kEbnf, params.grammar, {}};
      field = "grammar";
    } else {
      spec = {Kind::kRegex, params.regex, {}};
      field = "regex";
    }
    if (!grammar_compiler) {
      grammar_compiler = std::make_unique<structured::GrammarCompiler>(
          engine->tokenizer(), engine->model_config().n_vocab, engine->config().threads);
    }
    try {
      return grammar_compiler->compile(spec);
    } catch (const Error& e) {
      fail("{}: {}", field, e.what());
    }
  }

  std::vector<RequestOutput> run(std::vector<std::vector<int32_t>> prompts,
                                 std::vector<std::string> prompt_texts,
                                 const SamplingParams& params, const StreamCallback& on_delta,
                                 const CancelToken& cancel);
};

std::vector<RequestOutput> Engine::Impl::run(std::vector<std::vector<int32_t>> prompts,
                                             std::vector<std::string> prompt_texts,
                                             const SamplingParams& params,
                                             const StreamCallback& on_delta,
                                             const CancelToken& cancel) {
  if (params.n < 1) fail("n must be at least 1, got {}", params.n);
  if (params.beam_width < 0) fail("beam_width must be 0 (off) or more, got {}", params.beam_width);
  const bool beams = params.beam_width > 0;
  if (beams && params.n > params.beam_width)
    fail("n ({}) must not exceed beam_width ({}) with beam search", params.n, params.beam_width);
  std::shared_ptr<const structured::CompiledGrammar> grammar = compile(params);
  const std::vector<std::vector<int32_t>> bad_words =
      engine::bad_word_sequences(engine->tokenizer(), params.bad_words);

  CallState call;
  call.on_delta = &on_delta;
  call.cancel = cancel;
  // channels[p][c]: prompt p's choice c (a beam search has one channel, its hypotheses come in
  // its result).
  std::vector<std::vector<std::shared_ptr<ChoiceChannel>>> channels(prompts.size());
  try {
    for (size_t p = 0; p < prompts.size(); ++p) {
      engine::Request request;
      request.prompt = prompts[p];
      request.sampling = engine_sampling(params);
      request.max_tokens = params.max_tokens;
      request.stop = params.stop;
      request.ignore_eos = params.ignore_eos;
      request.stop_token_ids = params.stop_token_ids;
      request.min_tokens = params.min_tokens;
      request.include_stop_str = params.include_stop_str_in_output;
      request.allowed_token_ids = params.allowed_token_ids;
      request.bad_words = bad_words;
      request.logprobs = params.logprobs;
      request.prompt_logprobs = params.prompt_logprobs;
      request.grammar = grammar;
      request.beam_width = params.beam_width;
      request.beam_results = beams ? params.n : 1;
      request.length_penalty = params.length_penalty;
      request.lora_scales = params.lora_scales;
      const int32_t channel_count = beams ? 1 : params.n;
      for (int32_t c = 0; c < channel_count; ++c)
        channels[p].push_back(std::make_shared<ChoiceChannel>(call, p, c));
      request.output = channels[p][0];
      for (int32_t c = 1; c < channel_count; ++c) request.more_outputs.push_back(channels[p][c]);
      engine->add_request(std::move(request));
    }
  } catch (...) {
    // Nothing of a refused call runs: the prompts queued before the bad one are cancelled and
    // their blocks freed before the error goes to the caller.
    call.aborted = true;
    engine->run_until_idle();
    throw;
  }
  engine->run_until_idle();
  if (call.callback_error) std::rethrow_exception(call.callback_error);

  std::vector<RequestOutput> outputs(prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    RequestOutput& out = outputs[p];
    out.index = p;
    out.prompt = std::move(prompt_texts[p]);
    out.prompt_token_ids = std::move(prompts[p]);
    const engine::RequestResult& first = channels[p][0]->result();
    const engine::RequestStats& s = first.stats;
    out.metrics = {s.prompt_tokens, s.completion_tokens, s.cached_tokens, s.queue_s,
                   s.ttft_s,        s.prefill_s,         s.decode_s,      s.e2e_s};
    for (const engine::PromptTokenLogprob& e : first.prompt_logprobs) {
      PromptTokenLogprobs& entry = out.prompt_logprobs.emplace_back();
      entry.token = e.token;
      entry.logprob = e.logprob;
      entry.rank = e.rank;
      for (const sampling::TokenLogprob& t : e.top) entry.top.push_back({t.token, t.logprob});
    }
    if (beams) {
      for (size_t b = 0; b < first.beams.size(); ++b) {
        const engine::BeamResult& beam = first.beams[b];
        CompletionOutput choice;
        choice.index = static_cast<int32_t>(b);
        choice.text = beam.text;
        choice.token_ids = beam.tokens;
        choice.finish_reason = public_reason(beam.finish_reason);
        choice.cumulative_logprob = beam.cum_logprob;
        choice.score = beam.score;
        out.outputs.push_back(std::move(choice));
      }
      if (out.outputs.empty()) out.outputs.push_back(std::move(channels[p][0]->output()));
    } else {
      for (const auto& channel : channels[p]) out.outputs.push_back(std::move(channel->output()));
    }
  }
  return outputs;
}

Engine::Engine(const std::string& model_path, const EngineOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  const engine::EngineConfig config = engine_config(options);  // bad options before the load
  impl_->file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(model_path));
  impl_->engine = std::make_unique<engine::Engine>(*impl_->file, config);
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

std::vector<RequestOutput> Engine::generate(const std::vector<std::string>& prompts,
                                            const SamplingParams& params,
                                            const StreamCallback& on_delta,
                                            const CancelToken& cancel) {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const std::string& prompt : prompts)
    ids.push_back(impl_->engine->tokenizer().encode(prompt, true, true));
  return impl_->run(std::move(ids), prompts, params, on_delta, cancel);
}

std::vector<RequestOutput> Engine::generate_tokens(const std::vector<std::vector<int32_t>>& prompts,
                                                   const SamplingParams& params,
                                                   const StreamCallback& on_delta,
                                                   const CancelToken& cancel) {
  std::lock_guard lock(impl_->mutex);
  return impl_->run(prompts, std::vector<std::string>(prompts.size()), params, on_delta, cancel);
}

size_t Engine::add_lora_adapter(const std::string& path) {
  std::lock_guard lock(impl_->mutex);  // (a call holds it until its requests have ended)
  return impl_->engine->add_lora_adapter(path);
}

RequestOutput Engine::complete(const std::string& prompt, const SamplingParams& params,
                               const StreamCallback& on_delta, const CancelToken& cancel) {
  return std::move(generate(std::vector<std::string>{prompt}, params, on_delta, cancel).front());
}

std::vector<RequestOutput> Engine::chat_batch(
    const std::vector<std::vector<ChatMessage>>& conversations, const SamplingParams& params,
    const StreamCallback& on_delta, const CancelToken& cancel) {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> texts;
  for (const auto& messages : conversations) {
    // render_chat_prompt leaves out a BOS text the tokenizer adds itself: encode with specials.
    texts.push_back(impl_->render(messages, true));
    ids.push_back(impl_->engine->tokenizer().encode(texts.back(), true, true));
  }
  return impl_->run(std::move(ids), std::move(texts), params, on_delta, cancel);
}

RequestOutput Engine::chat(const std::vector<ChatMessage>& messages, const SamplingParams& params,
                           const StreamCallback& on_delta, const CancelToken& cancel) {
  return std::move(
      chat_batch(std::vector<std::vector<ChatMessage>>{messages}, params, on_delta, cancel)
          .front());
}

std::string Engine::apply_chat_template(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->render(messages, add_generation_prompt);
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special) const {
  // The tokenizer is thread-safe and never changes: no lock.
  return impl_->engine->tokenizer().encode(text, add_special, true);
}

std::string Engine::detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const int32_t n_vocab = impl_->engine->model_config().n_vocab;
  for (int32_t id : ids)
    if (id < 0 || id >= n_vocab) fail("token id {} is outside the vocabulary of {}", id, n_vocab);
  return impl_->engine->tokenizer().decode(ids, skip_special_tokens);
}

ModelInfo Engine::model_info() const {
  const model::ModelConfig& c = impl_->engine->model_config();
  ModelInfo info;
  info.architecture = c.architecture;
  info.name = c.name;
  info.n_vocab = c.n_vocab;
  info.context_length = c.context_length;
  info.context = impl_->engine->config().context;
  info.has_chat_template = impl_->file->has("tokenizer.chat_template");
  return info;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mutex);
  const engine::Engine& e = *impl_->engine;
  EngineStats s;
  s.threads = e.config().threads;
  s.peak_kv_bytes = e.peak_kv_bytes();
  s.computed_tokens = e.computed_tokens();
  s.generated_tokens = e.generated_tokens();
  s.preemptions = e.num_preemptions();
  const engine::SpecDecodeStats& spec = e.spec_decode_stats();
  s.spec_drafts = spec.num_drafts;
  s.spec_draft_tokens = spec.num_draft_tokens;
  s.spec_accepted_tokens = spec.num_accepted_tokens;
  const engine::MaskStats& masks = e.grammar_mask_stats();
  s.grammar_masks = masks.masks;
  if (masks.masks > 0) {
    s.grammar_mask_median_us = masks.quantile_us(0.5);
    s.grammar_mask_p99_us = masks.quantile_us(0.99);
    s.grammar_mask_mean_us = masks.total_s * 1e6 / static_cast<double>(masks.masks);
    s.grammar_apply_median_us = e.grammar_apply_stats().quantile_us(0.5);
  }
  return s;
}

}  // namespace inferd
