// Serving metrics in Prometheus text format, named as vLLM names them (vllm:...) and as
// llama-server names them (llamacpp:..., unlabelled as there), so existing dashboards work.
// Latencies are recorded when a request finishes (not in the decode loop); gauges are atomics the
// engine loop stores after each step.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/mask_stats.h"
#include "engine/request.h"
#include "engine/speculative.h"

namespace inferd::server {

// Cumulative histogram with fixed upper bounds (seconds), as Prometheus expects.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "# TYPE" line and the _bucket / _sum / _count samples.
  void render(std::string& out, const std::string& name, const std::string& help,
              const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // [bounds.size() + 1]: per bucket, the last one +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // Gauges, stored by the engine loop after every step.
  std::atomic<int64_t> running{0}, waiting{0}, kv_blocks_used{0};
  // KV cache bytes: the blocks of different KV groups differ in size (kv/kv_cache.h).
  std::atomic<int64_t> kv_bytes_used{0}, kv_bytes_total{0}, kv_bytes_peak{0};
  // Prefix cache, in prompt tokens since start-up: looked up, and found.
  std::atomic<int64_t> prefix_queries{0}, prefix_hits{0};
  // Steps launched while another was in flight (pipeline parallelism: Engine::overlapped_steps).
  std::atomic<int64_t> overlapped_steps{0};
  // Speculative decoding since start-up (engine/speculative.h); spec_positions > 0 when on.
  std::atomic<int64_t> spec_drafts{0}, spec_draft_tokens{0}, spec_accepted{0};
  std::atomic<int64_t> spec_accepted_per_pos[engine::SpecDecodeStats::kMaxPositions] = {};
  int spec_positions = 0;
  // Grammar masks of constrained decoding since start-up: the time to compute them and to apply
  // them to the logits, in microseconds, in total and the median and p99 of the recent ones
  // (engine/mask_stats.h).
  struct MaskTimes {
    std::atomic<double> sum_us{0}, p50_us{0}, p99_us{0};
  };
  std::atomic<int64_t> grammar_masks{0};
  MaskTimes grammar_mask, grammar_apply;

  // Engine steps that ran a forward pass since start-up, and the running sequences summed over
  // them (llama-server's n_decode_total and n_busy_slots_per_decode).
  std::atomic<int64_t> steps{0}, step_sequences{0};

  // A finished request: its stats and the gaps between its streamed tokens (seconds).
  void record_finish(const engine::RequestResult& result, std::span<const double> itls);
  // Requests refused before reaching the engine, by HTTP status.
  void record_rejected(int status);

  std::string render() const;

 private:
  void render_llama_names(std::string& out) const;  // the caller holds mutex_

  std::string labels_;  // model_name="..."
  mutable std::mutex mutex_;
  Histogram ttft_, itl_, e2e_, queue_, prefill_, decode_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  // For llama-server's llamacpp:* names: prompt tokens computed (not from the prefix cache) and
  // found in it, the prefill and decode seconds summed over requests, and the longest sequence.
  uint64_t prompt_computed_ = 0, prompt_cached_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  int64_t longest_sequence_ = 0;
  std::map<std::string, uint64_t> finished_;  // by finish reason
  std::map<int, uint64_t> rejected_;          // by HTTP status
};

}  // namespace inferd::server
