#include "server/api/anthropic.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/chat/tool_calls.h"
#include "server/json/fields.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// Anthropic names a field by its path with dots (messages.1.content.0.source); json_fields' errors
// (bad_at) do too.
using json_fields::bad_at;
using json_fields::field;
using json_fields::string_field;

std::string block_type(const json& block, const std::string& where) {
  if (!block.is_object()) bad_at(where, "each content block must be an object");
  return string_field(block, "type", where);
}

// Claude Code starts its system prompt with a line like "x-anthropic-billing-header:
// cc_version=...; cch=a5145;" whose cch value changes with every request. Left as is, it makes
// each prompt differ from the last within its first tokens, so the prefix cache never reuses a
// conversation; the value means nothing to a local model, so it is replaced by a fixed one.
void steady_billing_header(std::string& text) {
  constexpr std::string_view kHeader = "x-anthropic-billing-header:";
  if (text.compare(0, kHeader.size(), kHeader) != 0) return;
  const size_t line_end = text.find('\n');
  const size_t key = text.find("cch=", kHeader.size());
  if (key == std::string::npos || key > line_end) return;
  const size_t value = key + 4;
  const size_t value_end = text.find(';', value);
  if (value_end == std::string::npos || value_end > line_end) return;
  text.replace(value, value_end - value, value_end - value, '0');
}

