#include "server/api/responses.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "server/chat/tool_calls.h"
#include "server/json/fields.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// Fields are named as the chat path names them, with brackets for list places
// (input[1].content[0].type); json_fields' errors (bad_at) do too, with the place first in the
// message.
using json_fields::bad_at;
using json_fields::field;
using json_fields::string_field;

const json* object_field(const json& object, const char* name, const std::string& where) {
  const json* v = field(object, name);
  if (v != nullptr && !v->is_object()) bad_at(where, "must be an object");
  return v;
}

// Content from chat parts: nothing is "", one text part its text (what templates expect of
// string content), anything else the list, which the chat path joins or refuses.
json content_of(const json& parts) {
  if (parts.empty()) return "";
  if (parts.size() == 1 && parts[0]["type"] == "text") return parts[0]["text"];
  return parts;
}

// A content part of a message or a function_call_output -> a chat part.
json translate_part(const json& part, const std::string& where) {
  if (!part.is_object()) bad_at(where, "each content part must be an object");
  const std::string type = string_field(part, "type", where);
  if (type == "input_text" || type == "output_text")
    return {{"type", "text"}, {"text", string_field(part, "text", where)}};
  // What the model said instead of answering: text it wrote, as far as a template is concerned.
  if (type == "refusal") return {{"type", "text"}, {"text", string_field(part, "refusal", where)}};
  if (type == "input_image") {
    // An uploaded file would have to be fetched from OpenAI's storage.
    if (field(part, "image_url") == nullptr && field(part, "file_id") != nullptr)
      bad_at(where + ".file_id", "images by file_id are not supported: give image_url");
    // The chat path answers image parts as it answers images (this server's models read text).
    return {{"type", "image_url"},
            {"image_url", {{"url", string_field(part, "image_url", where)}}}};
  }
  bad_at(where + ".type", fmt::format("content parts of type '{}' are not supported", type));
}

json translate_parts(const json& content, const std::string& where) {
  json parts = json::array();
  for (size_t k = 0; k < content.size(); ++k)
    parts.push_back(translate_part(content[k], fmt::format("{}[{}]", where, k)));
  return parts;
}

// Responses lists one assistant turn as separate items (reasoning, message, function_call...);
// chat keeps a turn in one message. Items of the assistant's add to the conversation's last
// message when it is the assistant's, or start a new one.
json& assistant_turn(json& messages) {
  if (messages.empty() || messages.back()["role"] != "assistant")
    messages.push_back({{"role", "assistant"}, {"content", ""}});
  return messages.back();
}

void add_text(json& message, const json& parts) {
  json all = json::array();
  const json& have = message["content"];
  if (have.is_array()) {
    all = have;
  } else if (have != "") {
    all.push_back({{"type", "text"}, {"text", have}});
  }
  for (const json& part : parts) all.push_back(part);
  message["content"] = content_of(all);
}

void translate_message(const json& item, const std::string& where, json& messages) {
  const std::string role = string_field(item, "role", where);
  if (role != "user" && role != "system" && role != "developer" && role != "assistant")
    bad_at(where + ".role", fmt::format("'{}' is not user, system, developer or assistant", role));
  const json* content = field(item, "content");
  if (content == nullptr) bad_at(where + ".content", "field required");
  json parts;
  if (content->is_string()) {
    parts = json::array({{{"type", "text"}, {"text", *content}}});
  } else if (content->is_array()) {
    parts = translate_parts(*content, where + ".content");
  } else {
    bad_at(where + ".content", "must be a string or a list of content parts");
  }
  if (role == "assistant") {
    add_text(assistant_turn(messages), parts);
  } else {
    messages.push_back({{"role", role}, {"content", content_of(parts)}});
  }
}

// The thoughts of a reasoning item: its reasoning_text, or, when it has none (OpenAI's own
// models return a summary only), the summary, the nearest to them there is.
std::string reasoning_text(const json& item, const std::string& where) {
  std::string text;
  for (const char* name : {"content", "summary"}) {
    const json* list = field(item, name);
    if (list == nullptr) continue;
    if (!list->is_array()) bad_at(fmt::format("{}.{}", where, name), "must be a list");
    for (size_t k = 0; k < list->size(); ++k) {
      const std::string at = fmt::format("{}.{}[{}]", where, name, k);
      if (!(*list)[k].is_object()) bad_at(at, "must be an object");
      if (!text.empty()) text += "\n\n";
      text += string_field((*list)[k], "text", at);
    }
    if (!text.empty()) break;
  }
  return text;
}

