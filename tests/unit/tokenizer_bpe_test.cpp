// Byte-level BPE on tiny hand-made vocabularies: merge order, ties, bytes, word boundaries
// and what happens to text the vocabulary cannot spell.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"

namespace inferd::tokenizer {
namespace {

std::unique_ptr<Tokenizer> make(ToyVocabSpec spec) {
  return Tokenizer::from_vocab(Vocab(make_toy_vocab(spec)));
}

// The pieces of `text` after encoding, which read better in failures than ids.
std::vector<std::string> pieces(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text, false, false)) out.push_back(tok.token_piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerBpe, AppliesMergesInRankOrder) {
  auto tok = make({.merges = {{"l", "o"}, {"lo", "w"}, {"e", "r"}, {"low", "er"}}});
  EXPECT_EQ(pieces(*tok, "lower"), (Pieces{"lower"}));
  EXPECT_EQ(pieces(*tok, "lowe"), (Pieces{"low", "e"}));
  EXPECT_EQ(pieces(*tok, "lo"), (Pieces{"lo"}));
}

TEST(TokenizerBpe, LowerRankWinsOverPosition) {
  auto tok = make({.merges = {{"b", "c"}, {"a", "b"}}});
  EXPECT_EQ(pieces(*tok, "abc"), (Pieces{"a", "bc"}));
  EXPECT_EQ(pieces(*tok, "abd"), (Pieces{"ab", "d"}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  auto tok = make({.merges = {{"a", "a"}}});
  EXPECT_EQ(pieces(*tok, "aaa"), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces(*tok, "aaaa"), (Pieces{"aa", "aa"}));
  EXPECT_EQ(pieces(*tok, "aaaaa"), (Pieces{"aa", "aa", "a"}));
}

TEST(TokenizerBpe, MergedSymbolsMergeAgainWithNeighbours) {
  auto tok = make({.merges = {{"a", "b"}, {"c", "d"}, {"ab", "cd"}, {"abcd", "e"}}});
  EXPECT_EQ(pieces(*tok, "abcde"), (Pieces{"abcde"}));
  EXPECT_EQ(pieces(*tok, "abcdabcd"), (Pieces{"abcd", "abcd"}));
}

TEST(TokenizerBpe, MultiByteCharactersStartAsBytes) {
  auto plain = make({});
  EXPECT_EQ(pieces(*plain, "é"), (Pieces{"\xC3", "\xA9"}));
  auto merged = make({.merges = {{"\xC3", "\xA9"}}});
  EXPECT_EQ(pieces(*merged, "é"), (Pieces{"é"}));
  EXPECT_EQ(merged->decode(merged->encode("café", false, false), false), "café");
}

TEST(TokenizerBpe, MergesNeverCrossWordBoundaries) {
  auto tok = make({.merges = {{"a", " "}, {" ", "b"}}});
  // gpt2 splits "a b" into "a" and " b"; "a " would need the space from the next word.
  EXPECT_EQ(pieces(*tok, "a b"), (Pieces{"a", " b"}));
}

TEST(TokenizerBpe, SmollmSplitsEveryDigit) {
  auto tok = make({.pre = "smollm", .merges = {{"1", "2"}, {" ", "1"}}});
  EXPECT_EQ(pieces(*tok, "12 12"), (Pieces{"1", "2", " ", "1", "2"}));
  auto gpt2 = make({.pre = "gpt-2", .merges = {{" ", "1"}, {" 1", "2"}, {"1", "2"}}});
  EXPECT_EQ(pieces(*gpt2, "12 12"), (Pieces{"12", " 12"}));
}

TEST(TokenizerBpe, InvalidUtf8IsDecodedAsTheReferenceDoes) {
  auto tok = make({});
  const std::string fffd = "\xEF\xBF\xBD";
  // One U+FFFD per byte that starts no code point: a cut-off "\xE4\xB8" is two of them.
  EXPECT_EQ(tok->decode(tok->encode("a\xFF"
                                    "b\xE4\xB8"
                                    "c\xE4",
                                    false, false),
                        false),
            "a" + fffd + "b" + fffd + fffd + "c" + fffd);
  EXPECT_FALSE(tok->round_trips("a\xFF"));
  EXPECT_TRUE(tok->round_trips("a\xC3\xA9"));
  // A lead byte with enough continuation bytes is a code point even when UTF-8 forbids the
  // form: overlong forms come out in their shortest form, surrogates as they are.
  EXPECT_EQ(tok->decode(tok->encode("\xC0\xAF", false, false), false), "/");
  EXPECT_EQ(tok->decode(tok->encode("\xED\xA0\x80", false, false), false), "\xED\xA0\x80");
  EXPECT_FALSE(tok->round_trips("\xED\xA0\x80"));
  // Above U+10FFFF there is no code point to write back.
  EXPECT_EQ(tok->decode(tok->encode("\xF5\x80\x80\x80", false, false), false),
            fffd + fffd + fffd + fffd);
}

TEST(TokenizerBpe, BytesWithoutATokenAreLeftOut) {
  auto tok = make({.merges = {{"x", "y"}}, .missing_bytes = {0x04, 0xE4}});
  EXPECT_FALSE(tok->round_trips("x\x04y"));
  // The byte still separates words, so "x" and "y" do not merge.
  EXPECT_EQ(pieces(*tok, "x\x04y"), (Pieces{"x", "y"}));
  EXPECT_EQ(pieces(*tok, "\x04"), Pieces{});
  // Only the unspellable byte of a character goes.
  EXPECT_EQ(pieces(*tok, "\xE4\xB8\xAD!"), (Pieces{"\xB8", "\xAD", "!"}));
}

TEST(TokenizerBpe, EmptyTextGivesNoTokens) {
  auto tok = make({.control = {"<s>"}, .add_bos = true});
  EXPECT_TRUE(tok->encode("", false, true).empty());
  EXPECT_EQ(tok->encode("", true, true), (std::vector<int32_t>{0}));
}

TEST(TokenizerBpe, LongWordRoundTrips) {
  // Every pair merges, so a quadratic encoder would rescan 100k symbols thousands of times.
  auto tok = make({.merges = {{"a", "b"}, {"ab", "ab"}, {"abab", "abab"}, {"b", "a"}}});
  std::string word;
  for (int i = 0; i < 50000; ++i) word += "ab";
  std::vector<int32_t> ids = tok->encode(word, false, false);
  EXPECT_EQ(ids.size(), word.size() / 8);
  EXPECT_EQ(tok->decode(ids, false), word);
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWordTokens) {
  // llama3-style pre-tokenizers take a word that is a token as is. "abc" is a token here
  // only through the merge chain a+bc, while BPE from scratch would give ab + c.
  ToyVocabSpec spec{
      .pre = "llama3", .merges = {{"a", "b"}, {"b", "c"}, {"a", "bc"}}, .add_bos = false};
  auto tok = make(spec);
  EXPECT_EQ(pieces(*tok, "abc"), (Pieces{"abc"}));
  spec.pre = "gpt-2";
  EXPECT_EQ(pieces(*make(spec), "abc"), (Pieces{"ab", "c"}));
}

}  // namespace
}  // namespace inferd::tokenizer
