#include "server/stream_channel.h"

namespace inferd::server {

StreamChannel::StreamChannel(ServerMetrics* metrics) : metrics_(metrics) {
  pending_.text.reserve(4096);
  itls_.reserve(4096);
}

void StreamChannel::on_prompt_progress(const engine::PromptProgress& progress) {
  {
    std::lock_guard lock(mutex_);
    pending_.progress.push_back(progress);
    has_output_ = true;
  }
  ready_.notify_one();
}

void StreamChannel::on_text(std::string_view text) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    publish_staged();
    pending_.text.append(text);
    has_output_ = true;
    if (last_piece_ != std::chrono::steady_clock::time_point{})
      itls_.push_back(std::chrono::duration<double>(now - last_piece_).count());
    last_piece_ = now;
  }
}

void StreamChannel::on_token(int32_t token, float logprob,
                             std::span<const sampling::TokenLogprob> top) {
  {
    std::lock_guard lock(mutex_);
    publish_staged();
    staged_.token = token;
    staged_.logprob = logprob;
    staged_.top.assign(top.begin(), top.end());
    has_staged_ = true;
  }
}

void StreamChannel::on_step_end() {
  {
    std::lock_guard lock(mutex_);
    if (!has_output_) return;
  }
  ready_.notify_one();
}

void StreamChannel::publish_staged() {
  if (!has_staged_) return;
  pending_.tokens.push_back(staged_);
  has_staged_ = false;
  has_output_ = true;
}

void StreamChannel::on_finish(const engine::RequestResult& result) {
  {
    std::lock_guard lock(mutex_);
    publish_staged();
    pending_.result = result;
    has_output_ = true;
    if (metrics_ != nullptr) metrics_->record_finish(result, itls_);
  }
  ready_.notify_one();
}

ChannelBatch StreamChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return has_output_; });
  // Copy out and clear, so the engine thread keeps appending into reserved storage.
  ChannelBatch out;
  out.text = pending_.text;
  out.tokens = pending_.tokens;
  out.progress = pending_.progress;
  out.result = std::move(pending_.result);
  pending_.text.clear();
  pending_.tokens.clear();
  pending_.progress.clear();
  pending_.result.reset();
  has_output_ = false;
  return out;
}

}  // namespace inferd::server
