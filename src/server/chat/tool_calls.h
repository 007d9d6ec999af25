// Tool calls in model output: each model family writes them its own way; the OpenAI API returns
// them as message.tool_calls [{id, type: "function", function: {name, arguments}}], arguments
// being a JSON text. parse_tool_calls finds them in a finished answer and leaves the rest as
// content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::server {

enum class ToolCallFormat {
  kHermes,   // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5/3, Hermes)
  kLlama3,   // {"name": ..., "parameters": {...}}, optionally after <|python_tag|> (Llama 3.1+)
  kMistral,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral v3 and later)
  kHarmony,  // <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...} (gpt-oss)
  kGemma4,   // <|tool_call>call:NAME{key:value,...}<tool_call|>, strings in <|"|> (Gemma 4)
  kGeneric,  // {"tool_calls": [{"name": ..., "arguments": {...}}]} (any other model)
};

// The format a chat template's tool section teaches its model, from the markers it writes.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls (trimmed); the whole text when none
  std::vector<ToolCall> calls;
};

// Calls that do not parse as JSON with a name are left in the content: a model that wrote a
// malformed call is shown as it wrote it rather than dropped.
ParsedAnswer parse_tool_calls(std::string_view text, ToolCallFormat format);

// Gemma 4's argument syntax as JSON: {key:value,...} with bare keys, strings between <|"|>
// marks, and JSON's numbers, true, false, null and arrays; nullopt when `text` (one object) is
// not that.
std::optional<std::string> gemma4_arguments_to_json(std::string_view text);

}  // namespace inferd::server
