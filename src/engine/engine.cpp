#include "engine/engine.h"

#include <algorithm>

#include "engine/stop_matcher.h"
#include "model/registry.h"
#include "sampling/sampler.h"
#include "tokenizer/detokenizer.h"
#include "util/error.h"

namespace inferd::engine {

std::string_view finish_reason_name(FinishReason reason) {
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

// A request inside the engine: its sequence plus the per-request state of the output path.
struct Engine::Active {
  Sequence seq;
  std::unique_ptr<sampling::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopMatcher> stop;
  std::vector<sampling::TokenLogprob> top;  // [request.logprobs], sized at admission
  bool stop_hit = false;
  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool was_scheduled = false;
};

namespace {

constexpr int64_t kDefaultContextCap = 4096;
constexpr int32_t kMaxTopLogprobs = 20;

int64_t resolve_context(const EngineConfig& config, int64_t model_context) {
  if (config.context < 0) fail("context size {} must not be negative", config.context);
  if (config.context == 0) return std::min(model_context, kDefaultContextCap);
  return config.context;
}

}  // namespace

Engine::Engine(const gguf::GgufFile& file, const EngineConfig& config) : config_(config) {
  tokenizer_ = tokenizer::Tokenizer::from_gguf(file);
  model::ModelOptions options;
  options.max_batch_tokens = config.max_batched_tokens;
  config_.context = resolve_context(config, model::ModelConfig::from_gguf(file).context_length);
  options.max_context = config_.context;
  model_ = model::load_model(file, options);
  const int64_t blocks_per_seq = (config_.context + config.block_size - 1) / config.block_size;
  if (config_.kv_blocks == 0)
    config_.kv_blocks = static_cast<int32_t>(blocks_per_seq * config.max_seqs);
  if (config_.kv_blocks < blocks_per_seq) {
    fail("KV cache of {} blocks cannot hold one sequence of {} tokens ({} blocks of {})",
         config_.kv_blocks, config_.context, blocks_per_seq, config.block_size);
  }
  kv::KvCacheConfig kv = model_->kv_config(config_.kv_blocks, config.block_size, config.kv_key_type,
                                           config.kv_value_type);
  if (config.swa_full) kv.sliding_layers.clear();
  if (!kv.sliding_layers.empty()) {
    // A running sequence holds at most the blocks of its window plus one step's tokens (the
    // scheduler frees the rest before each step), so this many never run short.
    const int64_t per_seq =
        (config.max_batched_tokens + kv.sliding_window - 1 + config.block_size - 1) /
            config.block_size +
        1;
    kv.num_sliding_blocks =
        static_cast<int32_t>(std::min<int64_t>(config_.kv_blocks, per_seq * config.max_seqs));
  }
  cache_ = std::make_unique<kv::KvCache>(kv);
  if (config.prefix_caching) {
    prefix_cache_ =
        std::make_unique<kv::PrefixCache>(cache_->groups(), config.block_size, blocks_per_seq + 1);
  }
  pool_ = std::make_unique<ThreadPool>(config.threads, config.pin_threads);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{config.max_batched_tokens, config.max_seqs, config.block_size},
      cache_->groups(), prefix_cache_.get());
  runner_ = std::make_unique<ModelRunner>(*model_, *cache_, *pool_, config.max_batched_tokens,
                                          config.max_seqs);
  scheduled_.reserve(static_cast<size_t>(config.max_seqs));
  finished_ids_.reserve(static_cast<size_t>(config.max_seqs));
}

Engine::~Engine() = default;

uint64_t Engine::add_request(Request request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) fail("the prompt is empty");
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got {}", request.max_tokens);
  if (prompt + request.max_tokens > config_.context) {
    fail("prompt of {} tokens plus max_tokens {} is {} tokens, more than the context of {}", prompt,
         request.max_tokens, prompt + request.max_tokens, config_.context);
  }
  const int32_t n_vocab = model_->config().n_vocab;
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= n_vocab)
      fail("prompt token id {} is outside the vocabulary of {}", id, n_vocab);
  }
  request.sampling.validate();
  if (request.logprobs > kMaxTopLogprobs) {
    fail("logprobs must be at most {}, got {}", kMaxTopLogprobs, request.logprobs);
  }
  if (!request.output) fail("request has no output channel");

  auto active = std::make_unique<Active>();
  active->arrival = Clock::now();
  Sequence& seq = active->seq;
  seq.id = next_id_++;
  seq.num_prompt_tokens = prompt;
  seq.tokens.reserve(static_cast<size_t>(prompt + request.max_tokens));
  seq.tokens = request.prompt;
  const auto max_blocks =
      static_cast<size_t>((prompt + request.max_tokens) / config_.block_size + 1);
  for (std::vector<int32_t>& table : seq.block_tables) table.reserve(max_blocks);
  seq.prefix.hashes.reserve(max_blocks);
  seq.prefix.root = kv::PrefixCache::root_key(request.cache_salt);
  active->sampler =
      std::make_unique<sampling::Sampler>(request.sampling, n_vocab, request.logprobs >= 0);
  active->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_);
  active->top.resize(static_cast<size_t>(std::max(0, request.logprobs)));
  active->stop = std::make_unique<StopMatcher>(request.stop, tokenizer_->max_piece_bytes() * 3 + 4);
  seq.request = std::move(request);
  const uint64_t id = seq.id;
  scheduler_->add(&seq);
  active_.emplace(id, std::move(active));
  return id;
}

