// StreamChannel: the output channel of one HTTP request. The engine thread pushes text pieces,
// token logprobs and the final record; the connection's thread waits for them and is woken once
// a step (a step that accepted drafts makes several tokens), for progress and at the finish.
// Cancelling (client gone) is a flag the engine polls every step. The finished request is recorded
// in the metrics here, so a request whose client has gone is counted too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/metrics.h"

namespace inferd::server {

struct TokenInfo {
  int32_t token = 0;
  float logprob = 0;
  std::vector<sampling::TokenLogprob> top;
};

// What a connection takes out of the channel at once: text and tokens since the last call,
// and the final record once the request has finished.
struct ChannelBatch {
  std::string text;
  std::vector<TokenInfo> tokens;
  std::vector<engine::PromptProgress> progress;  // when the request reports it
  std::optional<engine::RequestResult> result;
};

class StreamChannel final : public engine::OutputChannel {
 public:
  // `metrics` (may be null) records the request when it finishes, however it finishes.
  explicit StreamChannel(ServerMetrics* metrics = nullptr);
  void on_text(std::string_view text) override;
  void on_token(int32_t token, float logprob, std::span<const sampling::TokenLogprob> top) override;
  void on_prompt_progress(const engine::PromptProgress& progress) override;
  void on_step_end() override;
  void on_finish(const engine::RequestResult& result) override;
  bool cancelled() const override { return cancelled_.load(std::memory_order_relaxed); }

  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  // Waits up to `timeout` for output; returns what arrived (possibly nothing).
  ChannelBatch wait(std::chrono::milliseconds timeout);

 private:
  ServerMetrics* metrics_;
  std::mutex mutex_;
  std::condition_variable ready_;
  ChannelBatch pending_;
  // A token whose text has not come yet: the engine reports a token, then its text, and a
  // batch taken between the two would split them (a chunk with the token's logprobs and no
  // text, then one with text and no logprobs). It joins pending_ with its text, with the next
  // token (its text was held back: a partial character, a possible stop string) or at the end.
  TokenInfo staged_;
  bool has_staged_ = false;
  bool has_output_ = false;
  std::atomic<bool> cancelled_{false};
  std::chrono::steady_clock::time_point last_piece_{};
  std::vector<double> itls_;

  void publish_staged();  // under mutex_
};

}  // namespace inferd::server
