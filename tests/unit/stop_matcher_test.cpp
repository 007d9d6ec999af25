// StopMatcher: stop strings across pieces, held-back prefixes released when they turn out not
// to be stops, earliest match wins, UTF-8 text.
#include <gtest/gtest.h>

#include "engine/stop_matcher.h"

namespace inferd::engine {
namespace {

// Feeds pieces and returns (emitted text, stopped).
std::pair<std::string, bool> feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  return {out + m.finish(), false};
}

TEST(StopMatcher, NoStopsPassesEverythingAtOnce) {
  StopMatcher m({});
  auto r = m.push("hello");
  EXPECT_EQ(r.emit, "hello");
  EXPECT_FALSE(r.stopped);
}

TEST(StopMatcher, StopSpanningPiecesIsNeverEmitted) {
  StopMatcher m({"</end>"});
  auto [text, stopped] = feed(m, {"abc <", "/e", "nd> more"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "abc ");
}

TEST(StopMatcher, HeldPrefixIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"STOP"});
  auto r1 = m.push("go ST");
  EXPECT_EQ(r1.emit, "go ");  // "ST" could be the start of STOP
  auto r2 = m.push("ILL");
  EXPECT_EQ(r2.emit, "STILL");
  EXPECT_FALSE(r2.stopped);
}

TEST(StopMatcher, HeldTextComesOutAtFinish) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.push("end #").emit, "end ");
  EXPECT_EQ(m.finish(), "#");
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher m({"\n\n"});
  auto [text, stopped] = feed(m, {"\n", "\nrest"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "");
}

TEST(StopMatcher, EarliestOfTwoStopsWins) {
  StopMatcher m({"world", "lo w"});
  auto [text, stopped] = feed(m, {"hello world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hel");
}

TEST(StopMatcher, Utf8StopStrings) {
  StopMatcher m({"終わり"});
  auto [text, stopped] = feed(m, {"これで", "終", "わり", "です"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "これで");
  StopMatcher n({"éé"});
  auto [text2, stopped2] = feed(n, {"café", " ok"});
  EXPECT_FALSE(stopped2);
  EXPECT_EQ(text2, "café ok");
}

TEST(StopMatcher, NothingAfterAStop) {
  StopMatcher m({"x"});
  EXPECT_TRUE(m.push("axb").stopped);
  EXPECT_EQ(m.push("more").emit, "");
  EXPECT_EQ(m.finish(), "");
}

}  // namespace
}  // namespace inferd::engine

namespace inferd::engine {
namespace {

// llama-server's stopping_word: the stop string found, the earliest in the text when several
// are, even one that is listed after another which matches later.
TEST(StopMatcher, NamesTheStopStringFound) {
  StopMatcher m({"zzz", "b", "</s>"});
  const StopMatcher::Result first = m.push("a <");
  EXPECT_EQ(first.emit, "a ");  // "<" is held back: it may begin "</s>"
  EXPECT_TRUE(first.word.empty());
  const StopMatcher::Result r = m.push("/s> b zzz");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.word, "</s>");
  EXPECT_EQ(r.emit, "");
}

}  // namespace
}  // namespace inferd::engine