void Engine::step() {
  reap_cancelled();
  scheduler_->schedule(scheduled_);
  if (scheduled_.empty()) return;
  peak_kv_bytes_ = std::max(peak_kv_bytes_, cache_->used_bytes());
  const auto now = Clock::now();
  for (const ScheduledSequence& s : scheduled_) {
    Active& active = *active_.at(s.seq->id);
    if (!active.was_scheduled) active.first_scheduled = now;
    active.was_scheduled = true;
  }
  runner_->run(scheduled_);
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    Sequence& seq = *scheduled_[i].seq;
    seq.num_computed += scheduled_[i].num_new_tokens;
    computed_tokens_ += scheduled_[i].num_new_tokens;
    if (prefix_cache_)
      prefix_cache_->index_computed(seq.tokens, seq.num_computed, seq.prefix, seq.block_tables);
    if (runner_->wants_logits(i)) process_output(*active_.at(seq.id), runner_->logits_for(i));
  }
  for (uint64_t id : finished_ids_) active_.erase(id);
  finished_ids_.clear();
}

void Engine::run_until_idle() {
  while (!idle()) step();
}

void Engine::process_output(Active& active, std::span<float> logits) {
  Sequence& seq = active.seq;
  const auto prompt =
      std::span<const int32_t>(seq.tokens).first(static_cast<size_t>(seq.num_prompt_tokens));
  const auto output =
      std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.num_prompt_tokens));
  const int32_t token = active.sampler->sample(logits, prompt, output);
  ++generated_tokens_;
  const auto now = Clock::now();
  if (seq.num_generated() == 0) active.first_token = now;
  active.last_token = now;
  if (!seq.request.ignore_eos && tokenizer_->vocab().is_eog(token)) {
    finish(active, FinishReason::kStop);
    return;
  }
  seq.tokens.push_back(token);
  if (seq.request.logprobs >= 0) {
    const size_t n = active.sampler->top_logprobs(logits, active.top);
    seq.request.output->on_token(token, active.sampler->last_logprob(),
                                 std::span<const sampling::TokenLogprob>(active.top).first(n));
  }
  if (emit_token(active, token)) {
    finish(active, FinishReason::kStop);
  } else if (seq.num_generated() >= seq.request.max_tokens || seq.num_tokens() >= config_.context) {
    finish(active, FinishReason::kLength);
  }
}

bool Engine::emit_token(Active& active, int32_t token) {
  const std::string_view text = active.detokenizer->push(token);
  if (text.empty()) return false;
  StopMatcher::Result r = active.stop->push(text);
  if (!r.emit.empty()) active.seq.request.output->on_text(r.emit);
  active.stop_hit = r.stopped;
  return r.stopped;
}

void Engine::finish(Active& active, FinishReason reason, std::string error) {
  Sequence& seq = active.seq;
  if (!active.stop_hit && reason != FinishReason::kCancelled && reason != FinishReason::kError) {
    // Flush what the detokenizer and the stop matcher held back.
    StopMatcher::Result r = active.stop->push(active.detokenizer->flush());
    std::string tail(r.emit);
    if (!r.stopped) tail += active.stop->finish();
    if (!tail.empty()) seq.request.output->on_text(tail);
  }
  RequestResult result;
  result.finish_reason = reason;
  result.error = std::move(error);
  result.output_tokens.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
  RequestStats& s = result.stats;
  const auto now = Clock::now();
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  s.prompt_tokens = seq.num_prompt_tokens;
  s.cached_tokens = std::max<int64_t>(0, seq.num_cached_tokens);
  s.completion_tokens = static_cast<int64_t>(result.output_tokens.size());
  s.e2e_s = seconds(now - active.arrival);
  if (active.was_scheduled) {
    s.queue_s = seconds(active.first_scheduled - active.arrival);
    if (active.first_token != Clock::time_point{}) {
      s.ttft_s = seconds(active.first_token - active.arrival);
      s.prefill_s = seconds(active.first_token - active.first_scheduled);
      s.decode_s = seconds(active.last_token - active.first_token);
    }
  }
  scheduler_->remove(&seq);
  seq.request.output->on_finish(result);
  finished_ids_.push_back(seq.id);
}

void Engine::reap_cancelled() {
  for (auto& [id, active] : active_) {
    if (active->seq.status != SequenceStatus::kFinished &&
        active->seq.request.output->cancelled()) {
      finish(*active, FinishReason::kCancelled);
    }
  }
  for (uint64_t id : finished_ids_) active_.erase(id);
  finished_ids_.clear();
}

}  // namespace inferd::engine
