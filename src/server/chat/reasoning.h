// Reasoning split: thinking models (DeepSeek-R1 distills, Qwen3, QwQ) write their thoughts
// between <think> and </think> before the answer (Gemma 4 between "<|channel>thought" and
// "<channel|>"). The OpenAI-style API returns them apart:
// message.reasoning_content and message.content (delta.reasoning_content while streaming), as
// llama-server's --reasoning-format deepseek and vLLM's reasoning parsers do. gpt-oss writes
// them in channels instead (server/chat/harmony.h), which the same splitter routes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/chat/harmony.h"

namespace inferd::server {

enum class ReasoningFormat {
  kAuto,      // split when the chat template writes <think> (a thinking model)
  kDeepseek,  // always split chat answers
  kNone,      // leave the thoughts in content
};
// "auto", "deepseek", "none"; throws inferd::Error naming the choices otherwise.
ReasoningFormat parse_reasoning_format(std::string_view name);

// Splits streamed text into reasoning and content. Text before an opening <think> is content;
// a tag cut between two pieces is held back until it is whole. Only the first thinking block
// is split out (later tags are content, as the parsers of llama-server and vLLM treat them).
class ReasoningSplitter {
 public:
  // `in_reasoning`: the prompt already opened the block (templates that end the generation
  // prompt with "<think>\n"), so the output starts inside it.
  explicit ReasoningSplitter(bool in_reasoning = false);
  // Gemma 4's channel instead of <think> tags: "<|channel>thought" (then whitespace, dropped)
  // opens the thoughts, "<channel|>" closes them.
  static ReasoningSplitter gemma4();
  // gpt-oss's channels instead of tags (server/chat/harmony.h), after `prompt`; `keep_calls`: tool
  // calls stay in the content for the tool-call parser.
  static ReasoningSplitter harmony(std::string_view prompt, bool keep_calls);

  using Pieces = SplitText;
  Pieces push(std::string_view text);
  // What is held back at the end of the output (an unfinished tag is text after all).
  Pieces flush();

 private:
  enum class State { kBefore, kInside, kAfter };
  State state_;
  std::string_view open_ = "<think>", close_ = "</think>";
  bool trim_reasoning_start_ = false;  // whitespace after the opening tag is not thought
  std::string held_;                   // text that may be the start of the tag the state waits for
  bool leading_ = true;  // at the start of the answer: whitespace after </think> is dropped
  std::optional<HarmonySplitter> harmony_;  // set: it splits instead
};

}  // namespace inferd::server
