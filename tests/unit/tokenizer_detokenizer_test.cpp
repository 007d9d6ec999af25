// IncrementalDetokenizer: streamed text is whole characters only, whatever the token cuts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

class TokenizerDetokenizer : public ::testing::Test {
 protected:
  // No merges: every byte is its own token, the worst case for cut characters.
  std::unique_ptr<Tokenizer> tok_ =
      Tokenizer::from_vocab(Vocab(make_toy_vocab({.control = {"<s>", "</s>"}})));

  // Feeds the ids one by one and returns what came out after each, then the flush.
  std::vector<std::string> stream(const std::vector<int32_t>& ids, bool skip = true) const {
    IncrementalDetokenizer detok(*tok_, skip);
    std::vector<std::string> out;
    for (int32_t id : ids) out.emplace_back(detok.push(id));
    out.push_back(detok.flush());
    return out;
  }

  std::vector<int32_t> bytes_of(std::string_view text) const {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(2 + c);  // ids 2.. are the single bytes
    return ids;
  }
};

TEST_F(TokenizerDetokenizer, HoldsBackCutCharacters) {
  // "中" is E4 B8 AD, "😀" is F0 9F 98 80.
  std::vector<std::string> out = stream(bytes_of("a中😀b"));
  std::vector<std::string> expected = {"a", "", "", "中", "", "", "", "😀", "b", ""};
  EXPECT_EQ(out, expected);
}

TEST_F(TokenizerDetokenizer, StreamEqualsDecodeForValidText) {
  std::string text = "Grüße, 世界! 🎉🎉 ok";
  std::vector<int32_t> ids = tok_->encode(text, false, false);
  std::string joined;
  for (const std::string& s : stream(ids)) joined += s;
  EXPECT_EQ(joined, text);
}

TEST_F(TokenizerDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  // A lone continuation byte is invalid at once; a cut-off lead is invalid when a byte that
  // cannot continue it arrives, or at the end.
  EXPECT_EQ(stream(bytes_of("a\x80z")), (std::vector<std::string>{"a", kFffd, "z", ""}));
  EXPECT_EQ(stream(bytes_of("\xE4\xB8z")), (std::vector<std::string>{"", "", kFffd + "z", ""}));
  EXPECT_EQ(stream(bytes_of("x\xF0\x9F")), (std::vector<std::string>{"x", "", "", kFffd}));
}

TEST_F(TokenizerDetokenizer, SpecialTokensAreSkippedOrShown) {
  std::vector<int32_t> ids = {0};
  for (int32_t id : bytes_of("hi")) ids.push_back(id);
  ids.push_back(1);
  EXPECT_EQ(stream(ids, true), (std::vector<std::string>{"", "h", "i", "", ""}));
  EXPECT_EQ(stream(ids, false), (std::vector<std::string>{"<s>", "h", "i", "</s>", ""}));
  // A special token between the bytes of a character does not break it when skipped.
  std::vector<int32_t> cut = bytes_of("中");
  cut.insert(cut.begin() + 1, 0);
  EXPECT_EQ(stream(cut, true), (std::vector<std::string>{"", "", "", "中", ""}));
}

TEST_F(TokenizerDetokenizer, BadIdLeavesStateAlone) {
  IncrementalDetokenizer detok(*tok_);
  EXPECT_EQ(detok.push(2 + 0xE4), "");
  EXPECT_THROW(detok.push(-5), Error);
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(detok.push(2 + 0xB8), "");
  EXPECT_EQ(detok.push(2 + 0xAD), "中");
  EXPECT_EQ(detok.flush(), "");
}

}  // namespace
}  // namespace inferd::tokenizer
