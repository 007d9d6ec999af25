#include "server/chat/tools.h"

#include <fmt/format.h>

#include "server/api/openai_request.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// The schema of a function's arguments. A function without parameters takes none: {}.
json parameters_schema(const json& function) {
  if (function.contains("parameters")) return function["parameters"];
  return {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
}

// The JSON object one call of `function` is, in the family's spelling of the arguments key.
json call_schema(const json& function, const char* arguments_key) {
  return {{"type", "object"},
          {"properties",
           {{"name", {{"const", function["name"]}}}, {arguments_key, parameters_schema(function)}}},
          {"required", {"name", arguments_key}},
          {"additionalProperties", false}};
}

// gpt-oss is free to reason first (an analysis message, as it is trained to), then writes one
// call as harmony frames it: a commentary message to functions.NAME whose body is the arguments.
// The call then ends with <|call|>, an end-of-generation token the finished grammar allows. One
// call per turn, parallel or not: gpt-oss stops at <|call|> and its template renders one.
structured::GrammarSpec harmony_call_grammar(const ToolRequest& tools) {
  structured::GrammarSpec spec;
  spec.kind = structured::GrammarSpec::Kind::kAnyOf;
  spec.lead =
      "root ::= (\"<|channel|>analysis<|message|>\" thought \"<|end|><|start|>assistant\")?\n"
      "thought ::= ([^<] | \"<\" [^|])*";
  for (const json& tool : tools.tools) {
    const json& function = tool["function"];
    if (tools.choice == ToolChoice::kNamed && function["name"] != tools.name) continue;
    structured::GrammarSpec call;
    call.kind = structured::GrammarSpec::Kind::kJsonSchema;
    call.text = parameters_schema(function).dump();
    call.prefix = fmt::format("<|channel|>commentary to=functions.{} <|constrain|>json<|message|>",
                              function["name"].get<std::string>());
    spec.alternatives.push_back(std::move(call));
  }
  return spec;
}

// Gemma 4's calls (<|tool_call>call:NAME{key:value,...}<tool_call|>), after its thoughts if it
// writes them: the call syntax as llama.cpp's gemma4 parser accepts it, any argument values
// (its argument syntax is not JSON, so the schema is not applied within them).
structured::GrammarSpec gemma4_call_grammar(const ToolRequest& tools) {
  std::string names;
  for (const json& tool : tools.tools) {
    const json& function = tool["function"];
    if (tools.choice == ToolChoice::kNamed && function["name"] != tools.name) continue;
    if (!names.empty()) names += " | ";
    names += json(function["name"].get<std::string>()).dump();  // a quoted EBNF literal
  }
  const bool several = tools.parallel && tools.choice != ToolChoice::kNamed;
  // 1 to n of `atom`: numbers keep to what a double holds, so every one reads back as JSON.
  const auto up_to = [](int n, const std::string& atom) {
    std::string out = atom;
    for (int i = 1; i < n; ++i) out = atom + " (" + out + ")?";
    return out;
  };
  structured::GrammarSpec spec;
  spec.kind = structured::GrammarSpec::Kind::kEbnf;
  spec.text = std::string("root ::= thought? ") + (several ? "call+" : "call") + "\n" +
              "thought ::= ws \"<|channel>thought\" ([^<] | \"<\" [^c])* \"<channel|>\" ws\n"
              "call ::= \"<|tool_call>call:\" name dict \"<tool_call|>\"\n"
              "name ::= " +
              names +
              "\n"
              "dict ::= \"{\" ws (\"}\" | member (\",\" ws member)* ws \"}\")\n"
              "member ::= [a-zA-Z0-9_.-]+ \":\" ws value\n"
              "value ::= string | dict | array | number | \"true\" | \"false\" | \"null\"\n"
              "string ::= \"<|\\\"|>\" ([^<] | \"<\" [^|])* \"<|\\\"|>\"\n"
              "array ::= \"[\" ws (\"]\" | value (\",\" ws value)* ws \"]\")\n"
              "number ::= \"-\"? (\"0\" | [1-9] (" +
              up_to(14, "[0-9]") + ")?) (\".\" " + up_to(15, "[0-9]") + ")? ([eE] [-+]? " +
              up_to(2, "[0-9]") +
              ")?\n"
              "ws ::= [ \\t\\n]*\n";
  return spec;
}

}  // namespace

