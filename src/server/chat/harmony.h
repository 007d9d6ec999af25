// gpt-oss's chat format ("harmony"): an answer is a run of messages
//   [<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY<|end|>
// where the analysis channel holds the model's reasoning, final its answer, commentary either a
// preamble for the user or, addressed to=functions.NAME, a tool call whose body is the JSON
// arguments. <|return|> ends the answer and <|call|> a call; both end the generation, so the
// text the engine hands over stops before them. This module routes the channels of streamed
// text (reasoning_content, content) and finds the calls, as llama-server's gpt-oss parser does.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/chat/tool_calls.h"

namespace inferd::server {

// What a splitter makes of a piece of output: the model's reasoning and its answer.
struct SplitText {
  std::string reasoning, content;
};

// Whether a chat template writes harmony: gpt-oss's own template (channels), or the plain
// `--chat-template gpt-oss` (frames of <|start|>, <|message|> and <|return|>), whose generation
// prompt also leaves the model to write the channel.
bool is_harmony_template(std::string_view source);

// What a message's header (the text between <|start|> and <|message|>) says.
struct HarmonyHeader {
  std::string channel;    // the last <|channel|>'s name: "analysis", "commentary", "final"
  std::string recipient;  // "functions.get_weather", "browser.search"; "" for the user
};
HarmonyHeader parse_harmony_header(std::string_view header);

// Splits streamed harmony text: analysis bodies are reasoning, final bodies and commentary
// without a recipient content. A call to functions.NAME stays in the content in its framing
// (<|start|>HEADER<|message|>ARGS<|call|>) when `keep_calls`, for parse_harmony_calls once the
// answer is whole; otherwise it is dropped, as llama-server drops calls no tool asked for, and
// so are messages to other recipients (the built-in browser and python tools). Text that does
// not start like a message is a model not writing harmony: all content.
class HarmonySplitter {
 public:
  using Pieces = SplitText;

  explicit HarmonySplitter(bool keep_calls = true);
  // Reads the end of the prompt (after its last <|start|>) without output: a prompt that ends
  // inside a message (a continued final answer) makes the output start in that message's body.
  void prime(std::string_view prompt);
  Pieces push(std::string_view text);
  // The end of the output: a body cut off by the end is whole; an unfinished header is dropped,
  // unless it holds no marker at all (text outside any message is content).
  Pieces flush();

 private:
  enum class State { kHeader, kBody, kPlain };
  enum class Route { kReasoning, kContent, kCall, kDrop };
  void consume(std::string_view text, Pieces& out);
  // Each consumes from the front of `rest`; false when it needs more text.
  bool step_header(std::string_view& rest, Pieces& out);
  bool step_body(std::string_view& rest, Pieces& out);
  void open_message(Pieces& out);
  void emit(std::string_view body, Pieces& out) const;

  bool keep_calls_;
  State state_ = State::kHeader;
  Route route_ = Route::kContent;
  bool at_start_ = true;  // nothing of the output read yet: it may not be harmony at all
  std::string header_;    // kHeader: the header so far
  std::string held_;      // kBody: a possible marker cut between two pieces
};

// The calls to functions.NAME in harmony text (an answer as the splitter leaves its content, or
// the whole raw output): each becomes a call with its JSON body as arguments; the rest of the
// text stays content as it is (trimmed). A call whose body is not a JSON object stays in the
// content as the model wrote it.
ParsedAnswer parse_harmony_calls(std::string_view text);

// The history as gpt-oss's template reads it (llama-server's adjustment): an assistant turn's
// reasoning_content is its `thinking`, and a turn with tool calls and reasoning loses its
// content (the template refuses both and renders the reasoning as the call's analysis).
void prepare_harmony_history(nlohmann::ordered_json& messages);

}  // namespace inferd::server