void translate_item(const json& item, const std::string& where, json& messages) {
  if (!item.is_object()) bad_at(where, "each input item must be an object");
  const std::string type = string_field(item, "type", where, false);
  if (type.empty() || type == "message") {
    translate_message(item, where, messages);
  } else if (type == "function_call") {
    json& turn = assistant_turn(messages);
    if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
    turn["tool_calls"].push_back({{"id", string_field(item, "call_id", where)},
                                  {"type", "function"},
                                  {"function",
                                   {{"name", string_field(item, "name", where)},
                                    {"arguments", string_field(item, "arguments", where)}}}});
  } else if (type == "function_call_output") {
    const std::string call_id = string_field(item, "call_id", where);
    const json* output = field(item, "output");
    if (output == nullptr) bad_at(where + ".output", "field required");
    json content;
    if (output->is_string()) {
      content = *output;
    } else if (output->is_array()) {
      content = content_of(translate_parts(*output, where + ".output"));
    } else {
      bad_at(where + ".output", "must be a string or a list of content parts");
    }
    messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", content}});
  } else if (type == "reasoning") {
    const std::string text = reasoning_text(item, where);
    if (text.empty()) return;  // encrypted thoughts only: OpenAI's, unreadable here
    json& turn = assistant_turn(messages);
    const std::string had = turn.value("reasoning_content", "");
    turn["reasoning_content"] = had.empty() ? text : had + "\n\n" + text;
  } else if (type == "item_reference") {
    bad_at(where + ".type", "item references name stored items; this server stores none");
  } else {
    bad_at(where + ".type", fmt::format("input items of type '{}' are not supported", type));
  }
}

