#include "server/engine_loop.h"

#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "util/error.h"

namespace inferd::server {
namespace {

// Wraps a request's channel to count it out of the pending total when it finishes.
class CountingChannel final : public engine::OutputChannel {
 public:
  CountingChannel(std::shared_ptr<engine::OutputChannel> inner, std::atomic<size_t>& pending)
      : inner_(std::move(inner)), pending_(pending) {}
  void on_text(std::string_view text) override { inner_->on_text(text); }
  void on_token(int32_t token, float logprob,
                std::span<const sampling::TokenLogprob> top) override {
    inner_->on_token(token, logprob, top);
  }
  void on_prompt_progress(const engine::PromptProgress& progress) override {
    inner_->on_prompt_progress(progress);
  }
  void on_step_end() override { inner_->on_step_end(); }
  void on_finish(const engine::RequestResult& result) override {
    inner_->on_finish(result);
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool cancelled() const override { return inner_->cancelled(); }

 private:
  std::shared_ptr<engine::OutputChannel> inner_;
  std::atomic<size_t>& pending_;
};

}  // namespace

EngineLoop::EngineLoop(const gguf::GgufFile& file, const engine::EngineConfig& config,
                       size_t max_pending, ServerMetrics& metrics, double log_interval_s)
    : engine_(file, config),
      metrics_(metrics),
      max_pending_(max_pending),
      log_interval_s_(log_interval_s),
      last_log_{std::chrono::steady_clock::now()} {
  metrics_.kv_bytes_total.store(engine_.kv_cache().bytes());
  if (config.spec.enabled()) metrics_.spec_positions = config.spec.num_tokens;
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

bool EngineLoop::submit(engine::Request request) {
  const size_t n = 1 + request.more_outputs.size();  // each choice is counted until it finishes
  if (pending_.fetch_add(n, std::memory_order_relaxed) + n > max_pending_) {
    pending_.fetch_sub(n, std::memory_order_relaxed);
    return false;
  }
  request.output = std::make_shared<CountingChannel>(std::move(request.output), pending_);
  for (auto& output : request.more_outputs)
    output = std::make_shared<CountingChannel>(std::move(output), pending_);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(request));
  }
  wake_.notify_one();
  return true;
}

void EngineLoop::publish_gauges() {
  metrics_.running.store(static_cast<int64_t>(engine_.num_running()));
  metrics_.waiting.store(static_cast<int64_t>(engine_.num_waiting()));
  metrics_.kv_blocks_used.store(engine_.kv_cache().used_blocks());
  metrics_.kv_bytes_used.store(engine_.kv_cache().used_bytes());
  metrics_.kv_bytes_peak.store(engine_.peak_kv_bytes());
  const kv::PrefixCacheStats prefix = engine_.prefix_cache_stats();
  metrics_.prefix_queries.store(prefix.queried_tokens);
  metrics_.overlapped_steps.store(engine_.overlapped_steps());
  metrics_.prefix_hits.store(prefix.hit_tokens);
  const engine::SpecDecodeStats& spec = engine_.spec_decode_stats();
  metrics_.spec_drafts.store(spec.num_drafts);
  metrics_.spec_draft_tokens.store(spec.num_draft_tokens);
  metrics_.spec_accepted.store(spec.num_accepted_tokens);
  for (int i = 0; i < engine::SpecDecodeStats::kMaxPositions; ++i)
    metrics_.spec_accepted_per_pos[i].store(spec.accepted_per_position[i]);
  const engine::MaskStats& masks = engine_.grammar_mask_stats();
  const engine::MaskStats& applies = engine_.grammar_apply_stats();
  metrics_.grammar_masks.store(masks.masks);
  metrics_.grammar_mask.sum_us.store(masks.total_s * 1e6);
  metrics_.grammar_apply.sum_us.store(applies.total_s * 1e6);
  const auto now = std::chrono::steady_clock::now();
  if (masks.masks != mask_quantiles_at_ &&
      (now - last_mask_quantiles_ >= std::chrono::seconds(1) || engine_.idle())) {
    last_mask_quantiles_ = now;
    mask_quantiles_at_ = masks.masks;
    metrics_.grammar_mask.p50_us.store(masks.quantile_us(0.5));
    metrics_.grammar_mask.p99_us.store(masks.quantile_us(0.99));
    metrics_.grammar_apply.p50_us.store(applies.quantile_us(0.5));
    metrics_.grammar_apply.p99_us.store(applies.quantile_us(0.99));
  }
}

void EngineLoop::maybe_log() {
  if (log_interval_s_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_log_.time).count();
  if (seconds < log_interval_s_) return;
  const kv::PrefixCacheStats prefix = engine_.prefix_cache_stats();
  const LogMark mark{now, engine_.computed_tokens(), engine_.generated_tokens(),
                     prefix.queried_tokens, prefix.hit_tokens};
  if (mark.computed == last_log_.computed) {  // nothing ran: no line, start a new interval
    last_log_ = mark;
    return;
  }
  const auto percent = [](int64_t part, int64_t whole) {
    return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0;
  };
  const kv::KvCache& kv = engine_.kv_cache();
  std::string spec;
  if (const engine::SpecDecodeStats& st = engine_.spec_decode_stats(); st.num_draft_tokens > 0) {
    spec = " | drafts accepted " +
           std::to_string(static_cast<int>(
               std::lround(percent(st.num_accepted_tokens, st.num_draft_tokens)))) +
           "%";
  }
  std::fprintf(stderr,
               "[inferd] %.1f s: computed %.1f tok/s, generated %.1f tok/s | running %zu, waiting "
               "%zu | KV %.1f%% | prefix cache hit rate %.1f%% (%.1f%% since start)%s\n",
               seconds, double(mark.computed - last_log_.computed) / seconds,
               double(mark.generated - last_log_.generated) / seconds, engine_.num_running(),
               engine_.num_waiting(), percent(kv.used_bytes(), kv.bytes()),
               percent(mark.hits - last_log_.hits, mark.queried - last_log_.queried),
               percent(mark.hits, mark.queried), spec.c_str());
  last_log_ = mark;
}

void EngineLoop::run() {
  std::deque<engine::Request> arrived;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      // Sleep only when the engine has nothing to do; otherwise just pick up arrivals.
      wake_.wait(lock, [&] { return stop_ || !queue_.empty() || !engine_.idle(); });
      if (stop_) break;
      arrived.swap(queue_);
    }
    for (engine::Request& request : arrived) {
      std::vector<std::shared_ptr<engine::OutputChannel>> outputs = request.more_outputs;
      outputs.push_back(request.output);
      try {
        engine_.add_request(std::move(request));
      } catch (const Error& e) {
        engine::RequestResult result;
        result.finish_reason = engine::FinishReason::kError;
        result.error = e.what();
        for (const auto& output : outputs) output->on_finish(result);
      }
    }
    arrived.clear();
    publish_gauges();
    try {
      if (!engine_.idle()) {
        engine_.step();
        metrics_.steps.fetch_add(1, std::memory_order_relaxed);
        metrics_.step_sequences.fetch_add(static_cast<int64_t>(engine_.num_running()),
                                          std::memory_order_relaxed);
      }
    } catch (const std::exception& e) {
      // Requests are validated before they are queued, so this is a bug; keep serving the
      // others rather than taking the process down.
      std::fprintf(stderr, "[inferd] engine step failed: %s\n", e.what());
    }
    publish_gauges();
    maybe_log();
    maybe_return_free_memory();
  }
}

// The handler threads allocate (JSON, prompts, answers) across malloc's per-thread arenas, and
// each arena keeps its free pages: RSS would follow the high-water mark of every arena rather
// than what is in use (a 30-minute soak grew 10 MB that way before it levelled off). When the
// engine is idle, at most every 10 s, the free pages go back to the OS.
void EngineLoop::maybe_return_free_memory() {
#ifdef __GLIBC__
  const auto now = std::chrono::steady_clock::now();
  if (!engine_.idle() || now - last_trim_ < std::chrono::seconds(10)) return;
  last_trim_ = now;
  malloc_trim(0);
#endif
}

}  // namespace inferd::server
