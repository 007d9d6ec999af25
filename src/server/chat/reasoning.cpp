#include "server/chat/reasoning.h"

#include "util/error.h"

namespace inferd::server {
namespace {

// The length of the longest suffix of `text` that is a proper prefix of `tag`: text that may
// become the tag once more arrives.
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningFormat parse_reasoning_format(std::string_view name) {
  if (name == "auto") return ReasoningFormat::kAuto;
  if (name == "deepseek") return ReasoningFormat::kDeepseek;
  if (name == "none") return ReasoningFormat::kNone;
  fail("reasoning format '{}' is not one of auto, deepseek, none", name);
}

ReasoningSplitter::ReasoningSplitter(bool in_reasoning)
    : state_(in_reasoning ? State::kInside : State::kBefore) {}

ReasoningSplitter ReasoningSplitter::gemma4() {
  ReasoningSplitter out;
  out.open_ = "<|channel>thought";
  out.close_ = "<channel|>";
  out.trim_reasoning_start_ = true;
  return out;
}

ReasoningSplitter ReasoningSplitter::harmony(std::string_view prompt, bool keep_calls) {
  ReasoningSplitter out;
  out.harmony_.emplace(keep_calls);
  out.harmony_->prime(prompt);
  return out;
}

ReasoningSplitter::Pieces ReasoningSplitter::push(std::string_view text) {
  if (harmony_) return harmony_->push(text);
  Pieces out;
  std::string buffer = held_ + std::string(text);
  held_.clear();
  std::string_view rest = buffer;
  while (!rest.empty()) {
    if (state_ == State::kAfter) {
      if (leading_) {  // the answer starts after the blank lines that follow </think>
        const size_t start = rest.find_first_not_of(" \t\r\n");
        if (start == std::string_view::npos) break;
        rest.remove_prefix(start);
        leading_ = false;
      }
      out.content += rest;
      break;
    }
    // Before the block, only leading whitespace may precede <think>; any other text means the
    // model answered without thinking.
    const std::string_view tag = state_ == State::kBefore ? open_ : close_;
    if (state_ == State::kBefore) {
      const size_t start = rest.find_first_not_of(" \t\r\n");
      if (start == std::string_view::npos) {
        held_ = std::string(rest);
        break;
      }
      const std::string_view body = rest.substr(start);
      if (body.substr(0, std::min(body.size(), open_.size())) !=
          open_.substr(0, std::min(body.size(), open_.size()))) {
        state_ = State::kAfter;
        leading_ = false;
        continue;  // all of it is content
      }
      if (body.size() < open_.size()) {
        held_ = std::string(rest);
        break;
      }
      rest = body.substr(open_.size());
      state_ = State::kInside;
      continue;
    }
    if (trim_reasoning_start_) {  // the whitespace after the opening tag
      const size_t start = rest.find_first_not_of(" \t\r\n");
      if (start == std::string_view::npos) break;
      rest.remove_prefix(start);
      trim_reasoning_start_ = false;
    }
    const size_t at = rest.find(tag);
    if (at != std::string_view::npos) {
      out.reasoning += rest.substr(0, at);
      rest.remove_prefix(at + tag.size());
      state_ = State::kAfter;
      continue;
    }
    const size_t keep = partial_tag(rest, tag);
    out.reasoning += rest.substr(0, rest.size() - keep);
    held_ = std::string(rest.substr(rest.size() - keep));
    break;
  }
  return out;
}

ReasoningSplitter::Pieces ReasoningSplitter::flush() {
  if (harmony_) return harmony_->flush();
  Pieces out;
  if (state_ == State::kInside) {
    out.reasoning = std::move(held_);
  } else if (state_ == State::kBefore) {
    out.content = std::move(held_);  // whitespace or an unfinished "<thi": the answer itself
  }
  held_.clear();
  return out;
}

}  // namespace inferd::server
