#include "server/chat/harmony.h"

#include <algorithm>
#include <array>
#include <optional>

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kFunctions = "functions.";
constexpr std::string_view kSpace = " \t\r\n";

// What ends a message's body: its own end markers, and the start of another message written
// without them (a model that skips <|end|> must not have its next header read as text).
constexpr std::array<std::string_view, 5> kBodyEnds = {kEnd, kCall, kReturn, kStart, kChannel};

// A header longer than this without <|message|> is not a header (real ones are under 100
// bytes): its text is shown rather than held back to the end.
constexpr size_t kMaxHeader = 512;

std::string_view trim(std::string_view s) {
  const size_t start = s.find_first_not_of(kSpace);
  if (start == std::string_view::npos) return {};
  return s.substr(start, s.find_last_not_of(kSpace) - start + 1);
}

// Whether `text` and `prefix` agree on their common length (`text` may still become it).
bool agrees(std::string_view text, std::string_view prefix) {
  const size_t n = std::min(text.size(), prefix.size());
  return text.substr(0, n) == prefix.substr(0, n);
}

// A name in a header: up to whitespace or the next marker.
std::string_view word_at(std::string_view header, size_t at) {
  const std::string_view rest = header.substr(std::min(at, header.size()));
  return rest.substr(0, rest.find_first_of(" \t\r\n<"));
}

struct BodyEnd {
  size_t at = std::string_view::npos;  // where the body ends
  std::string_view marker;             // what ends it ("" for the end of the text)
};

BodyEnd find_body_end(std::string_view text, size_t from) {
  BodyEnd best;
  for (const std::string_view marker : kBodyEnds) {
    const size_t at = text.find(marker, from);
    if (at < best.at) best = {at, marker};
  }
  return best;
}