// An image block -> an OpenAI image_url part (data: URL for base64 sources), which the chat
// path answers as it answers images (this server's models read text only).
json image_part(const json& block, const std::string& where) {
  const json* source = field(block, "source");
  if (source == nullptr || !source->is_object())
    bad_at(where + ".source", "an image block needs a 'source' object");
  const std::string kind = string_field(*source, "type", where + ".source");
  std::string url;
  if (kind == "base64") {
    url = fmt::format("data:{};base64,{}", string_field(*source, "media_type", where + ".source"),
                      string_field(*source, "data", where + ".source"));
  } else if (kind == "url") {
    url = string_field(*source, "url", where + ".source");
  } else {
    bad_at(where + ".source.type", fmt::format("image source '{}' is not base64 or url", kind));
  }
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

// OpenAI content from parts: a string when they are all text (what templates expect), the
// list of parts otherwise.
json content_of(const json& parts) {
  std::string text;
  for (const json& part : parts) {
    if (part["type"] != "text") return parts;
    text += part["text"].get<std::string>();
  }
  return text;
}

json text_part(const json& block, const std::string& where) {
  return {{"type", "text"}, {"text", string_field(block, "text", where)}};
}

// A tool_result block -> an OpenAI tool message.
json tool_message(const json& block, const std::string& where) {
  const std::string call_id = string_field(block, "tool_use_id", where);
  json content = "";
  if (const json* c = field(block, "content")) {
    if (c->is_string()) {
      content = *c;
    } else if (c->is_array()) {
      json parts = json::array();
      for (size_t k = 0; k < c->size(); ++k) {
        const std::string at = fmt::format("{}.content.{}", where, k);
        const std::string type = block_type((*c)[k], at);
        if (type == "text") {
          parts.push_back(text_part((*c)[k], at));
        } else if (type == "image") {
          parts.push_back(image_part((*c)[k], at));
        } else {
          bad_at(at + ".type", fmt::format("a tool result holding '{}' is not supported", type));
        }
      }
      content = content_of(parts);
    } else {
      bad_at(where + ".content", "must be a string or a list of content blocks");
    }
  }
  if (const json* e = field(block, "is_error")) {
    if (!e->is_boolean()) bad_at(where + ".is_error", "must be a boolean");
    // OpenAI tool messages and chat templates have no place for the flag, so the model is
    // told in the result's text that the call failed.
    if (e->get<bool>()) {
      if (content.is_string()) {
        content = "Error: " + content.get<std::string>();
      } else {
        content.insert(content.begin(), json{{"type", "text"}, {"text", "Error: "}});
      }
    }
  }
  return {{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}};
}

json tool_call(const json& block, const std::string& where) {
  json input = json::object();
  if (const json* v = field(block, "input")) {
    if (!v->is_object()) bad_at(where + ".input", "must be an object");
    input = *v;
  }
  return {
      {"id", string_field(block, "id", where)},
      {"type", "function"},
      {"function", {{"name", string_field(block, "name", where)}, {"arguments", input.dump()}}}};
}

// One Anthropic message -> the OpenAI messages it becomes (appended to `out`).
void translate_message(const json& m, size_t index, json& out) {
  const std::string where = fmt::format("messages.{}", index);
  if (!m.is_object()) bad_at(where, "each message must be an object");
  const std::string role = string_field(m, "role", where);
  if (role != "user" && role != "assistant")
    bad_at(where + ".role", fmt::format("'{}' is not user or assistant", role));
  const json* content = field(m, "content");
  if (content == nullptr) bad_at(where + ".content", "field required");
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array())
    bad_at(where + ".content", "must be a string or a list of content blocks");
  json parts = json::array(), calls = json::array(), tool_results = json::array();
  std::string reasoning;
  for (size_t k = 0; k < content->size(); ++k) {
    const json& block = (*content)[k];
    const std::string at = fmt::format("{}.content.{}", where, k);
    const std::string type = block_type(block, at);
    if (type == "text") {
      parts.push_back(text_part(block, at));
    } else if (type == "image") {
      parts.push_back(image_part(block, at));
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      if (role != "assistant")
        bad_at(at + ".type", fmt::format("'{}' is for assistant messages", type));
      if (type == "tool_use") calls.push_back(tool_call(block, at));
      if (type == "thinking") reasoning += string_field(block, "thinking", at);
      // redacted_thinking holds thoughts encrypted for Anthropic's own models: nothing a
      // template here could show.
    } else if (type == "tool_result") {
      if (role != "user") bad_at(at + ".type", "'tool_result' is for user messages");
      tool_results.push_back(tool_message(block, at));
    } else {
      bad_at(at + ".type", fmt::format("content blocks of type '{}' are not supported", type));
    }
  }
  if (role == "assistant") {
    if (parts.empty() && calls.empty() && reasoning.empty()) return;
    json message = {{"role", "assistant"},
                    {"content", parts.empty() ? json("") : content_of(parts)}};
    if (!calls.empty()) message["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    out.push_back(std::move(message));
    return;
  }
  // The results come first, whatever their place among the blocks: templates expect a tool
  // message right after the assistant turn that made the call, and Anthropic puts them first.
  for (json& result : tool_results) out.push_back(std::move(result));
  if (!parts.empty() || tool_results.empty())
    out.push_back({{"role", "user"}, {"content", content_of(parts)}});
}

json translate_tools(const json& tools) {
  if (!tools.is_array()) bad_at("tools", "must be a list");
  json out = json::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const json& tool = tools[k];
    const std::string where = fmt::format("tools.{}", k);
    if (!tool.is_object()) bad_at(where, "each tool must be an object");
    // Anthropic's server tools (web_search_..., bash_..., ...) run on its side: here they would
    // be functions nobody implements.
    const std::string type = string_field(tool, "type", where, false);
    if (!type.empty() && type != "custom")
      bad_at(where + ".type", fmt::format("server tool '{}' is not supported", type));
    json function = {{"name", string_field(tool, "name", where)}};
    const std::string description = string_field(tool, "description", where, false);
    if (!description.empty()) function["description"] = description;
    if (const json* schema = field(tool, "input_schema")) {
      if (!schema->is_object()) bad_at(where + ".input_schema", "must be a JSON schema object");
      function["parameters"] = *schema;
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

void translate_tool_choice(const json& choice, json& out) {
  if (!choice.is_object()) bad_at("tool_choice", "must be an object with a 'type'");
  const std::string type = string_field(choice, "type", "tool_choice");
  if (type == "auto" || type == "none") {
    out["tool_choice"] = type;
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "tool") {
    out["tool_choice"] = {{"type", "function"},
                          {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
  } else {
    bad_at("tool_choice.type", fmt::format("'{}' is not auto, any, tool or none", type));
  }
  if (const json* v = field(choice, "disable_parallel_tool_use")) {
    if (!v->is_boolean()) bad_at("tool_choice.disable_parallel_tool_use", "must be a boolean");
    out["parallel_tool_calls"] = !v->get<bool>();
  }
}

// An answer's text and calls: with tools, the calls parsed out of the text (as the chat path
// does), the rest as text.
struct Answer {
  std::string text;
  std::vector<ToolCall> calls;
};

Answer answer_of(const CompletionRequest& request, const ChoiceOutput& c) {
  if (!request.tools.active()) return {c.text, {}};
  ParsedAnswer parsed = parse_tool_calls(c.text, request.tool_format);
  if (parsed.calls.empty()) return {c.text, {}};
  return {std::move(parsed.content), std::move(parsed.calls)};
}

std::string stop_reason(const ChoiceOutput& c, bool called) {
  if (c.finish_reason == "length") return "max_tokens";
  if (called) return "tool_use";
  return c.stop_word.empty() ? "end_turn" : "stop_sequence";
}

json stop_sequence(const ChoiceOutput& c) {
  return c.finish_reason == "stop" && !c.stop_word.empty() ? json(c.stop_word) : json(nullptr);
}

// input_tokens leaves out what the prefix cache held (cache_read_input_tokens), as Anthropic
// counts them; inferd writes nothing to a cache on request, so cache creation is always 0.
json usage(const ChoiceOutput& c) {
  return {{"input_tokens", std::max<int64_t>(c.prompt_tokens - c.cached_tokens, 0)},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", c.cached_tokens},
          {"output_tokens", c.completion_tokens}};
}

std::string tool_use_id(const std::string& message_id, size_t k) {
  const size_t cut = message_id.find('_');
  return fmt::format("toolu_{}_{}", message_id.substr(cut == std::string::npos ? 0 : cut + 1), k);
}

json tool_input(const ToolCall& call) {
  json input = json::parse(call.arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

json block_event(const char* type, int index) {
  return {{"type", type}, {"index", index}};
}

}  // namespace

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error_body(const ApiError& e) {
  return {{"type", "error"},
          {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.what()}}}};
}

json anthropic_to_openai(const json& body) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  json out = json::object();
  if (const json* model = field(body, "model")) out["model"] = *model;
  json messages = json::array();
  if (const json* system = field(body, "system")) {
    std::string text;
    if (system->is_string()) {
      text = system->get<std::string>();
    } else if (system->is_array()) {
      for (size_t k = 0; k < system->size(); ++k) {
        const std::string where = fmt::format("system.{}", k);
        if (block_type((*system)[k], where) != "text")
          bad_at(where + ".type", "system blocks must be of type 'text'");
        text += string_field((*system)[k], "text", where);
      }
    } else {
      bad_at("system", "must be a string or a list of text blocks");
    }
    steady_billing_header(text);
    messages.push_back({{"role", "system"}, {"content", text}});
  }
  const json* list = field(body, "messages");
  if (list == nullptr) bad_at("messages", "field required");
  if (!list->is_array()) bad_at("messages", "must be a list of messages");
  for (size_t i = 0; i < list->size(); ++i) translate_message((*list)[i], i, messages);
  // llama-server answers an empty conversation (its suite checks that); the chat path needs a
  // turn to render, so it gets an empty user turn.
  if (list->empty()) messages.push_back({{"role", "user"}, {"content", ""}});
  out["messages"] = std::move(messages);
  if (const json* tools = field(body, "tools")) out["tools"] = translate_tools(*tools);
  if (const json* choice = field(body, "tool_choice")) translate_tool_choice(*choice, out);
  if (const json* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) bad_at("stop_sequences", "must be a list of strings");
    out["stop"] = *stops;
  }
  // (and llama-server's per-request LoRA scales, which llama-server drops on this route: a
  // request that gives them means them)
  for (const char* name : {"max_tokens", "temperature", "top_p", "top_k", "stream", "lora"}) {
    if (const json* v = field(body, name)) out[name] = *v;
  }
  // Accepted and checked, but they change nothing here: metadata is for Anthropic's abuse
  // tracking, and thinking follows the server's --reasoning and --reasoning-format (a request
  // cannot turn it on or off, and a budget is not enforced).
  if (const json* metadata = field(body, "metadata"); metadata && !metadata->is_object())
    bad_at("metadata", "must be an object");
  if (const json* thinking = field(body, "thinking")) {
    if (!thinking->is_object()) bad_at("thinking", "must be an object with a 'type'");
    const std::string type = string_field(*thinking, "type", "thinking");
    if (type != "enabled" && type != "disabled" && type != "adaptive")
      bad_at("thinking.type", fmt::format("'{}' is not enabled, disabled or adaptive", type));
  }
  return out;
}

json anthropic_count_tokens(const json& body, const ParseContext& ctx) {
  const json chat = anthropic_to_openai(body);
  check_model(chat, ctx);
  const std::string prompt = render_chat_prompt(chat, ctx);
  // Tokenized as parse_completion tokenizes a chat prompt, so the count is what a
  // /v1/messages request with this body would be charged.
  return {{"input_tokens", ctx.tokenizer->encode(prompt, true, true).size()}};
}

json anthropic_message(const CompletionRequest& request, const ChoiceOutput& c,
                       const std::string& id) {
  const Answer answer = answer_of(request, c);
  json content = json::array();
  // Anthropic signs thoughts so its API can check them when they come back; a local model's
  // need no check, and the empty signature tells clients the field is there.
  if (!c.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
  // An answer with nothing to show still gets its (empty) text block: clients read content[0].
  if (!answer.text.empty() || (content.empty() && answer.calls.empty()))
    content.push_back({{"type", "text"}, {"text", answer.text}});
  for (size_t k = 0; k < answer.calls.size(); ++k) {
    content.push_back({{"type", "tool_use"},
                       {"id", tool_use_id(id, k)},
                       {"name", answer.calls[k].name},
                       {"input", tool_input(answer.calls[k])}});
  }
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", request.model},
          {"content", std::move(content)},
          {"stop_reason", stop_reason(c, !answer.calls.empty())},
          {"stop_sequence", stop_sequence(c)},
          {"usage", usage(c)}};
}

std::string anthropic_sse(const json& event) {
  return fmt::format("event: {}\ndata: {}\n\n", event.value("type", "message"),
                     event.dump(-1, ' ', false, json::error_handler_t::replace));
}

AnthropicStreamWriter::AnthropicStreamWriter(const CompletionRequest& request, std::string id)
    : request_(request), id_(std::move(id)) {}

json AnthropicStreamWriter::start() const {
  return {{"type", "message_start"},
          {"message",
           {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", request_.model},
            {"content", json::array()},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr},
            {"usage",
             {{"input_tokens", request_.request.prompt.size()},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", 0},
              {"output_tokens", 0}}}}}};
}

void AnthropicStreamWriter::open(Block kind, std::vector<json>& out) {
  if (open_ == kind) return;
  close(out);
  json event = block_event("content_block_start", blocks_);
  event["content_block"] = kind == Block::kThinking
                               ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                               : json{{"type", "text"}, {"text", ""}};
  out.push_back(std::move(event));
  open_ = kind;
  ++blocks_;
}

void AnthropicStreamWriter::close(std::vector<json>& out) {
  if (open_ == Block::kNone) return;
  if (open_ == Block::kThinking) {  // Anthropic's thinking blocks end with their signature
    json event = block_event("content_block_delta", blocks_ - 1);
    event["delta"] = {{"type", "signature_delta"}, {"signature", ""}};
    out.push_back(std::move(event));
  }
  out.push_back(block_event("content_block_stop", blocks_ - 1));
  open_ = Block::kNone;
}

std::vector<json> AnthropicStreamWriter::delta(const std::string& reasoning,
                                               const std::string& content) {
  std::vector<json> out;
  if (!reasoning.empty()) {
    open(Block::kThinking, out);
    json event = block_event("content_block_delta", blocks_ - 1);
    event["delta"] = {{"type", "thinking_delta"}, {"thinking", reasoning}};
    out.push_back(std::move(event));
  }
  if (!content.empty() && !request_.tools.active()) {
    open(Block::kText, out);
    json event = block_event("content_block_delta", blocks_ - 1);
    event["delta"] = {{"type", "text_delta"}, {"text", content}};
    out.push_back(std::move(event));
  }
  return out;
}

std::vector<json> AnthropicStreamWriter::finish(const ChoiceOutput& c) {
  std::vector<json> out;
  Answer answer;
  if (request_.tools.active()) {
    answer = answer_of(request_, c);
    if (!answer.text.empty()) {
      open(Block::kText, out);
      json event = block_event("content_block_delta", blocks_ - 1);
      event["delta"] = {{"type", "text_delta"}, {"text", answer.text}};
      out.push_back(std::move(event));
    }
  }
  for (size_t k = 0; k < answer.calls.size(); ++k) {
    close(out);
    const int index = blocks_++;
    json start = block_event("content_block_start", index);
    start["content_block"] = {{"type", "tool_use"},
                              {"id", tool_use_id(id_, k)},
                              {"name", answer.calls[k].name},
                              {"input", json::object()}};
    out.push_back(std::move(start));
    json input = block_event("content_block_delta", index);
    input["delta"] = {{"type", "input_json_delta"},
                      {"partial_json", tool_input(answer.calls[k]).dump()}};
    out.push_back(std::move(input));
    out.push_back(block_event("content_block_stop", index));
  }
  if (blocks_ == 0) open(Block::kText, out);  // as anthropic_message: an empty text block
  close(out);
  out.push_back({{"type", "message_delta"},
                 {"delta",
                  {{"stop_reason", stop_reason(c, !answer.calls.empty())},
                   {"stop_sequence", stop_sequence(c)}}},
                 {"usage", usage(c)}});
  out.push_back({{"type", "message_stop"}});
  return out;
}

json AnthropicStreamWriter::ping() {
  return {{"type", "ping"}};
}

}  // namespace inferd::server
