// Function calling in chat requests: the request's `tools`, `tool_choice` and
// `parallel_tool_calls`, the grammar that makes the model call (tool_choice "required" or a
// named function), and the assistant turns of the history made ready for chat templates.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/chat/tool_calls.h"
#include "structured/grammar.h"

namespace inferd::server {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as the request gives them
  ToolChoice choice = ToolChoice::kNone;
  std::string name;  // kNamed: the function to call
  bool parallel = true;
  // Whether the answer may hold calls (and is parsed for them).
  bool active() const { return choice != ToolChoice::kNone; }
};

// Parses and checks tools (each {"type": "function", "function": {"name", "description"?,
// "parameters"?}}), tool_choice ("none", "auto", "required", {"type": "function", "function":
// {"name"}}; default "auto" with tools, "none" without) and parallel_tool_calls. Throws ApiError
// naming the field.
ToolRequest parse_tools(const nlohmann::ordered_json& body);

// The output constraint of tool_choice "required" or a named function, in the model family's
// call syntax: one call (several when parallel and not named) whose arguments follow the
// function's parameters schema. gpt-oss (harmony): one call, after its reasoning if it gives any.
structured::GrammarSpec tool_call_grammar(const ToolRequest& tools, ToolCallFormat format);

// Assistant turns of the history carry tool_calls whose arguments are JSON text (OpenAI's
// shape); templates index into them as objects (`tool_call.arguments | tojson`, `.items()`), so
// they are parsed in place. Throws ApiError naming a message whose arguments are not JSON.
void prepare_tool_history(nlohmann::ordered_json& messages);

}  // namespace inferd::server