// The length of the longest suffix of `text` that may become one of kBodyEnds.
size_t partial_body_end(std::string_view text) {
  size_t keep = 0;
  for (const std::string_view marker : kBodyEnds) {
    for (size_t n = std::min(text.size(), marker.size() - 1); n > keep; --n) {
      if (text.substr(text.size() - n) == marker.substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

// After a body: a start or channel marker opens the next header, so it is left in the text.
size_t after_body_end(const BodyEnd& end) {
  if (end.marker == kStart || end.marker == kChannel) return end.at;
  return end.at + end.marker.size();
}

// A call's arguments: the body as a JSON object.
std::optional<ToolCall> call_of(const HarmonyHeader& header, std::string_view body) {
  if (!header.recipient.starts_with(kFunctions)) return std::nullopt;
  std::string name = header.recipient.substr(kFunctions.size());
  if (name.empty()) return std::nullopt;
  const json args = json::parse(trim(body), nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded() || !args.is_object()) return std::nullopt;
  return ToolCall{std::move(name), args.dump()};
}

// Where the message whose <|message|> is at `message` begins, within [from, message): at its
// <|start|>, else at the first marker or recipient of its header (text before that is text
// outside any message), else at `from`.
size_t message_begin(std::string_view text, size_t from, size_t message) {
  const std::string_view region = text.substr(from, message - from);
  if (const size_t start = region.rfind(kStart); start != std::string_view::npos)
    return from + start;
  const size_t channel = region.find(kChannel), to = region.find(" to=");
  const size_t first = std::min(channel, to);
  return first == std::string_view::npos ? from : from + first;
}

}  // namespace

bool is_harmony_template(std::string_view source) {
  if (source.find(kChannel) != std::string_view::npos) return true;
  // Frames alone are not enough: Muse Glimmer's template writes <|start|> and <|message|> too,
  // but ends turns with its own markers.
  return source.find(kStart) != std::string_view::npos &&
         source.find(kMessage) != std::string_view::npos &&
         source.find(kReturn) != std::string_view::npos;
}

HarmonyHeader parse_harmony_header(std::string_view header) {
  HarmonyHeader out;
  if (const size_t channel = header.rfind(kChannel); channel != std::string_view::npos)
    out.channel = word_at(header, channel + kChannel.size());
  // gpt-oss sometimes opens with a stray "<|channel|>commentary to=assistant" before the real
  // channel: a message to the assistant is one to nobody in particular.
  for (size_t at = header.find("to="); at != std::string_view::npos;
       at = header.find("to=", at + 3)) {
    const std::string_view name = word_at(header, at + 3);
    if (!name.empty() && name != "assistant") out.recipient = name;
  }
  return out;
}

HarmonySplitter::HarmonySplitter(bool keep_calls) : keep_calls_(keep_calls) {}

void HarmonySplitter::prime(std::string_view prompt) {
  const size_t start = prompt.rfind(kStart);
  if (start == std::string_view::npos) return;
  const std::string_view tail = prompt.substr(start + kStart.size());
  // A tail without <|message|> ("assistant") is a header the model completes: the output is
  // read from its start as usual.
  if (tail.find(kMessage) == std::string_view::npos) return;
  at_start_ = false;
  Pieces ignored;
  consume(tail, ignored);
}

HarmonySplitter::Pieces HarmonySplitter::push(std::string_view text) {
  Pieces out;
  consume(text, out);
  return out;
}

void HarmonySplitter::consume(std::string_view text, Pieces& out) {
  const std::string buffer = std::move(held_) + std::string(text);
  held_.clear();
  std::string_view rest = buffer;
  while (!rest.empty()) {
    if (state_ == State::kPlain) {
      out.content += rest;
      break;
    }
    const bool more = state_ == State::kHeader ? step_header(rest, out) : step_body(rest, out);
    if (!more) break;
  }
}

bool HarmonySplitter::step_header(std::string_view& rest, Pieces& out) {
  if (at_start_) {
    // The prompt ends with "<|start|>assistant": harmony output goes on with a marker or a
    // recipient. Anything else is a model answering in plain text.
    if (!agrees(rest, "<|") && !agrees(rest, " to=")) {
      state_ = State::kPlain;
      at_start_ = false;
      return true;
    }
    if (rest.size() < 4) {
      held_ = std::string(rest);
      return false;
    }
    at_start_ = false;
  }
  const size_t message = rest.find(kMessage);
  std::string_view header = rest.substr(0, message);
  // Text between messages (a new line after <|end|>) and the role are not the header's.
  if (const size_t start = header.rfind(kStart); start != std::string_view::npos) {
    rest.remove_prefix(start + kStart.size());
    return true;
  }
  if (message == std::string_view::npos) {
    if (rest.size() > kMaxHeader) {
      state_ = State::kPlain;
      return true;
    }
    held_ = std::string(rest);
    return false;
  }
  header_ = std::string(header);
  rest.remove_prefix(message + kMessage.size());
  open_message(out);
  return true;
}

void HarmonySplitter::open_message(Pieces& out) {
  const HarmonyHeader h = parse_harmony_header(header_);
  if (h.recipient.starts_with(kFunctions)) {
    route_ = Route::kCall;
    if (keep_calls_) out.content += std::string(kStart) + header_ + std::string(kMessage);
  } else if (!h.recipient.empty()) {
    route_ = Route::kDrop;
  } else {
    route_ = h.channel == "analysis" ? Route::kReasoning : Route::kContent;
  }
  state_ = State::kBody;
}

bool HarmonySplitter::step_body(std::string_view& rest, Pieces& out) {
  const BodyEnd end = find_body_end(rest, 0);
  if (end.at == std::string_view::npos) {
    const size_t keep = partial_body_end(rest);
    emit(rest.substr(0, rest.size() - keep), out);
    held_ = std::string(rest.substr(rest.size() - keep));
    return false;
  }
  emit(rest.substr(0, end.at), out);
  if (route_ == Route::kCall && keep_calls_) out.content += kCall;
  rest.remove_prefix(after_body_end(end));
  state_ = State::kHeader;
  return true;
}

void HarmonySplitter::emit(std::string_view body, Pieces& out) const {
  switch (route_) {
    case Route::kReasoning:
      out.reasoning += body;
      break;
    case Route::kContent:
      out.content += body;
      break;
    case Route::kCall:
      if (keep_calls_) out.content += body;
      break;
    case Route::kDrop:
      break;
  }
}

HarmonySplitter::Pieces HarmonySplitter::flush() {
  Pieces out;
  if (state_ == State::kBody) {
    emit(held_, out);  // the end of the output ends the message (<|return|>, <|call|>)
    if (route_ == Route::kCall && keep_calls_) out.content += kCall;
  } else if (state_ == State::kHeader && held_.find("<|") == std::string::npos &&
             !trim(held_).empty()) {
    out.content = held_;
  }
  held_.clear();
  state_ = State::kHeader;
  return out;
}

ParsedAnswer parse_harmony_calls(std::string_view text) {
  ParsedAnswer out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t message = text.find(kMessage, pos);
    if (message == std::string_view::npos) break;
    const size_t begin = message_begin(text, pos, message);
    const size_t header_from =
        text.substr(begin).starts_with(kStart) ? begin + kStart.size() : begin;
    const size_t body = message + kMessage.size();
    const BodyEnd end = find_body_end(text, body);
    const size_t body_end = std::min(end.at, text.size());
    const size_t next = end.at == std::string_view::npos ? text.size() : after_body_end(end);
    content += text.substr(pos, begin - pos);
    const HarmonyHeader header =
        parse_harmony_header(text.substr(header_from, message - header_from));
    if (std::optional<ToolCall> call = call_of(header, text.substr(body, body_end - body))) {
      out.calls.push_back(std::move(*call));
    } else {
      content += text.substr(begin, next - begin);
    }
    pos = next;
  }
  if (pos < text.size()) content += text.substr(pos);
  out.content = std::string(trim(content));
  return out;
}

void prepare_harmony_history(json& messages) {
  for (json& m : messages) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    const auto reasoning = m.find("reasoning_content");
    if (reasoning == m.end() || !reasoning->is_string()) continue;
    m["thinking"] = *reasoning;
    const auto calls = m.find("tool_calls");
    if (calls != m.end() && calls->is_array() && !calls->empty()) m.erase("content");
  }
}

}  // namespace inferd::server
