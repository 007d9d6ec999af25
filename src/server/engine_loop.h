// EngineLoop: the engine on its own thread. HTTP threads submit requests to a bounded queue;
// the loop admits them, runs steps while there is work and sleeps when there is none. Each
// request streams back through its own output channel.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "server/metrics.h"

namespace inferd::server {

class EngineLoop {
 public:
  // `file` must outlive the loop. `max_pending` bounds queued plus running requests. Every
  // `log_interval_s` seconds with work done (0: never) a line of throughput, load, KV use and
  // prefix cache hit rate goes to stderr.
  EngineLoop(const gguf::GgufFile& file, const engine::EngineConfig& config, size_t max_pending,
             ServerMetrics& metrics, double log_interval_s = 0);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request (already validated). False when the queue is full. A request the engine
  // still rejects finishes at once with FinishReason::kError and the message.
  bool submit(engine::Request request);

  // Read-only after construction, so safe from any thread.
  const tokenizer::Tokenizer& tokenizer() const { return engine_.tokenizer(); }
  const model::ModelConfig& model_config() const { return engine_.model_config(); }
  int64_t context() const { return engine_.config().context; }
  // The KV pool's blocks, and whether the default pool was cut to fit the machine's memory.
  int32_t kv_blocks() const { return engine_.config().kv_blocks; }
  int32_t state_snapshots() const { return engine_.config().state_snapshots; }
  int64_t exact_copy_bytes() const { return engine_.exact_copy_bytes(); }
  bool kv_blocks_capped() const { return engine_.kv_blocks_capped(); }

 private:
  void run();
  void publish_gauges();
  void maybe_log();
  void maybe_return_free_memory();

  // What the last log line covered up to.
  struct LogMark {
    std::chrono::steady_clock::time_point time;
    int64_t computed = 0, generated = 0, queried = 0, hits = 0;
  };

  engine::Engine engine_;
  ServerMetrics& metrics_;
  const size_t max_pending_;
  const double log_interval_s_;
  LogMark last_log_;
  // When the grammar mask quantiles were last computed (they copy a window: not every step).
  std::chrono::steady_clock::time_point last_mask_quantiles_;
  int64_t mask_quantiles_at_ = 0;  // the mask count they were computed at
  std::chrono::steady_clock::time_point last_trim_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<engine::Request> queue_;
  std::atomic<size_t> pending_{0};  // queued + in the engine
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace inferd::server
