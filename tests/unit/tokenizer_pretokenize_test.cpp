// Pre-tokenizers: where text is cut into words before BPE. The expectations follow the
// reference tokenizer's behaviour for the same pattern names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view pre, std::string_view text) {
  Pieces out;
  for (std::string_view p : PreTokenizer::create(pre)->split(text)) out.emplace_back(p);
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

TEST(TokenizerPretokenize, UnknownNameIsAClearError) {
  try {
    PreTokenizer::create("no-such-pre");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
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