json translate_tools(const json& tools) {
  if (!tools.is_array()) bad_at("tools", "must be a list");
  json out = json::array();
  for (size_t k = 0; k < tools.size(); ++k) {
    const json& tool = tools[k];
    const std::string where = fmt::format("tools[{}]", k);
    if (!tool.is_object()) bad_at(where, "each tool must be an object");
    // Built-in tools (web_search, file_search, code_interpreter, mcp, ...) run on OpenAI's side:
    // here they would be functions nobody implements, and leaving them out would hide them
    // from the model without a word.
    const std::string type = string_field(tool, "type", where);
    if (type != "function")
      bad_at(where + ".type", fmt::format("'{}' tools are not supported, only 'function'", type));
    json function = {{"name", string_field(tool, "name", where)}};
    const std::string description = string_field(tool, "description", where, false);
    if (!description.empty()) function["description"] = description;
    if (const json* parameters = object_field(tool, "parameters", where + ".parameters"))
      function["parameters"] = *parameters;
    // strict is not passed on: the chat path holds calls to the schema under tool_choice
    // "required" or a named function, whatever a tool's strict says (as for chat requests).
    if (const json* strict = field(tool, "strict"); strict && !strict->is_boolean())
      bad_at(where + ".strict", "must be a boolean");
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

json translate_tool_choice(const json& choice) {
  if (choice.is_string()) return choice;  // none, auto, required: parse_completion checks
  if (!choice.is_object()) bad_at("tool_choice", "must be a string or an object with a 'type'");
  const std::string type = string_field(choice, "type", "tool_choice");
  if (type != "function")
    bad_at("tool_choice.type", fmt::format("'{}' is not supported, only 'function'", type));
  return {{"type", "function"},
          {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
}

void translate_text(const json& text, json& out) {
  if (!text.is_object()) bad_at("text", "must be an object");
  if (const json* format = object_field(text, "format", "text.format")) {
    const std::string type = string_field(*format, "type", "text.format");
    if (type == "json_object") {
      out["response_format"] = {{"type", "json_object"}};
    } else if (type == "json_schema") {
      const json* schema = field(*format, "schema");
      if (schema == nullptr) bad_at("text.format.schema", "field required");
      json spec = {{"name", string_field(*format, "name", "text.format", false)},
                   {"schema", *schema}};
      if (const json* strict = field(*format, "strict")) spec["strict"] = *strict;
      out["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
    } else if (type != "text") {
      bad_at("text.format.type",
             fmt::format("'{}' is not one of text, json_object, json_schema", type));
    }
  }
  // How wordy OpenAI's GPT-5 models are asked to be: a knob of theirs with nothing to turn here.
  const std::string verbosity = string_field(text, "verbosity", "text", false);
  if (!verbosity.empty() && verbosity != "low" && verbosity != "medium" && verbosity != "high")
    bad_at("text.verbosity", fmt::format("'{}' is not low, medium or high", verbosity));
}

// Checks the fields that ask for what a server without state or logprobs cannot give, and the
// shapes of those accepted without effect.
void check_unsupported(const json& body) {
  if (const json* v = field(body, "previous_response_id"); v && *v != "")
    bad_at("previous_response_id",
           "this server keeps no responses: send the whole conversation in 'input'");
  if (field(body, "conversation") != nullptr)
    bad_at("conversation", "this server keeps no conversations: send the whole one in 'input'");
  if (field(body, "prompt") != nullptr)
    bad_at("prompt", "stored prompt templates are not supported: send 'instructions' and 'input'");
  if (const json* v = field(body, "background"); v && *v != false)
    bad_at("background", "responses are answered in the foreground only");
  if (const json* v = field(body, "top_logprobs"); v && *v != 0)
    bad_at("top_logprobs", "logprobs are not supported on /v1/responses");
  if (const json* include = field(body, "include")) {
    if (!include->is_array()) bad_at("include", "must be a list of strings");
    for (const json& what : *include) {
      if (!what.is_string()) bad_at("include", "must be a list of strings");
      if (what == "message.output_text.logprobs")
        bad_at("include", "logprobs are not supported on /v1/responses");
      // The rest name outputs of built-in tools (refused with the tools) or OpenAI's encrypted
      // reasoning, which local thoughts do not have: there is nothing to add.
    }
  }
  // An overflowing prompt is refused with the context error either way; "auto" would have
  // dropped the oldest items instead, so the answer never differs silently.
  if (const json* v = field(body, "truncation"); v && *v != "auto" && *v != "disabled")
    bad_at("truncation", "must be auto or disabled");
  // Nothing is kept whatever store says, and metadata is for OpenAI's dashboard. (max_tool_calls
  // limits calls of built-in tools, which are refused: it has nothing to limit.)
  if (const json* v = field(body, "store"); v && !v->is_boolean())
    bad_at("store", "must be a boolean");
  object_field(body, "metadata", "metadata");
  object_field(body, "stream_options", "stream_options");  // include_obfuscation: no effect
  // Thinking follows the server's --reasoning and --reasoning-format: a request cannot turn it
  // on or off, nor set its effort (as with Anthropic's thinking field).
  object_field(body, "reasoning", "reasoning");
}

// ApiErrors of parse_completion name chat's fields; the client sent Responses' ones.
ApiError in_responses_terms(const ApiError& e) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"max_tokens", "max_output_tokens"}, {"response_format", "text.format"}};
  const auto renamed = [](std::string text) {
    for (const auto& [chat, responses] : kNames) {
      for (size_t at = text.find(chat); at != std::string::npos;
           at = text.find(chat, at + responses.size()))
        text.replace(at, chat.size(), responses);
    }
    return text;
  };
  // A message's place in chat's list is not an item's in input (instructions come first, a
  // turn's items are merged), so errors about messages name input as a whole.
  std::string param = e.param.starts_with("messages") ? "input" : renamed(e.param);
  ApiError out(e.status, renamed(e.what()), std::move(param), e.type, e.code);
  out.details = e.details;
  return out;
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

// An output item's id: its kind's prefix, the response's number and the item's place, so ids
// are unique within and across responses and the same in a stream and a whole answer.
std::string item_id(const char* prefix, const std::string& response_id, size_t index) {
  const size_t cut = response_id.find('_');
  return fmt::format("{}_{}_{}", prefix, response_id.substr(cut == std::string::npos ? 0 : cut + 1),
                     index);
}

std::string status_of(const ChoiceOutput& c) {
  return c.finish_reason == "length" ? "incomplete" : "completed";
}

json text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json reasoning_item(const std::string& id, const std::string& text, const std::string& status) {
  json content = json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", json::array()},
          {"content", std::move(content)},
          {"status", status}};
}

json message_item(const std::string& id, const json& content, const std::string& status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", content}};
}

json call_item(const std::string& response_id, size_t index, const ToolCall& call,
               const std::string& arguments, const std::string& status) {
  return {{"type", "function_call"},
          {"id", item_id("fc", response_id, index)},
          {"call_id", item_id("call", response_id, index)},
          {"name", call.name},
          {"arguments", arguments},
          {"status", status}};
}

// cached_tokens are counted within input_tokens, as OpenAI counts them. Thoughts are not counted
// apart from the answer by the engine, so reasoning_tokens says 0.
json usage(const ChoiceOutput& c) {
  return {{"input_tokens", c.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", c.cached_tokens}}},
          {"output_tokens", c.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", c.prompt_tokens + c.completion_tokens}};
}

// The messages' text, as OpenAI's SDKs compute output_text.
std::string output_text(const json& output) {
  std::string text;
  for (const json& item : output) {
    if (item["type"] != "message") continue;
    for (const json& part : item["content"]) {
      if (part["type"] == "output_text") text += part["text"].get<std::string>();
    }
  }
  return text;
}

json response_object(const std::string& id, int64_t created_at, const CompletionRequest& request,
                     const std::string& status, const json& output, json counts) {
  return {{"id", id},
          {"object", "response"},
          {"created_at", created_at},
          {"status", status},
          {"error", nullptr},
          {"incomplete_details",
           status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
          {"model", request.model},
          {"output", output},
          {"output_text", output_text(output)},
          {"usage", std::move(counts)}};
}

// What of `full` has not been sent yet, when `sent` is how it began.
std::string unsent(const std::string& full, const std::string& sent) {
  return full.starts_with(sent) ? full.substr(sent.size()) : std::string();
}

}  // namespace

json responses_to_openai(const json& body) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  check_unsupported(body);
  json out = json::object();
  if (const json* model = field(body, "model")) out["model"] = *model;
  json messages = json::array();
  if (const json* instructions = field(body, "instructions")) {
    if (!instructions->is_string()) bad_at("instructions", "must be a string");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const json* input = field(body, "input");
  if (input == nullptr) bad_at("input", "field required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    if (input->empty()) bad_at("input", "must hold at least one item");
    for (size_t i = 0; i < input->size(); ++i)
      translate_item((*input)[i], fmt::format("input[{}]", i), messages);
  } else {
    bad_at("input", "must be a string or a list of items");
  }
  out["messages"] = std::move(messages);
  if (const json* tools = field(body, "tools")) out["tools"] = translate_tools(*tools);
  if (const json* choice = field(body, "tool_choice"))
    out["tool_choice"] = translate_tool_choice(*choice);
  if (const json* max = field(body, "max_output_tokens")) out["max_tokens"] = *max;
  if (const json* text = field(body, "text")) translate_text(*text, out);
  // The fields both APIs share, and llama-server's own that it takes here too (it hands the
  // chat path the whole body); the chat path checks their values. Other chat fields (n,
  // logprobs, ...) are not passed: a response could not show what they ask for.
  for (const char* name : {"temperature",
                           "top_p",
                           "stream",
                           "parallel_tool_calls",
                           "top_k",
                           "min_p",
                           "presence_penalty",
                           "frequency_penalty",
                           "repetition_penalty",
                           "seed",
                           "logit_bias",
                           "stop",
                           "ignore_eos",
                           "return_progress",
                           "timings_per_token",
                           "cache_salt",
                           "speculative.n_max",
                           "json_schema",
                           "grammar",
                           "lora"}) {
    if (const json* v = field(body, name)) out[name] = *v;
  }
  return out;
}

CompletionRequest parse_responses(const json& body, const ParseContext& ctx) {
  const json chat = responses_to_openai(body);
  try {
    return parse_completion(chat, true, ctx);
  } catch (const ApiError& e) {
    throw in_responses_terms(e);
  }
}

json responses_input_tokens(const json& body, const ParseContext& ctx) {
  const json chat = responses_to_openai(body);
  check_model(chat, ctx);
  std::string prompt;
  try {
    prompt = render_chat_prompt(chat, ctx);
  } catch (const ApiError& e) {
    throw in_responses_terms(e);
  }
  // Tokenized as parse_completion tokenizes a chat prompt, so the count is what a
  // /v1/responses request with this body would be charged.
  return {{"object", "response.input_tokens"},
          {"input_tokens", ctx.tokenizer->encode(prompt, true, true).size()}};
}

json responses_response(const CompletionRequest& request, const ChoiceOutput& c,
                        const std::string& id, int64_t created_at) {
  const Answer answer = answer_of(request, c);
  const std::string status = status_of(c);
  json output = json::array();
  if (!c.reasoning.empty())
    output.push_back(reasoning_item(item_id("rs", id, output.size()), c.reasoning, "completed"));
  // An answer with nothing to show still gets its (empty) message: clients read output[0].
  if (!answer.text.empty() || answer.calls.empty()) {
    output.push_back(message_item(item_id("msg", id, output.size()),
                                  json::array({text_part(answer.text)}), status));
  }
  for (const ToolCall& call : answer.calls)
    output.push_back(call_item(id, output.size(), call, call.arguments, "completed"));
  return response_object(id, created_at, request, status, output, usage(c));
}

std::string responses_sse(const json& event) {
  return fmt::format("event: {}\ndata: {}\n\n", event.value("type", "message"),
                     event.dump(-1, ' ', false, json::error_handler_t::replace));
}

ResponsesStreamWriter::ResponsesStreamWriter(const CompletionRequest& request, std::string id,
                                             int64_t created_at)
    : request_(request), id_(std::move(id)), created_at_(created_at) {}

json ResponsesStreamWriter::event(const char* type) {
  return {{"type", type}, {"sequence_number", sequence_++}};
}

json ResponsesStreamWriter::snapshot(const std::string& status) const {
  return response_object(id_, created_at_, request_, status, output_, nullptr);
}

std::vector<json> ResponsesStreamWriter::start() {
  std::vector<json> out;
  out.push_back(event("response.created"));
  out.back()["response"] = snapshot("in_progress");
  out.push_back(in_progress());
  return out;
}

json ResponsesStreamWriter::in_progress() {
  json e = event("response.in_progress");
  e["response"] = snapshot("in_progress");
  return e;
}

void ResponsesStreamWriter::open(Item kind, std::vector<json>& out) {
  if (open_ == kind) return;
  close("completed", out);
  const size_t index = output_.size();
  open_ = kind;
  open_text_.clear();
  json added = event("response.output_item.added");
  added["output_index"] = index;
  if (kind == Item::kReasoning) {
    open_id_ = item_id("rs", id_, index);
    added["item"] = reasoning_item(open_id_, "", "in_progress");
    out.push_back(std::move(added));
    return;
  }
  open_id_ = item_id("msg", id_, index);
  wrote_message_ = true;
  added["item"] = message_item(open_id_, json::array(), "in_progress");
  out.push_back(std::move(added));
  json part = event("response.content_part.added");
  part["item_id"] = open_id_;
  part["output_index"] = index;
  part["content_index"] = 0;
  part["part"] = text_part("");
  out.push_back(std::move(part));
}

void ResponsesStreamWriter::close(const std::string& status, std::vector<json>& out) {
  if (open_ == Item::kNone) return;
  const size_t index = output_.size();
  json item;
  if (open_ == Item::kReasoning) {
    json done = event("response.reasoning_text.done");
    done["item_id"] = open_id_;
    done["output_index"] = index;
    done["content_index"] = 0;
    done["text"] = open_text_;
    out.push_back(std::move(done));
    item = reasoning_item(open_id_, open_text_, "completed");
  } else {
    json text_done = event("response.output_text.done");
    text_done["item_id"] = open_id_;
    text_done["output_index"] = index;
    text_done["content_index"] = 0;
    text_done["text"] = open_text_;
    text_done["logprobs"] = json::array();
    out.push_back(std::move(text_done));
    json part_done = event("response.content_part.done");
    part_done["item_id"] = open_id_;
    part_done["output_index"] = index;
    part_done["content_index"] = 0;
    part_done["part"] = text_part(open_text_);
    out.push_back(std::move(part_done));
    item = message_item(open_id_, json::array({text_part(open_text_)}), status);
  }
  json done = event("response.output_item.done");
  done["output_index"] = index;
  done["item"] = item;
  out.push_back(std::move(done));
  output_.push_back(std::move(item));
  open_ = Item::kNone;
}

void ResponsesStreamWriter::write_reasoning(const std::string& text, std::vector<json>& out) {
  if (text.empty()) return;
  open(Item::kReasoning, out);
  json e = event("response.reasoning_text.delta");
  e["item_id"] = open_id_;
  e["output_index"] = output_.size();
  e["content_index"] = 0;
  e["delta"] = text;
  out.push_back(std::move(e));
  open_text_ += text;
  reasoning_sent_ += text;
}

void ResponsesStreamWriter::write_text(const std::string& text, std::vector<json>& out) {
  if (text.empty()) return;
  open(Item::kMessage, out);
  json e = event("response.output_text.delta");
  e["item_id"] = open_id_;
  e["output_index"] = output_.size();
  e["content_index"] = 0;
  e["delta"] = text;
  e["logprobs"] = json::array();
  out.push_back(std::move(e));
  open_text_ += text;
  text_sent_ += text;
}

std::vector<json> ResponsesStreamWriter::delta(const std::string& reasoning,
                                               const std::string& content) {
  std::vector<json> out;
  write_reasoning(reasoning, out);
  if (!request_.tools.active()) write_text(content, out);
  return out;
}

std::vector<json> ResponsesStreamWriter::finish(const ChoiceOutput& c) {
  std::vector<json> out;
  const Answer answer = answer_of(request_, c);
  // With tools all of the text is still to go; without, normally none of it.
  write_reasoning(unsent(c.reasoning, reasoning_sent_), out);
  write_text(unsent(answer.text, text_sent_), out);
  const std::string status = status_of(c);
  if (!wrote_message_ && answer.calls.empty()) open(Item::kMessage, out);  // as a whole answer
  close(status, out);
  for (const ToolCall& call : answer.calls) {
    const size_t index = output_.size();
    const json item = call_item(id_, index, call, call.arguments, "completed");
    json added = event("response.output_item.added");
    added["output_index"] = index;
    added["item"] = call_item(id_, index, call, "", "in_progress");
    out.push_back(std::move(added));
    json arguments = event("response.function_call_arguments.delta");
    arguments["item_id"] = item["id"];
    arguments["output_index"] = index;
    arguments["delta"] = call.arguments;
    out.push_back(std::move(arguments));
    json arguments_done = event("response.function_call_arguments.done");
    arguments_done["item_id"] = item["id"];
    arguments_done["output_index"] = index;
    arguments_done["name"] = call.name;
    arguments_done["arguments"] = call.arguments;
    out.push_back(std::move(arguments_done));
    json done = event("response.output_item.done");
    done["output_index"] = index;
    done["item"] = item;
    out.push_back(std::move(done));
    output_.push_back(item);
  }
  json completed = event("response.completed");
  completed["response"] = response_object(id_, created_at_, request_, status, output_, usage(c));
  out.push_back(std::move(completed));
  return out;
}

std::vector<json> ResponsesStreamWriter::failed(const ApiError& e) {
  std::vector<json> out;
  json error = event("error");
  error["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  error["message"] = e.what();
  error["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  out.push_back(std::move(error));
  json response = snapshot("failed");
  response["error"] = {{"code", e.code.empty() ? "server_error" : e.code}, {"message", e.what()}};
  json end = event("response.failed");
  end["response"] = std::move(response);
  out.push_back(std::move(end));
  return out;
}

}  // namespace inferd::server
