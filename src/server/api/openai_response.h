// OpenAI response bodies and stream chunks for completions and chat completions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api/openai_request.h"
#include "server/stream_channel.h"

namespace inferd::server {

// Everything one choice has produced so far.
struct ChoiceOutput {
  std::string text;       // chat: the answer (content)
  std::string reasoning;  // chat with a reasoning split: the thoughts (reasoning_content)
  std::vector<TokenInfo> tokens;
  std::string finish_reason;  // empty while running
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;   // of the prompt tokens, those found in the prefix cache
  engine::RequestStats stats;  // set when the choice finishes
  std::string stop_word;       // the stop string that ended it, if one did
  // The prompt's tokens' logprobs (request.prompt_logprobs), set when the choice finishes.
  std::vector<engine::PromptTokenLogprob> prompt_logprobs;
};

// A token's bytes as a list of numbers (OpenAI's logprobs "bytes"; llama-server's pieces that
// are not whole UTF-8).
nlohmann::ordered_json bytes_of(std::string_view piece);

class ResponseWriter {
 public:
  ResponseWriter(const CompletionRequest& request, const tokenizer::Tokenizer& tokenizer,
                 std::string id, int64_t created);

  // The whole non-streaming response.
  nlohmann::ordered_json full(const std::vector<ChoiceOutput>& choices) const;
  // A stream chunk with new text/tokens of choice `index` (and its finish reason, if any).
  // `reasoning`: new thoughts of a chat answer (delta.reasoning_content).
  nlohmann::ordered_json chunk(int index, const std::string& text,
                               const std::vector<TokenInfo>& tokens,
                               const std::string& finish_reason,
                               const std::string& reasoning = {}) const;
  // The first chat chunk of a choice: the assistant role, empty content.
  nlohmann::ordered_json role_chunk(int index) const;
  // A finished chat answer of a request with tools: its content (if any), then a chunk per
  // tool call (delta.tool_calls with the call's index), then the finish reason.
  std::vector<nlohmann::ordered_json> final_tool_chunks(int index, const ChoiceOutput& c) const;
  // The last chunk with stream_options.include_usage: usage and timings, no choices.
  nlohmann::ordered_json usage_chunk(const std::vector<ChoiceOutput>& choices) const;
  // llama-server's `timings` of a finished choice: prompt_n / prompt_ms (the prompt tokens
  // computed, not found in the prefix cache, and the time from the first scheduled step to the
  // first token), predicted_n / predicted_ms (the tokens generated, and the time from the first
  // to the last), their per-token and per-second rates (predicted_per_second: the tokens after
  // the first over predicted_ms, the decode rate), and inferd's ttft_ms (arrival to the first
  // token, queueing included).
  static nlohmann::ordered_json timings(const ChoiceOutput& choice);

 private:
  // `prompt`: echo's prompt tokens, listed first (the first with null logprobs).
  nlohmann::ordered_json logprobs(
      const std::vector<TokenInfo>& tokens, size_t text_offset,
      const std::vector<engine::PromptTokenLogprob>* prompt = nullptr) const;
  // vLLM's prompt_logprobs: null for the first token, then {"id": {logprob, rank,
  // decoded_token}} with the token itself and its alternatives.
  nlohmann::ordered_json prompt_logprobs(
      const std::vector<engine::PromptTokenLogprob>& prompt) const;
  nlohmann::ordered_json usage(const std::vector<ChoiceOutput>& choices) const;
  nlohmann::ordered_json envelope(const char* object) const;
  // An answer's tool calls in the API's shape and the content left; "tool_calls" as the finish
  // reason when the model stopped after calling.
  struct ToolOutcome {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    std::string content, finish_reason;
  };
  ToolOutcome tool_outcome(int index, const ChoiceOutput& c) const;

  const CompletionRequest& request_;
  const tokenizer::Tokenizer& tokenizer_;
  std::string id_;
  int64_t created_;
};

}  // namespace inferd::server
