#include "server/engine_loop.h"

#include <cstdio>

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
                       size_t max_pending, ServerMetrics& metrics)
    : engine_(file, config), metrics_(metrics), max_pending_(max_pending) {
  metrics_.kv_bytes_total.store(engine_.kv_cache().bytes());
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
  if (pending_.fetch_add(1, std::memory_order_relaxed) >= max_pending_) {
    pending_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  request.output = std::make_shared<CountingChannel>(std::move(request.output), pending_);
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
      auto output = request.output;
      try {
        engine_.add_request(std::move(request));
      } catch (const Error& e) {
        engine::RequestResult result;
        result.finish_reason = engine::FinishReason::kError;
        result.error = e.what();
        output->on_finish(result);
      }
    }
    arrived.clear();
    publish_gauges();
    try {
      if (!engine_.idle()) engine_.step();
    } catch (const std::exception& e) {
      // Requests are validated before they are queued, so this is a bug; keep serving the
      // others rather than taking the process down.
      std::fprintf(stderr, "[inferd] engine step failed: %s\n", e.what());
    }
    publish_gauges();
  }
}

}  // namespace inferd::server
