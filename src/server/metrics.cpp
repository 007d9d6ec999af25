#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "dist/communicator.h"

namespace inferd::server {
namespace {

// Bucket bounds close to vLLM's, in seconds.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,
                                         0.5,   0.75,  1.0,  2.5,  5.0,  7.5,  10.0, 20.0, 40.0};
const std::vector<double> kItlBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                        0.4,  0.5,   0.75, 1.0,   2.5, 5.0,  7.5, 10.0};
const std::vector<double> kRequestBounds = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,  2.5,  5.0,
                                            10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0};

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++buckets_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cumulative);
  }
  cumulative += buckets_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  out +=
      fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\"", escape_label(model_name))),
      ttft_(kTtftBounds),
      itl_(kItlBounds),
      e2e_(kRequestBounds),
      queue_(kRequestBounds),
      prefill_(kRequestBounds),
      decode_(kRequestBounds) {}

void ServerMetrics::record_finish(const engine::RequestResult& result,
                                  std::span<const double> itls) {
  const engine::RequestStats& s = result.stats;
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(s.prompt_tokens);
  prompt_cached_ += static_cast<uint64_t>(s.cached_tokens);
  prompt_computed_ +=
      static_cast<uint64_t>(std::max<int64_t>(s.prompt_tokens - s.cached_tokens, 0));
  prefill_seconds_ += s.prefill_s;
  decode_seconds_ += s.decode_s;
  longest_sequence_ = std::max(longest_sequence_, s.prompt_tokens + s.completion_tokens);
  generation_tokens_ += static_cast<uint64_t>(s.completion_tokens);
  ++finished_[std::string(engine::finish_reason_name(result.finish_reason))];
  e2e_.observe(s.e2e_s);
  queue_.observe(s.queue_s);
  if (s.completion_tokens > 0) {
    ttft_.observe(s.ttft_s);
    prefill_.observe(s.prefill_s);
    decode_.observe(s.decode_s);
  }
  for (double gap : itls) itl_.observe(gap);
}

void ServerMetrics::record_rejected(int status) {
  std::lock_guard lock(mutex_);
  ++rejected_[status];
}

std::string ServerMetrics::render() const {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name,
                       labels_, value);
  };
  const int64_t total = kv_bytes_total.load(), used = kv_bytes_used.load();
  gauge("vllm:num_requests_running", "Requests in the running batch.", double(running.load()));
  gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", double(waiting.load()));
  gauge("vllm:kv_cache_usage_perc", "Fraction of the KV cache in use (0-1).",
        total > 0 ? double(used) / double(total) : 0.0);
  gauge("inferd:kv_blocks_used", "KV cache blocks in use, over all KV groups.",
        double(kv_blocks_used.load()));
  gauge("inferd:kv_cache_used_bytes", "KV cache bytes in use.", double(used));
  gauge("inferd:kv_cache_total_bytes", "KV cache bytes in all blocks.", double(total));
  gauge("inferd:kv_cache_peak_bytes", "Most KV cache bytes in use at once since start-up.",
        double(kv_bytes_peak.load()));
  const auto counter = [&](const char* name, const char* help, int64_t value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{{}}} {}\n", name, help, name, name,
                       labels_, value);
  };
  counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
          prefix_queries.load());
  if (const dist::Communicator& world = dist::world(); world.size() > 1) {  // -tp or -pp
    counter("inferd:model_parallel_bytes_sent_total",
            "Bytes rank 0 sent to the other ranks (batches, all-reduces or activations, block "
            "copies).",
            world.bytes_sent());
    gauge("inferd:model_parallel_comm_seconds",
          "Seconds rank 0 spent communicating with the other ranks (waiting for their compute "
          "included: a pipeline's last rank's results).",
          world.comm_seconds());
    counter("inferd:pipeline_overlapped_steps_total",
            "Steps rank 0 launched while another step was still in flight (pipeline "
            "parallelism, --steps-in-flight).",
            overlapped_steps.load());
  }
  counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", prefix_hits.load());
  if (spec_positions > 0) {
    counter("vllm:spec_decode_num_drafts", "Verification steps of a sequence with draft tokens.",
            spec_drafts.load());
    counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.",
            spec_draft_tokens.load());
    counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", spec_accepted.load());
    out +=
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Draft tokens accepted, by position "
        "in the draft.\n# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n";
    for (int i = 0; i < spec_positions; ++i) {
      out += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos{{{},position=\"{}\"}} {}\n",
                         labels_, i, spec_accepted_per_pos[i].load());
    }
  }
  if (const int64_t masks = grammar_masks.load(); masks > 0) {
    const auto summary = [&](const char* name, const char* what, const MaskTimes& times) {
      out += fmt::format(
          "# HELP {0} Time to {1}, per token (quantiles over the last {2} masks).\n"
          "# TYPE {0} summary\n"
          "{0}{{{3},quantile=\"0.5\"}} {4:.2f}\n"
          "{0}{{{3},quantile=\"0.99\"}} {5:.2f}\n"
          "{0}_sum{{{3}}} {6:.1f}\n"
          "{0}_count{{{3}}} {7}\n",
          name, what, engine::MaskStats::kWindow, labels_, times.p50_us.load(), times.p99_us.load(),
          times.sum_us.load(), masks);
    };
    summary("inferd:grammar_mask_microseconds",
            "compute the allowed-token mask of constrained decoding", grammar_mask);
    summary("inferd:grammar_apply_microseconds", "apply the allowed-token mask to the logits",
            grammar_apply);
  }
  std::lock_guard lock(mutex_);
  out += fmt::format(
      "# HELP vllm:prompt_tokens_total Prompt tokens processed.\n"
      "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{{}}} {}\n",
      labels_, prompt_tokens_);
  out += fmt::format(
      "# HELP vllm:generation_tokens_total Tokens generated.\n"
      "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{{}}} {}\n",
      labels_, generation_tokens_);
  out +=
      "# HELP vllm:request_success_total Finished requests by finish reason.\n"
      "# TYPE vllm:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    const auto it = finished_.find(reason);
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                       reason, it == finished_.end() ? 0 : it->second);
  }
  out +=
      "# HELP inferd:requests_rejected_total Requests refused before the engine, by status.\n"
      "# TYPE inferd:requests_rejected_total counter\n";
  for (const auto& [status, count] : rejected_) {
    out += fmt::format("inferd:requests_rejected_total{{{},status=\"{}\"}} {}\n", labels_, status,
                       count);
  }
  render_llama_names(out);
  ttft_.render(out, "vllm:time_to_first_token_seconds", "Time to first token.", labels_);
  itl_.render(out, "vllm:inter_token_latency_seconds", "Gaps between streamed tokens.", labels_);
  e2e_.render(out, "vllm:e2e_request_latency_seconds", "Arrival to finish.", labels_);
  queue_.render(out, "vllm:request_queue_time_seconds", "Arrival to first scheduled.", labels_);
  prefill_.render(out, "vllm:request_prefill_time_seconds", "First scheduled to first token.",
                  labels_);
  decode_.render(out, "vllm:request_decode_time_seconds", "First to last token.", labels_);
  return out;
}

