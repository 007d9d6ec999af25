// Special tokens in text, BOS/EOS, and decoding with and without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> make(ToyVocabSpec spec) {
  return Tokenizer::from_vocab(Vocab(make_toy_vocab(spec)));
}

std::vector<std::string> pieces(const Tokenizer& tok, std::string_view text, bool parse_special) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text, false, parse_special)) out.push_back(tok.token_piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerSpecial, ControlTokensAreFoundOnlyWhenParsing) {
  auto tok = make({.control = {"<s>", "</s>", "<|im_start|>"}});
  const int32_t im_start = tok->vocab().find("<|im_start|>");
  Ids ids = tok->encode("<|im_start|>user", false, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(tok->decode(ids, false), "<|im_start|>user");
  EXPECT_EQ(tok->decode(ids, true), "user");

  Ids plain = tok->encode("<|im_start|>user", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_start), 0);
  EXPECT_EQ(tok->decode(plain, false), "<|im_start|>user");
}

TEST(TokenizerSpecial, UserDefinedTokensAreAlwaysFound) {
  auto tok = make({.user_defined = {"<tool>"}});
  const int32_t tool = tok->vocab().find("<tool>");
  for (bool parse : {true, false}) {
    Ids ids = tok->encode("a<tool>b", false, parse);
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[1], tool);
  }
  // User-defined tokens are text, so skipping special tokens keeps them.
  EXPECT_EQ(tok->decode(tok->encode("a<tool>b", false, true), true), "a<tool>b");
}

TEST(TokenizerSpecial, TextAroundSpecialTokensIsEncodedSeparately) {
  auto tok = make({.control = {"<sep>"}, .merges = {{"a", "b"}}});
  // "a" and "b" may not merge across the special token.
  EXPECT_EQ(pieces(*tok, "a<sep>b", true), (Pieces{"a", "<sep>", "b"}));
  EXPECT_EQ(pieces(*tok, "<sep><sep>ab<sep>", true), (Pieces{"<sep>", "<sep>", "ab", "<sep>"}));
}

TEST(TokenizerSpecial, LongerTokensAreTakenFirstEverywhere) {
  auto tok = make({.control = {"<a>", "<a><b>", "b><c"}});
  // "<a><b>" is taken first, which leaves no "b><c" to find.
  EXPECT_EQ(pieces(*tok, "<a><b><c>", true), (Pieces{"<a><b>", "<", "c", ">"}));
  EXPECT_EQ(pieces(*tok, "<a>b><c", true), (Pieces{"<a>", "b><c"}));
  EXPECT_EQ(pieces(*tok, "x<a>y<a>", true), (Pieces{"x", "<a>", "y", "<a>"}));
  // A shorter token cannot be found inside a longer one that was already taken.
  EXPECT_EQ(pieces(*tok, "<a><b><a>", true), (Pieces{"<a><b>", "<a>"}));
}

TEST(TokenizerSpecial, LongestFirstIsNotLeftmostFirst) {
  // "bcd" is longer than "ab", so it is taken first even though "ab" starts earlier.
  auto tok = make({.control = {"ab", "bcd"}});
  EXPECT_EQ(pieces(*tok, "abcd", true), (Pieces{"a", "bcd"}));
}

TEST(TokenizerSpecial, BosAndEosFollowTheVocabFlags) {
  auto with_bos = make({.control = {"<s>", "</s>"}, .add_bos = true});
  Ids ids = with_bos->encode("hi", true, true);
  EXPECT_EQ(ids.front(), with_bos->vocab().special().bos);
  EXPECT_NE(ids.back(), with_bos->vocab().special().eos);
  EXPECT_EQ(with_bos->encode("hi", false, true).front(), with_bos->vocab().find("h"));

  auto with_eos = make({.control = {"<s>", "</s>"}, .add_bos = false, .add_eos = true});
  ids = with_eos->encode("hi", true, true);
  EXPECT_EQ(ids.front(), with_eos->vocab().find("h"));
  EXPECT_EQ(ids.back(), with_eos->vocab().special().eos);
  EXPECT_EQ(with_eos->decode(ids, true), "hi");
}

TEST(TokenizerSpecial, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = make({});
  const int32_t n = tok->vocab().size();
  for (int32_t bad : {-1, n, n + 100}) {
    try {
      Ids ids{0, bad};
      tok->decode(ids, false);
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(std::to_string(bad)), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(n)), std::string::npos) << message;
    }
  }
  EXPECT_THROW(tok->token_piece(n), Error);
}

TEST(TokenizerSpecial, EncodeIsSafeFromManyThreads) {
  auto tok = make({.control = {"<x>"}, .merges = {{"a", "b"}, {"ab", "c"}, {" ", "abc"}}});
  std::string text;
  for (int i = 0; i < 2000; ++i) text += i % 7 == 0 ? "<x> abc" : " abcab";
  const Ids expected = tok->encode(text, true, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) mismatches += tok->encode(text, true, true) != expected;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace inferd::tokenizer
