// The reasoning split: <think>...</think> to reasoning_content, the rest to content, whatever
// the pieces the text streams in (tags cut anywhere), and what a prompt that opened the block
// or an answer without thoughts gives; gpt-oss's harmony channels likewise (analysis to
// reasoning_content, final and preambles to content, tool calls kept for the tool parser or
// dropped).
#include <gtest/gtest.h>

#include "server/chat/reasoning.h"
#include "util/error.h"

namespace inferd::server {
namespace {

struct Split {
  std::string reasoning, content;
};

// Feeds `text` to `s` in pieces cut at `cuts` (ascending offsets), then flushes.
Split split_with(ReasoningSplitter s, const std::string& text, std::vector<size_t> cuts) {
  Split out;
  size_t from = 0;
  cuts.push_back(text.size());
  for (const size_t to : cuts) {
    const ReasoningSplitter::Pieces p = s.push(std::string_view(text).substr(from, to - from));
    out.reasoning += p.reasoning;
    out.content += p.content;
    from = to;
  }
  const ReasoningSplitter::Pieces tail = s.flush();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

Split split(const std::string& text, std::vector<size_t> cuts, bool open = false) {
  return split_with(ReasoningSplitter(open), text, std::move(cuts));
}

// The whole text, every single cut, and byte by byte.
std::vector<std::vector<size_t>> every_cut(const std::string& text) {
  std::vector<std::vector<size_t>> cut_sets = {{}};
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) {
    cut_sets.push_back({i});
    bytes.push_back(i);
  }
  cut_sets.push_back(bytes);
  return cut_sets;
}

TEST(ReasoningSplit, AnyCutGivesTheSameSplit) {
  const std::vector<std::tuple<std::string, bool, std::string, std::string>> cases = {
      {"<think>Plan: add.</think>\n\nThe sum is 4.", false, "Plan: add.", "The sum is 4."},
      {"\n<think>a < b</think>answer <think>x</think>", false, "a < b", "answer <think>x</think>"},
      {"No thoughts here.", false, "", "No thoughts here."},
      {"  <b>bold</b>", false, "", "  <b>bold</b>"},
      {"step one</think>\n42", true, "step one", "42"},
      {"<think>unfinished thought", false, "unfinished thought", ""},
      {"<thi", false, "", "<thi"},
      {"</think", true, "</think", ""},
      {"", false, "", ""},
  };
  for (const auto& [text, open, reasoning, content] : cases) {
    for (const auto& cuts : every_cut(text)) {
      const Split s = split(text, cuts, open);
      EXPECT_EQ(s.reasoning, reasoning) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
      EXPECT_EQ(s.content, content) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
    }
  }
}

// Gemma 4's thought channel: "<|channel>thought", whitespace, the thoughts, "<channel|>".
TEST(ReasoningSplit, Gemma4ChannelAnyCutGivesTheSameSplit) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"<|channel>thought\nPlan: add.<channel|>The sum is 4.", "Plan: add.", "The sum is 4."},
      {"<|channel>thought\n\n a < b <channel|>\n\n<|tool_call>call:f{}<tool_call|>", "a < b ",
       "<|tool_call>call:f{}<tool_call|>"},
      {"Straight to the answer.", "", "Straight to the answer."},
      {"<|channel>thought unfinished", "unfinished", ""},
      {"<think>not Gemma's</think>", "", "<think>not Gemma's</think>"},
  };
  for (const auto& [text, reasoning, content] : cases) {
    for (const auto& cuts : every_cut(text)) {
      const Split s = split_with(ReasoningSplitter::gemma4(), text, cuts);
      EXPECT_EQ(s.reasoning, reasoning) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
      EXPECT_EQ(s.content, content) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
    }
  }
}

// gpt-oss's generation prompt ends with the assistant's opening; the output writes the rest.
constexpr const char* kHarmonyPrompt =
    "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant";
constexpr const char* kCallHeader =
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>";

struct HarmonyCase {
  std::string text;
  bool keep_calls;
  std::string reasoning, content;
};

