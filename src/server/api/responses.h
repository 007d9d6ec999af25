// OpenAI's Responses API (POST /v1/responses, /responses, /v1/responses/input_tokens), as
// llama-server offers it: a request is translated into the OpenAI chat body parse_completion
// takes, so generation, tools and the reasoning split are the chat path's; the answer is written
// back as a response object or its stream of typed events. No HTTP here: the handlers in
// http_server.cpp call these. Nothing is stored: a request that needs an earlier response
// (previous_response_id, conversation, item_reference) is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"
#include "server/api/openai_response.h"

namespace inferd::server {

// The OpenAI chat body of a Responses request: instructions as the first (system) message; input
// (a string, or a list of items) as messages: message items with their content parts
// (input_text, output_text, refusal -> text, input_image -> image_url), reasoning items as the
// next assistant turn's reasoning_content, function_call items as its tool_calls,
// function_call_output items as tool messages; function tools flattened into chat's shape,
// tool_choice, max_output_tokens as max_tokens, text.format as response_format, and the sampling
// and llama-server fields the chat path shares (top_k, seed, stop, return_progress,
// timings_per_token, ...). Shapes that cannot be translated, and fields that need state or
// features this server lacks (previous_response_id, background, logprobs, ...), are an ApiError
// 400 naming the field ("input[2].content[0].type"); values are left for parse_completion.
nlohmann::ordered_json responses_to_openai(const nlohmann::ordered_json& body);

// responses_to_openai, then parse_completion as a chat request; errors about a translated field
// name the field the client sent (max_output_tokens, text.format, input), not chat's.
CompletionRequest parse_responses(const nlohmann::ordered_json& body, const ParseContext& ctx);

// POST /v1/responses/input_tokens: {"object": "response.input_tokens", "input_tokens": N}, the
// tokens of the prompt the chat template renders for the request (what /v1/responses would
// compute).
nlohmann::ordered_json responses_input_tokens(const nlohmann::ordered_json& body,
                                              const ParseContext& ctx);

// The non-streaming answer: {"id", "object": "response", "created_at", "status" (completed, or
// incomplete when max_output_tokens cut it, with incomplete_details), "error", "model",
// "output": [reasoning, message, function_call...], "output_text", "usage"}. `id` is the
// response's ("resp_..."); the items' ids ("rs_", "msg_", "fc_", and "call_" for call_id) are
// derived from it and their place in output.
nlohmann::ordered_json responses_response(const CompletionRequest& request, const ChoiceOutput& c,
                                          const std::string& id, int64_t created_at);

// One event as server-sent text: "event: TYPE\ndata: JSON\n\n".
std::string responses_sse(const nlohmann::ordered_json& event);

// The events of one streamed answer, each with its "type" and a "sequence_number" counted from 0
// in the order they are made: write every event returned, in order. Output items are written one
// after the other, each done before the next is added, with output_index counted from 0: a
// reasoning item while thoughts come, a message item (one output_text part) while text comes,
// then one function_call item per call. With tools the answer's text is held back until it has
// finished, since only then is it known which part of it is calls (reasoning still streams).
//
// Events are returned as JSON for the caller to decorate before writing, as llama-server does:
// "prompt_progress" (and "timings") on an in_progress() event, "timings" on
// response.output_text.delta events and on the response.completed event (the last of finish()),
// beside "type" at the top level.
class ResponsesStreamWriter {
 public:
  ResponsesStreamWriter(const CompletionRequest& request, std::string id, int64_t created_at);

  // response.created, then response.in_progress: the response with no output yet.
  std::vector<nlohmann::ordered_json> start();
  // Another response.in_progress (the output done so far): where prompt progress is reported.
  nlohmann::ordered_json in_progress();
  // Events for newly generated thoughts and answer text.
  std::vector<nlohmann::ordered_json> delta(const std::string& reasoning,
                                            const std::string& content);
  // The events once the answer has finished: any text not streamed yet (all of it, with tools),
  // the open item's done events, the function_call items, and response.completed holding the
  // whole response. The final event is response.completed even when max_output_tokens cut the
  // answer (as llama-server sends it); the response in it then says status "incomplete".
  std::vector<nlohmann::ordered_json> finish(const ChoiceOutput& c);
  // When generation fails after the stream has begun: an error event, then response.failed.
  std::vector<nlohmann::ordered_json> failed(const ApiError& e);

 private:
  enum class Item { kNone, kReasoning, kMessage };
  nlohmann::ordered_json event(const char* type);
  nlohmann::ordered_json snapshot(const std::string& status) const;
  // Opens an item of `kind` unless one is open already, closing the open one first.
  void open(Item kind, std::vector<nlohmann::ordered_json>& out);
  void close(const std::string& status, std::vector<nlohmann::ordered_json>& out);
  void write_reasoning(const std::string& text, std::vector<nlohmann::ordered_json>& out);
  void write_text(const std::string& text, std::vector<nlohmann::ordered_json>& out);

  const CompletionRequest& request_;
  std::string id_;
  int64_t created_at_;
  int64_t sequence_ = 0;
  Item open_ = Item::kNone;
  std::string open_id_, open_text_;         // the open item's id and what it holds so far
  bool wrote_message_ = false;              // a message item has been opened
  std::string reasoning_sent_, text_sent_;  // all streamed so far
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // the items done
};

}  // namespace inferd::server
