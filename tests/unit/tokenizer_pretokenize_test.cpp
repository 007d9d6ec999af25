// Pre-tokenizers: where text is cut into words before BPE. The expectations follow the
// reference tokenizer's behaviour for the same pattern names.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view pre, std::string_view text, bool hand_written = true) {
  Pieces out;
  for (std::string_view p : PreTokenizer::create(pre, hand_written)->split(text)) {
    out.emplace_back(p);
  }
  return out;
}

TEST(TokenizerPretokenize, Gpt2WordsKeepTheirLeadingSpace) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "Hello, world!"), (Pieces{"Hello", ",", " world", "!"}));
  EXPECT_EQ(split("gpt-2", "héllo wörld 你好"), (Pieces{"héllo", " wörld", " 你好"}));
  EXPECT_EQ(split("gpt-2", "a 😀😀 b"), (Pieces{"a", " 😀😀", " b"}));
  EXPECT_EQ(split("gpt-2", "x1234 56"), (Pieces{"x", "1234", " 56"}));
  EXPECT_TRUE(split("gpt-2", "").empty());
}

TEST(TokenizerPretokenize, Gpt2ContractionsAreLowerCaseOnly) {
  EXPECT_EQ(split("gpt-2", "I'm sure it's"), (Pieces{"I", "'m", " sure", " it", "'s"}));
  EXPECT_EQ(split("gpt-2", "they're we'll I'd"), (Pieces{"they", "'re", " we", "'ll", " I", "'d"}));
  EXPECT_EQ(split("gpt-2", "IT'S"), (Pieces{"IT", "'", "S"}));
}