// llama-server's metrics, without labels as it writes them. Its rates are tokens over the
// seconds spent on them, summed over requests; the first generated token comes with the prompt
// and is not timed as decode (RequestStats).
void ServerMetrics::render_llama_names(std::string& out) const {
  const auto metric = [&](const char* kind, const char* name, const char* help, auto value) {
    out += fmt::format("# HELP llamacpp:{0} {1}\n# TYPE llamacpp:{0} {2}\nllamacpp:{0} {3}\n", name,
                       help, kind, value);
  };
  const auto rate = [](double tokens, double seconds) {
    return seconds > 0 ? tokens / seconds : 0.0;
  };
  metric("counter", "prompt_tokens_total", "Prompt tokens computed (not from the prefix cache).",
         prompt_computed_);
  metric("counter", "prompt_tokens_cached_total", "Prompt tokens found in the prefix cache.",
         prompt_cached_);
  metric("counter", "prompt_seconds_total", "Seconds spent on prompts.", prefill_seconds_);
  metric("counter", "tokens_predicted_total", "Tokens generated.", generation_tokens_);
  metric("counter", "tokens_predicted_seconds_total", "Seconds spent generating.", decode_seconds_);
  metric("counter", "n_decode_total", "Engine steps (forward passes).", steps.load());
  metric("counter", "n_tokens_max", "Most tokens one finished sequence held.", longest_sequence_);
  metric("counter", "spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
         spec_draft_tokens.load());
  metric("counter", "spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
         spec_accepted.load());
  metric("counter", "spec_decode_num_drafts_total",
         "Verification steps of a sequence with draft tokens.", spec_drafts.load());
  metric("gauge", "prompt_tokens_seconds", "Prompt tokens a second, over all requests.",
         rate(double(prompt_computed_), prefill_seconds_));
  metric("gauge", "predicted_tokens_seconds", "Generated tokens a second, over all requests.",
         rate(double(generation_tokens_), decode_seconds_));
  metric("gauge", "requests_processing", "Requests in the running batch.", running.load());
  metric("gauge", "requests_deferred", "Requests waiting to be scheduled.", waiting.load());
  const int64_t n_steps = steps.load();
  metric("gauge", "n_busy_slots_per_decode", "Running sequences per engine step, on average.",
         n_steps > 0 ? double(step_sequences.load()) / double(n_steps) : 0.0);
}

}  // namespace inferd::server