ToolRequest parse_tools(const json& body) {
  ToolRequest out;
  const auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) bad("tools", "'tools' must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string param = fmt::format("tools[{}]", i);
      if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
          !tool["function"].is_object())
        bad(param, "each tool must be {\"type\": \"function\", \"function\": {...}}");
      const json& function = tool["function"];
      if (!function.contains("name") || !function["name"].is_string() ||
          function["name"].get<std::string>().empty())
        bad(param + ".function.name", "each function needs a non-empty string 'name'");
      if (function.contains("parameters") && !function["parameters"].is_object())
        bad(param + ".function.parameters", "'parameters' must be a JSON schema object");
    }
    out.tools = *tools;
  }
  const bool have_tools = !out.tools.empty();
  out.choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  const auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        out.choice = ToolChoice::kNone;
      } else if (c == "auto") {
        out.choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
      } else if (c == "required") {
        out.choice = ToolChoice::kRequired;
      } else {
        bad("tool_choice", fmt::format("tool_choice '{}' is not none, auto or required", c));
      }
    } else if (choice->is_object() && choice->value("type", "") == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      out.choice = ToolChoice::kNamed;
      out.name = (*choice)["function"]["name"].get<std::string>();
    } else {
      bad("tool_choice",
          "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}");
    }
    if ((out.choice == ToolChoice::kRequired || out.choice == ToolChoice::kNamed) && !have_tools)
      bad("tool_choice", "tool_choice asks for a call but the request has no tools");
    if (out.choice == ToolChoice::kNamed) {
      bool found = false;
      for (const json& tool : out.tools) found |= tool["function"]["name"] == out.name;
      if (!found) bad("tool_choice", fmt::format("no tool is named '{}'", out.name));
    }
  }
  const auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean())
      bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out.parallel = parallel->get<bool>();
  }
  return out;
}

structured::GrammarSpec tool_call_grammar(const ToolRequest& tools, ToolCallFormat format) {
  if (format == ToolCallFormat::kHarmony) return harmony_call_grammar(tools);
  if (format == ToolCallFormat::kGemma4) return gemma4_call_grammar(tools);
  const char* arguments_key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  json options = json::array();
  for (const json& tool : tools.tools) {
    if (tools.choice == ToolChoice::kNamed && tool["function"]["name"] != tools.name) continue;
    options.push_back(call_schema(tool["function"], arguments_key));
  }
  const json one = options.size() == 1 ? options[0] : json{{"anyOf", options}};
  const bool several = tools.parallel && tools.choice != ToolChoice::kNamed;
  structured::GrammarSpec spec;
  spec.kind = structured::GrammarSpec::Kind::kJsonSchema;
  switch (format) {
    case ToolCallFormat::kHermes:
      spec.text = one.dump();
      spec.prefix = "<tool_call>\n";
      spec.suffix = "\n</tool_call>";
      break;
    case ToolCallFormat::kLlama3:
      spec.text = one.dump();
      break;
    case ToolCallFormat::kMistral: {
      json list = {{"type", "array"}, {"items", one}, {"minItems", 1}};
      if (!several) list["maxItems"] = 1;
      spec.text = list.dump();
      spec.prefix = "[TOOL_CALLS]";
      break;
    }
    case ToolCallFormat::kHarmony:  // their own kind of grammar, above
    case ToolCallFormat::kGemma4:
      break;
    case ToolCallFormat::kGeneric: {
      json list = {{"type", "array"}, {"items", one}, {"minItems", 1}};
      if (!several) list["maxItems"] = 1;
      spec.text = json{
          {"type", "object"},
          {"properties", {{"tool_calls", list}}},
          {"required", {"tool_calls"}},
          {"additionalProperties",
           false}}.dump();
      break;
    }
  }
  return spec;
}

void prepare_tool_history(json& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    json& calls = m["tool_calls"];
    for (size_t j = 0; j < calls.size(); ++j) {
      json& call = calls[j];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      json& function = call["function"];
      if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
      json parsed = json::parse(function["arguments"].get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) {
        bad(fmt::format("messages[{}].tool_calls[{}].function.arguments", i, j),
            "tool call arguments must be a JSON text");
      }
      function["arguments"] = std::move(parsed);
    }
  }
}

}  // namespace inferd::server