TEST(TokenizerPretokenize, Gpt2WhitespaceRuns) {
  // A run of spaces gives its last space to the next word.
  EXPECT_EQ(split("gpt-2", "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split("gpt-2", "a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  // At the end of the text the whole run stays together.
  EXPECT_EQ(split("gpt-2", "end   "), (Pieces{"end", "   "}));
  // Single white space that is not a space before a word stands alone.
  EXPECT_EQ(split("gpt-2", "x\ty\nz"), (Pieces{"x", "\t", "y", "\n", "z"}));
  EXPECT_EQ(split("gpt-2", "x\t\ty"), (Pieces{"x", "\t", "\t", "y"}));
}

TEST(TokenizerPretokenize, WhiteSpaceIsTheUnicodeProperty) {
  // U+00A0 and U+3000 are white space; U+180E (no longer White_Space) is a symbol.
  EXPECT_EQ(split("gpt-2", "a\u00A0\u00A0b"), (Pieces{"a", "\u00A0", "\u00A0", "b"}));
  EXPECT_EQ(split("gpt-2", "a\u3000"), (Pieces{"a", "\u3000"}));
  EXPECT_EQ(split("gpt-2", "\u180E\u180Eb"), (Pieces{"\u180E\u180E", "b"}));
}

TEST(TokenizerPretokenize, SmollmIsolatesDigitsFirst) {
  EXPECT_EQ(split("smollm", "abc123"), (Pieces{"abc", "1", "2", "3"}));
  // The space before a number cannot join it, and the run rule sees the digit boundary
  // as the end of the text.
  EXPECT_EQ(split("smollm", "x 12"), (Pieces{"x", " ", "1", "2"}));
  EXPECT_EQ(split("smollm", "x   1"), (Pieces{"x", "   ", "1"}));
  EXPECT_EQ(split("smollm", "٣½"), (Pieces{"٣", "½"}));
  EXPECT_EQ(split("smollm", "Hello world"), (Pieces{"Hello", " world"}));
}

TEST(TokenizerPretokenize, DefaultSplitsPunctuationAndNumberGroups) {
  EXPECT_EQ(split("default", "Hello, world!!"), (Pieces{"Hello", ",", " world", "!!"}));
  EXPECT_EQ(split("default", "12345"), (Pieces{"123", "45"}));
}

TEST(TokenizerPretokenize, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split("llama3", "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("llama3", "IT'S ok"), (Pieces{"IT", "'S", " ok"}));
  EXPECT_EQ(split("llama3", "a\n\nb"), (Pieces{"a", "\n\n", "b"}));
}

TEST(TokenizerPretokenize, EveryKnownNameCompiles) {
  for (std::string_view name : PreTokenizer::known_names()) {
    SCOPED_TRACE(name);
    auto pre = PreTokenizer::create(name);
    EXPECT_EQ(pre->name(), name);
    std::string text =
        "Hello, World! It's 2024: 1234567 ñandú \u00E9\u0301 \u4E2D\u6587 \u3000x\n\n";
    size_t total = 0;
    for (std::string_view p : pre->split(text)) total += p.size();
    EXPECT_EQ(total, text.size());
  }
  EXPECT_TRUE(PreTokenizer::create("llama-bpe")->ignore_merges());
  EXPECT_TRUE(PreTokenizer::create("tekken")->ignore_merges());
  EXPECT_FALSE(PreTokenizer::create("dbrx")->ignore_merges());  // Llama 3's regex, not its rule
  EXPECT_FALSE(PreTokenizer::create("qwen2")->ignore_merges());
}

// The expectations below are the pieces llama.cpp's own splitter gives for the same text.

TEST(TokenizerPretokenize, LetterCategoriesAllMeanLetterBeyondAscii) {
  // The case-aware patterns tell upper from lower case with [^a-z] and [^A-Z] after a letter
  // look-ahead, so every non-ASCII letter is both: "a" + "\u00C0" + "b" stays one word.
  EXPECT_EQ(split("gpt-4o", "a\u00C0b HelloWORLD \u00C9COLE\u00E9cole"),
            (Pieces{"a\u00C0b", " Hello", "WORLD", " \u00C9COLE\u00E9cole"}));
  EXPECT_EQ(split("tekken", "HelloWORLD"), (Pieces{"Hello", "WORLD"}));
}

TEST(TokenizerPretokenize, ControlsAndFormatCharactersAreNeitherSpaceNorLetter) {
  // 0x1C..0x1F are not \s; U+200B (format) only matches negated classes.
  EXPECT_EQ(split("gpt-2",
                  "a\x1C"
                  "b c\x1F d \u200B\u200By"),
            (Pieces{"a", "\x1C", "b", " c", "\x1F", " d", " \u200B\u200B", "y"}));
}

TEST(TokenizerPretokenize, EmptyMatchesCut) {
  // SuperBPE's second regex only looks ahead: it cuts digit runs into threes from the right.
  for (bool hand_written : {true, false}) {
    EXPECT_EQ(split("superbpe", "1234567 12", hand_written),
              (Pieces{"1", "234", "567", " ", "12"}));
    EXPECT_EQ(split("superbpe", "x\u0663123456", hand_written),
              (Pieces{"x", "\u0663", "123", "456"}));
  }
  // As a regex it rescans the digits ahead at every position; by hand it is linear.
  std::string digits(1 << 20, '7');
  EXPECT_EQ(PreTokenizer::create("superbpe")->split(digits).size(), digits.size() / 3 + 1);
}

TEST(TokenizerPretokenize, AfmoeGroupsDigitsFromTheRight) {
  // The rule cuts only before and after groups, so "ab" stays with the first group until the
  // next regex separates letters from digits.
  auto pre = PreTokenizer::create("afmoe");
  EXPECT_EQ(split("afmoe", "ab1234 5"), (Pieces{"ab", "1", "234", " ", "5"}));
  EXPECT_EQ(split("tiny_aya", "x1234567"), (Pieces{"x", "1", "234", "567"}));
}

TEST(TokenizerPretokenize, SurrogatesFromLenientDecodingSplitLikeTheReference) {
  // "\xED\xA0\x80" (U+D800, which lenient_utf8 keeps) falls in AFMoE's script range
  // U+8C48-U+FAFF, so it is cut off and the white space before it stays together.
  EXPECT_EQ(split("afmoe", "\u00A0 \xED\xA0\x80"), (Pieces{"\u00A0 ", "\xED\xA0\x80"}));
  EXPECT_EQ(split("deepseek-v3", "\u00A0 \xED\xA0\x80"), (Pieces{"\u00A0", " ", "\xED\xA0\x80"}));
}

TEST(TokenizerPretokenize, DeepseekRulesWithoutCategories) {
  // Line breaks first, then listed letters and ASCII/full-width punctuation, trailing white
  // space, CJK runs, numbers.
  EXPECT_EQ(split("deepseek-llm", "Hello, \u4E16\u754C!\n123  "),
            (Pieces{"Hello", ",", " ", "\u4E16\u754C", "!", "\n", "123", "  "}));
}

// Random text over characters each rule treats differently; the hand-written splitters must
// give exactly the regexes' pieces.
TEST(TokenizerPretokenize, HandWrittenSplittersMatchTheirRegexes) {
  const std::vector<std::string> alphabet = {
      "a",      "Z",      "s",      "t",      "r",          "e",      "v",      "l",
      "m",      "d",      "S",      "T",      "R",          "E",      "L",      "D",
      "'",      "'",      "1",      "7",      " ",          " ",      " ",      "\t",
      "\n",     "\r",     "\v",     "\f",     "\x1C",       "!",      ".",      "/",
      "$",      "_",      "\u00E9", "\u0301", "\u00B2",     "\u0663", "\u00A0", "\u3000",
      "\u2028", "\u0085", "\u4E2D", "\u200B", "\U0001F600", "\uFFFD", "\u0378", "\xED\xA0\x80"};
  std::mt19937 rng(1234);
  for (std::string_view name :
       {"gpt-2", "smollm", "llama-bpe", "qwen2", "qwen35", "jais", "superbpe"}) {
    auto fast = PreTokenizer::create(name, true);
    auto slow = PreTokenizer::create(name, false);
    for (int round = 0; round < 1500; ++round) {
      std::string text;
      int length = std::uniform_int_distribution<int>(1, 24)(rng);
      for (int k = 0; k < length; ++k) text += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(fast->split(text), slow->split(text)) << name << ": \"" << text << "\"";
    }
  }
}

TEST(TokenizerPretokenize, UnknownNameIsAClearError) {
  try {
    PreTokenizer::create("no-such-pre");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama-bpe"), std::string::npos) << e.what();
  }
}

TEST(TokenizerPretokenize, LongRunsDoNotExhaustTheMatcher) {
  for (std::string unit : {" ", "a", "1", "!", "\n", "\u3000", "😀"}) {
    std::string text;
    for (int i = 0; i < 200000; ++i) text += unit;
    text += "x";
    size_t total = 0;
    for (std::string_view p : PreTokenizer::create("smollm")->split(text)) total += p.size();
    EXPECT_EQ(total, text.size()) << "unit '" << unit << "'";
  }
}

}  // namespace
}  // namespace inferd::tokenizer
