// The reasoning split: <think>...</think> to reasoning_content, the rest to content, whatever
// the pieces the text streams in (tags cut anywhere), and what a prompt that opened the block
// or an answer without thoughts gives.
#include <gtest/gtest.h>

#include "server/reasoning.h"
#include "util/error.h"

namespace inferd::server {
namespace {

struct Split {
  std::string reasoning, content;
};

// Feeds `text` in pieces cut at `cuts` (ascending offsets), then flushes.
Split split(const std::string& text, std::vector<size_t> cuts, bool open = false) {
  ReasoningSplitter s(open);
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
    // Whole, every single cut, and byte by byte.
    std::vector<std::vector<size_t>> cut_sets = {{}};
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) {
      cut_sets.push_back({i});
      bytes.push_back(i);
    }
    cut_sets.push_back(bytes);
    for (const auto& cuts : cut_sets) {
      const Split s = split(text, cuts, open);
      EXPECT_EQ(s.reasoning, reasoning) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
      EXPECT_EQ(s.content, content) << text << " cut at " << (cuts.empty() ? 0 : cuts[0]);
    }
  }
}

TEST(ReasoningSplit, FormatNames) {
  EXPECT_EQ(parse_reasoning_format("auto"), ReasoningFormat::kAuto);
  EXPECT_EQ(parse_reasoning_format("deepseek"), ReasoningFormat::kDeepseek);
  EXPECT_EQ(parse_reasoning_format("none"), ReasoningFormat::kNone);
  EXPECT_THROW(parse_reasoning_format("qwen"), Error);
}

}  // namespace
}  // namespace inferd::server
