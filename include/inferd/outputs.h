// What a generation returns and streams: per prompt a RequestOutput holding one
// CompletionOutput per choice (vLLM's shapes), StreamDelta for text as it is made, and
// CancelToken to stop requests from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace inferd {

enum class FinishReason {
  kStop,       // an end-of-generation token, a stop string, or a completed grammar
  kLength,     // max_tokens, or the context is full
  kCancelled,  // CancelToken::cancel()
  kError,      // CompletionOutput::error says why
};
// "stop", "length", "cancelled", "error" (OpenAI's finish_reason words).
const char* finish_reason_name(FinishReason reason);

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

// One generated token's log-probability and the most likely alternatives at its position.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // SamplingParams::logprobs of them, most likely first
};

// A prompt token's log-probability under the model's distribution at the position before it
// (SamplingParams::prompt_logprobs).
struct PromptTokenLogprobs {
  int32_t token = -1;
  float logprob = 0;              // NaN for the first prompt token: nothing predicts it
  int32_t rank = 0;               // 1 + the tokens more likely there (0 for the first token)
  std::vector<TokenLogprob> top;  // SamplingParams::prompt_logprobs of them, most likely first
};

struct CompletionOutput {
  int32_t index = 0;               // the choice, 0 .. n - 1
  std::string text;                // never contains a stop string
  std::vector<int32_t> token_ids;  // generated tokens (with a stop string's tokens: they were made)
  FinishReason finish_reason = FinishReason::kStop;
  std::string stop_reason;  // the stop string that ended the text, if one did
  int32_t stop_token_id = -1;  // the SamplingParams::stop_token_ids entry that ended it, if one did
  std::string error;        // finish_reason kError: what went wrong
  // SamplingParams::logprobs >= 0: one entry per generated token.
  std::vector<TokenLogprobs> logprobs;
  // Beam search: the hypothesis's summed log-probability and its length-penalised score.
  double cumulative_logprob = 0;
  double score = 0;
};

// Timings of a prompt's first choice (seconds from its arrival in the engine).
struct RequestMetrics {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  double queue_s = 0;         // arrival -> first scheduled
  double ttft_s = 0;          // arrival -> first generated token
  double prefill_s = 0;       // first scheduled -> first generated token
  double decode_s = 0;        // first -> last generated token
  double e2e_s = 0;           // arrival -> finish
};

struct RequestOutput {
  size_t index = 0;                       // the prompt's place in the call's list
  std::string prompt;                     // as given (a chat: the rendered template)
  std::vector<int32_t> prompt_token_ids;  // what the model read
  std::vector<CompletionOutput>
      outputs;  // n choices (beam search: the best hypotheses, best first)
  RequestMetrics metrics;
  // SamplingParams::prompt_logprobs >= 0: one entry per prompt token.
  std::vector<PromptTokenLogprobs> prompt_logprobs;
};

// A piece of streamed output: final text (whole UTF-8 characters, never part of a stop string)
// of one choice of one prompt, in order. The last delta of a choice has finished set (and
// possibly empty text; text.data() is never null).
struct StreamDelta {
  size_t prompt_index = 0;
  int32_t choice = 0;
  std::string_view text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;  // when finished
};

// Called on the thread that called generate()/chat(), between engine steps: it should be quick
// (the other requests wait). An exception it throws cancels the call's requests and is rethrown
// by generate() once they have stopped.
using StreamCallback = std::function<void(const StreamDelta&)>;

// Stops the requests of the call it is passed to: they finish with FinishReason::kCancelled at
// the engine's next step, keeping what they made. Copies share one flag; cancel() may be called
// from any thread.
class CancelToken {
 public:
  CancelToken() : flag_(std::make_shared<std::atomic<bool>>(false)) {}
  void cancel() const noexcept { flag_->store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return flag_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
};

}  // namespace inferd