void expect_harmony_split(const std::string& prompt, const std::vector<HarmonyCase>& cases) {
  for (const HarmonyCase& c : cases) {
    for (const auto& cuts : every_cut(c.text)) {
      const Split s = split_with(ReasoningSplitter::harmony(prompt, c.keep_calls), c.text, cuts);
      const std::string where = c.text + " cut at " + std::to_string(cuts.empty() ? 0 : cuts[0]) +
                                (cuts.size() > 1 ? " (bytes)" : "");
      EXPECT_EQ(s.reasoning, c.reasoning) << where;
      EXPECT_EQ(s.content, c.content) << where;
    }
  }
}

TEST(ReasoningSplit, HarmonyChannelsAnyCutGivesTheSameSplit) {
  const std::string call = kCallHeader;
  expect_harmony_split(
      kHarmonyPrompt,
      {
          // Reasoning, then the answer.
          {"<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>"
           "final<|message|>It is sunny.",
           false, "User wants weather.", "It is sunny."},
          // No reasoning; an <|end|> after the answer; markup that is not a marker stays.
          {"<|channel|>final<|message|>a < b, <|x|> and <|end", false, "",
           "a < b, <|x|> and <|end"},
          {"<|channel|>final<|message|>Done.<|end|>", false, "", "Done."},
          // gpt-oss's stray commentary before the real channel.
          {"<|channel|>commentary to=assistant<|channel|>analysis<|message|>hmm<|end|><|start|>"
           "assistant<|channel|>final<|message|>ok",
           false, "hmm", "ok"},
          // A call: kept in its frame for the tool parser (with its <|call|>, which the engine does
          // not hand over), or dropped when the request has no tools.
          {"<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant" + call +
               "{\"location\":\"Paris\"}",
           true, "Need the tool.",
           "<|start|>assistant" + call + "{\"location\":\"Paris\"}<|call|>"},
          {"<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant" + call +
               "{\"location\":\"Paris\"}",
           false, "Need the tool.", ""},
          // A preamble for the user, then the call; the recipient in the role header.
          {"<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" + call + "{}", true,
           "", "Checking.<|start|>assistant" + call + "{}<|call|>"},
          {" to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}", true, "",
           "<|start|> to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}<|call|>"},
          // A built-in tool nobody declared is not a function call: dropped.
          {"<|channel|>analysis<|message|>search<|end|><|start|>assistant<|channel|>analysis "
           "to=browser.search code<|message|>{\"query\": \"x\"}",
           true, "search", ""},
          // The next message without <|end|>: the body stops at the new frame.
          {"<|channel|>analysis<|message|>think<|start|>assistant<|channel|>final<|message|>ok",
           false, "think", "ok"},
          // Cut off inside a header (max_tokens): nothing of it shows.
          {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan", false, "a", ""},
          // A model that does not write harmony at all: all content.
          {"Hello there.", false, "", "Hello there."},
          {" too short", false, "", " too short"},
          {"", false, "", ""},
      });
}

TEST(ReasoningSplit, HarmonyContinuesAMessageThePromptOpened) {
  // A continued final answer (the request's last message is the assistant's): the output goes
  // on inside the final channel.
  expect_harmony_split(std::string(kHarmonyPrompt) + "<|channel|>final<|message|>Bonj",
                       {{"our!", false, "", "our!"},
                        {"our!<|end|><|start|>assistant<|channel|>final<|message|> More.", false,
                         "", "our! More."}});
  // A prompt without any harmony: the output is read from its start.
  expect_harmony_split("plain prompt", {{"<|channel|>final<|message|>x", false, "", "x"}});
}

TEST(ReasoningSplit, FormatNames) {
  EXPECT_EQ(parse_reasoning_format("auto"), ReasoningFormat::kAuto);
  EXPECT_EQ(parse_reasoning_format("deepseek"), ReasoningFormat::kDeepseek);
  EXPECT_EQ(parse_reasoning_format("none"), ReasoningFormat::kNone);
  EXPECT_THROW(parse_reasoning_format("qwen"), Error);
}

}  // namespace
}  // namespace inferd::server
