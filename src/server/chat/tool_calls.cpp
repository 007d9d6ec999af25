#include "server/chat/tool_calls.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "server/chat/harmony.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \t\r\n";

std::string_view trim(std::string_view s) {
  const size_t start = s.find_first_not_of(kSpace);
  if (start == std::string_view::npos) return {};
  return s.substr(start, s.find_last_not_of(kSpace) - start + 1);
}

// Where the JSON object or array starting at s[start] ends (one past its closing bracket), by
// bracket depth outside strings; npos when it does not close.
size_t json_end(std::string_view s, size_t start) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<json> parse(std::string_view text) {
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

// {"name": "f", "arguments" | "parameters": {...} or a JSON text of an object}.
std::optional<ToolCall> call_from(const json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ToolCall call{name->get<std::string>(), "{}"};
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  if (args == v.end()) return call;
  if (args->is_object()) {
    call.arguments = args->dump();
  } else if (args->is_string()) {
    const std::optional<json> inner = parse(args->get<std::string>());
    if (!inner || !inner->is_object()) return std::nullopt;
    call.arguments = inner->dump();
  } else {
    return std::nullopt;
  }
  return call;
}

// A list of calls, or one call, as JSON text.
std::optional<std::vector<ToolCall>> calls_from(std::string_view text) {
  const std::optional<json> v = parse(trim(text));
  if (!v) return std::nullopt;
  std::vector<ToolCall> calls;
  const json list = v->is_array() ? *v : json::array({*v});
  for (const json& item : list) {
    std::optional<ToolCall> call = call_from(item);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

void append_content(std::string& content, std::string_view piece) {
  piece = trim(piece);
  if (piece.empty()) return;
  if (!content.empty()) content += '\n';
  content += piece;
}

// Calls between an opening and a closing tag, anywhere in the answer, the text around them
// content. The closing tag is looked for from close_from(text, body) on (past the call's own
// text, whose strings may hold it: a model can write it into an argument, and the grammar lets
// it); read(body) gives the calls of one body, nullopt to leave it as the model wrote it.
template <typename CloseFrom, typename Read>
ParsedAnswer parse_tagged(std::string_view text, std::string_view open_tag,
                          std::string_view close_tag, CloseFrom close_from, Read read) {
  ParsedAnswer out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(open_tag, at);
    if (open == std::string_view::npos) break;
    append_content(out.content, text.substr(at, open - at));
    const size_t body = open + open_tag.size();
    const size_t from = close_from(text, body);
    const size_t close = text.find(close_tag, from == std::string_view::npos ? body : from);
    const size_t end = close == std::string_view::npos ? text.size() : close;
    if (std::optional<std::vector<ToolCall>> calls = read(text.substr(body, end - body))) {
      out.calls.insert(out.calls.end(), calls->begin(), calls->end());
    } else {
      append_content(
          out.content,
          text.substr(open, end + (close == std::string_view::npos ? 0 : close_tag.size()) - open));
    }
    at = close == std::string_view::npos ? text.size() : close + close_tag.size();
  }
  if (at < text.size()) append_content(out.content, text.substr(at));
  return out;
}

ParsedAnswer parse_hermes(std::string_view text) {
  const auto after_json = [](std::string_view t, size_t body) {
    const size_t first = t.find_first_not_of(kSpace, body);
    return first != std::string_view::npos && (t[first] == '{' || t[first] == '[')
               ? json_end(t, first)
               : std::string_view::npos;
  };
  return parse_tagged(text, "<tool_call>", "</tool_call>", after_json, calls_from);
}

ParsedAnswer parse_llama3(std::string_view text) {
  std::string_view body = trim(text);
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  if (body.starts_with(kPythonTag)) body = trim(body.substr(kPythonTag.size()));
  // One or more call objects, separated by ';' or whitespace.
  std::vector<ToolCall> calls;
  size_t at = 0;
  while (at < body.size()) {
    if (body[at] != '{') break;
    const size_t end = json_end(body, at);
    if (end == std::string_view::npos) break;
    std::optional<json> v = parse(body.substr(at, end - at));
    std::optional<ToolCall> call = v ? call_from(*v) : std::nullopt;
    if (!call) break;
    calls.push_back(std::move(*call));
    at = end;
    while (at < body.size() && (body[at] == ';' || kSpace.find(body[at]) != std::string_view::npos))
      ++at;
  }
  if (calls.empty() || at < body.size()) return {std::string(trim(text)), {}};
  return {{}, std::move(calls)};
}

ParsedAnswer parse_mistral(std::string_view text) {
  constexpr std::string_view kMarker = "[TOOL_CALLS]", kArgs = "[ARGS]";
  const size_t marker = text.find(kMarker);
  if (marker == std::string_view::npos) return {std::string(trim(text)), {}};
  ParsedAnswer out;
  append_content(out.content, text.substr(0, marker));
  std::string_view rest = trim(text.substr(marker + kMarker.size()));
  if (rest.starts_with("[") || rest.starts_with("{")) {  // v3: a JSON list of calls
    const size_t end = json_end(rest, 0);
    std::optional<std::vector<ToolCall>> calls =
        end == std::string_view::npos ? std::nullopt : calls_from(rest.substr(0, end));
    if (!calls) return {std::string(trim(text)), {}};
    out.calls = std::move(*calls);
    append_content(out.content, rest.substr(end));
    return out;
  }
  // v11: [TOOL_CALLS]name[ARGS]{...}, repeated.
  while (!rest.empty()) {
    const size_t args = rest.find(kArgs);
    if (args == std::string_view::npos) return {std::string(trim(text)), {}};
    const std::string name(trim(rest.substr(0, args)));
    std::string_view after = trim(rest.substr(args + kArgs.size()));
    const size_t end = after.starts_with("{") ? json_end(after, 0) : std::string_view::npos;
    std::optional<json> v =
        end == std::string_view::npos ? std::nullopt : parse(after.substr(0, end));
    if (name.empty() || !v || !v->is_object()) return {std::string(trim(text)), {}};
    out.calls.push_back({name, v->dump()});
    rest = trim(after.substr(end));
    if (rest.starts_with(kMarker)) rest = trim(rest.substr(kMarker.size()));
  }
  return out;
}

ParsedAnswer parse_generic(std::string_view text) {
  std::string_view body = trim(text);
  // A fenced block (```json ... ```) is what many models wrap JSON in.
  if (body.starts_with("```")) {
    const size_t first_line = body.find('\n');
    const size_t fence = body.rfind("```");
    if (first_line != std::string_view::npos && fence > first_line)
      body = trim(body.substr(first_line + 1, fence - first_line - 1));
  }
  const std::optional<json> v = parse(body);
  if (!v || !v->is_object()) return {std::string(trim(text)), {}};
  ParsedAnswer out;
  if (const auto list = v->find("tool_calls"); list != v->end() && list->is_array()) {
    for (const json& item : *list) {
      std::optional<ToolCall> call = call_from(item);
      if (!call) return {std::string(trim(text)), {}};
      out.calls.push_back(std::move(*call));
    }
  } else if (const auto one = v->find("tool_call"); one != v->end()) {
    std::optional<ToolCall> call = call_from(*one);
    if (!call) return {std::string(trim(text)), {}};
    out.calls.push_back(std::move(*call));
  } else {
    return {std::string(trim(text)), {}};
  }
  if (const auto response = v->find("response"); response != v->end() && response->is_string())
    out.content = response->get<std::string>();
  return out;
}

// Gemma 4's values (gemma4_arguments_to_json): a recursive reader over `text` from `at`.
class Gemma4Reader {
 public:
  explicit Gemma4Reader(std::string_view text) : text_(text) {}
  // The value at the cursor, as JSON; nullopt on anything else.
  std::optional<json> value() {
    skip_space();
    if (at_ >= text_.size()) return std::nullopt;
    if (text_.substr(at_).starts_with(kQuote)) {
      const size_t end = text_.find(kQuote, at_ + kQuote.size());
      if (end == std::string_view::npos) return std::nullopt;
      json s = std::string(text_.substr(at_ + kQuote.size(), end - at_ - kQuote.size()));
      at_ = end + kQuote.size();
      return s;
    }
    const char c = text_[at_];
    if (c == '{') return object();
    if (c == '[') return array();
    for (const auto& [word, v] :
         {std::pair<std::string_view, json>{"true", true}, {"false", false}, {"null", nullptr}}) {
      if (text_.substr(at_).starts_with(word)) {
        at_ += word.size();
        return v;
      }
    }
    // A number: JSON's syntax, checked by the JSON parser.
    size_t end = at_;
    while (end < text_.size() &&
           std::string_view("+-.0123456789eE").find(text_[end]) != std::string_view::npos)
      ++end;
    if (end == at_) return std::nullopt;
    std::optional<json> number = parse(text_.substr(at_, end - at_));
    if (!number || !number->is_number()) return std::nullopt;
    at_ = end;
    return number;
  }
  // {key:value,...}: keys bare (up to ':') or between <|"|> marks.
  std::optional<json> object() {
    skip_space();
    if (!eat('{')) return std::nullopt;
    json out = json::object();
    skip_space();
    if (eat('}')) return out;
    while (true) {
      skip_space();
      std::string key;
      if (text_.substr(at_).starts_with(kQuote)) {
        std::optional<json> k = value();
        if (!k) return std::nullopt;
        key = k->get<std::string>();
      } else {
        const size_t colon = text_.find_first_of(":}", at_);
        if (colon == std::string_view::npos || text_[colon] != ':') return std::nullopt;
        key = std::string(trim(text_.substr(at_, colon - at_)));
        at_ = colon;
      }
      if (key.empty() || !eat(':')) return std::nullopt;
      std::optional<json> v = value();
      if (!v) return std::nullopt;
      out[key] = std::move(*v);
      skip_space();
      if (eat('}')) return out;
      if (!eat(',')) return std::nullopt;
    }
  }
  std::optional<json> array() {
    skip_space();
    if (!eat('[')) return std::nullopt;
    json out = json::array();
    skip_space();
    if (eat(']')) return out;
    while (true) {
      std::optional<json> v = value();
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      skip_space();
      if (eat(']')) return out;
      if (!eat(',')) return std::nullopt;
    }
  }
  bool done() {
    skip_space();
    return at_ == text_.size();
  }

 private:
  static constexpr std::string_view kQuote = "<|\"|>";
  void skip_space() {
    while (at_ < text_.size() && kSpace.find(text_[at_]) != std::string_view::npos) ++at_;
  }
  bool eat(char c) {
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::string_view text_;
  size_t at_ = 0;
};

// Where Gemma 4's {...} starting at s[start] ends (one past its closing brace), by brace and
// bracket depth outside its <|"|> strings; npos when it does not close.
size_t gemma4_object_end(std::string_view s, size_t start) {
  constexpr std::string_view kQuote = "<|\"|>";
  int depth = 0;
  for (size_t i = start; i < s.size(); ++i) {
    if (s.substr(i).starts_with(kQuote)) {
      const size_t end = s.find(kQuote, i + kQuote.size());
      if (end == std::string_view::npos) return std::string_view::npos;
      i = end + kQuote.size() - 1;
    } else if (s[i] == '{' || s[i] == '[') {
      ++depth;
    } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// <|tool_call>call:NAME{...}<tool_call|>, any number of them, anywhere in the answer.
ParsedAnswer parse_gemma4(std::string_view text) {
  const auto after_object = [](std::string_view t, size_t body) {
    const size_t brace = t.find('{', body);
    return brace == std::string_view::npos ? brace : gemma4_object_end(t, brace);
  };
  const auto read = [](std::string_view call) -> std::optional<std::vector<ToolCall>> {
    const size_t brace = call.find('{');
    if (brace == std::string_view::npos) return std::nullopt;
    const std::string name(trim(call.substr(0, brace)));
    std::optional<std::string> args = gemma4_arguments_to_json(call.substr(brace));
    if (name.empty() || !args) return std::nullopt;
    return std::vector<ToolCall>{{name, std::move(*args)}};
  };
  return parse_tagged(text, "<|tool_call>call:", "<tool_call|>", after_object, read);
}

}  // namespace

std::optional<std::string> gemma4_arguments_to_json(std::string_view text) {
  Gemma4Reader reader(text);
  std::optional<json> v = reader.object();
  if (!v || !reader.done()) return std::nullopt;
  return v->dump();
}

ToolCallFormat detect_tool_call_format(std::string_view source) {
  // gpt-oss: its channel markers are its own, and its tool section names no other format.
  if (is_harmony_template(source)) return ToolCallFormat::kHarmony;
  if (source.find("<|tool_call>call:") != std::string_view::npos) return ToolCallFormat::kGemma4;
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      source.find("ipython") != std::string_view::npos)
    return ToolCallFormat::kLlama3;
  return ToolCallFormat::kGeneric;
}

ParsedAnswer parse_tool_calls(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return parse_hermes(text);
    case ToolCallFormat::kLlama3:
      return parse_llama3(text);
    case ToolCallFormat::kMistral:
      return parse_mistral(text);
    case ToolCallFormat::kHarmony:
      return parse_harmony_calls(text);
    case ToolCallFormat::kGemma4:
      return parse_gemma4(text);
    case ToolCallFormat::kGeneric:
      return parse_generic(text);
  }
  return {std::string(text), {}};
}

}  // namespace inferd::server
