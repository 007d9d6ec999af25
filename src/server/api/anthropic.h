// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), as llama-server
// offers it: a request is translated into the OpenAI chat body parse_completion takes, so
// generation, tools and the reasoning split are the chat path's; the answer is written back as
// Anthropic's message object or its stream of typed events. No HTTP here: the handlers in
// http_server.cpp call these.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"
#include "server/api/openai_response.h"

namespace inferd::server {

// Anthropic's error type for an HTTP status (invalid_request_error, authentication_error, ...).
std::string anthropic_error_type(int status);
// {"type": "error", "error": {"type", "message"}}: what Anthropic's SDKs read on a failure,
// as a response body or, once a stream has started, as its `error` event.
nlohmann::ordered_json anthropic_error_body(const ApiError& e);

// The OpenAI chat body of an Anthropic request: system (a string or text blocks) as a system
// message; content blocks as message content (text, image -> image_url), tool calls (tool_use),
// tool messages (tool_result) and reasoning_content (thinking); tools, tool_choice,
// stop_sequences and the sampling fields under their OpenAI names. Shapes that cannot be
// translated are an ApiError 400 naming where they are; values are left for parse_completion
// to check. max_tokens is optional here (count_tokens has none).
nlohmann::ordered_json anthropic_to_openai(const nlohmann::ordered_json& body);

// POST /v1/messages/count_tokens: {"input_tokens": N}, the tokens of the prompt the chat
// template renders for the request (what /v1/messages would compute).
nlohmann::ordered_json anthropic_count_tokens(const nlohmann::ordered_json& body,
                                              const ParseContext& ctx);

// The non-streaming answer: {"id", "type": "message", "role", "model", "content": [thinking,
// text, tool_use...], "stop_reason", "stop_sequence", "usage"}. `id` is the message's
// ("msg_..."); tool_use blocks get ids derived from it.
nlohmann::ordered_json anthropic_message(const CompletionRequest& request, const ChoiceOutput& c,
                                         const std::string& id);

// One event as server-sent text: "event: TYPE\ndata: JSON\n\n".
std::string anthropic_sse(const nlohmann::ordered_json& event);

// The events of one streamed answer. Blocks are written one after the other, each closed
// before the next opens, and numbered from 0 in that order: thinking, text, then one tool_use
// block per call. With tools the answer's text is held back until it has finished, since only
// then is it known which part of it is calls (reasoning still streams as it comes).
class AnthropicStreamWriter {
 public:
  AnthropicStreamWriter(const CompletionRequest& request, std::string id);

  // message_start: the message with no content yet. The prompt's length is known before any
  // output; how much of it the prefix cache held is not, so usage says so at message_delta.
  nlohmann::ordered_json start() const;
  // Events for newly generated thoughts and answer text.
  std::vector<nlohmann::ordered_json> delta(const std::string& reasoning,
                                            const std::string& content);
  // The events once the answer has finished: held-back text and tool_use blocks, the last
  // content_block_stop, message_delta (stop reason, usage) and message_stop.
  std::vector<nlohmann::ordered_json> finish(const ChoiceOutput& c);
  // Anthropic's keep-alive event.
  static nlohmann::ordered_json ping();

 private:
  enum class Block { kNone, kThinking, kText };
  // Opens a block of `kind` unless one is open already, closing the open one first.
  void open(Block kind, std::vector<nlohmann::ordered_json>& out);
  void close(std::vector<nlohmann::ordered_json>& out);

  const CompletionRequest& request_;
  std::string id_;
  Block open_ = Block::kNone;
  int blocks_ = 0;  // blocks started so far; the next one's index
};

}  // namespace inferd::server
