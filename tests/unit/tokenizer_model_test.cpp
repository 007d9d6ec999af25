// The tokenizer of the default model (SmolLM2-135M-Instruct): known ids, ChatML special
// tokens, edge cases of the real vocabulary. Skipped when the model file is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/paths.h"

namespace inferd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::string model_path() {
  return default_model_path();
}

class TokenizerModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    gguf::GgufFile file = gguf::GgufFile::open(model_path());
    tok_ = Tokenizer::from_gguf(file).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "model not found: " << model_path();
  }
  static const Tokenizer* tok_;
};
const Tokenizer* TokenizerModel::tok_ = nullptr;

TEST_F(TokenizerModel, VocabularyFacts) {
  const Vocab& v = tok_->vocab();
  EXPECT_EQ(v.size(), 49152);
  EXPECT_EQ(v.model(), "gpt2");
  EXPECT_EQ(v.pre(), "smollm");
  EXPECT_EQ(v.special().bos, 1);
  EXPECT_EQ(v.special().eos, 2);
  EXPECT_EQ(v.special().eot, 2);
  EXPECT_FALSE(v.add_bos());
  EXPECT_TRUE(v.is_eog(2));
  EXPECT_TRUE(v.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(v.is_eog(1));
  EXPECT_EQ(v.text(1), "<|im_start|>");
}

TEST_F(TokenizerModel, KnownIds) {
  EXPECT_EQ(tok_->encode("Hello world", true, true), (Ids{19556, 905}));
  EXPECT_EQ(tok_->token_piece(905), " world");
  EXPECT_EQ(tok_->decode(Ids{19556, 905}, false), "Hello world");
}

TEST_F(TokenizerModel, ChatMarkersAreOneTokenOnlyWhenParsingSpecials) {
  const std::string text = "<|im_start|>user\nHi!<|im_end|>\n";
  Ids ids = tok_->encode(text, true, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  EXPECT_EQ(tok_->decode(ids, false), text);
  EXPECT_EQ(tok_->decode(ids, true), "user\nHi!\n");

  Ids plain = tok_->encode(text, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_GT(plain.size(), ids.size());
  EXPECT_EQ(tok_->decode(plain, false), text);
}

TEST_F(TokenizerModel, UnspellableAndInvalidBytes) {
  const std::string fffd = "\xEF\xBF\xBD";
  // SmolLM2 has no token for the bytes 0x04 or 0xF1; llama.cpp leaves them out.
  EXPECT_FALSE(tok_->round_trips("a\x04z"));
  EXPECT_EQ(tok_->encode("a\x04z", false, false), (Ids{81, 106}));
  EXPECT_EQ(tok_->decode(tok_->encode("x\U00040000y", false, false), false), "x\x80\x80\x80y");
  EXPECT_EQ(tok_->decode(tok_->encode("a\xFF\xFEz", false, false), false), "a" + fffd + fffd + "z");
}

// Pseudo-random text of `n` code points drawn from `alphabet`.
std::string random_text(const std::vector<std::string>& alphabet, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string out;
  for (size_t i = 0; i < n; ++i) out += alphabet[pick(rng)];
  return out;
}

TEST_F(TokenizerModel, LongInputsRoundTrip) {
  const std::vector<std::vector<std::string>> alphabets = {
      {"a", "b", "c", "d", "e", "q", "x", "z"},  // one 10 kB word
      {" "},
      {"9", "1"},
      {"中", "文", "字"},
      {"😀", "🎉", "\u200d"},
      {"a", " ", "\n", ".", "1", "é", "😀", "<", "|", "'s"},
  };
  for (size_t i = 0; i < alphabets.size(); ++i) {
    std::string text = random_text(alphabets[i], 10000, static_cast<uint32_t>(i));
    Ids ids = tok_->encode(text, false, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok_->decode(ids, false), text) << "alphabet " << i;
  }
}

TEST_F(TokenizerModel, StreamingMatchesDecode) {
  const std::string text = "Emoji 👩‍👩‍👧 and CJK 漢字かな, Ünïcödé.";
  Ids ids = tok_->encode(text, false, false);
  IncrementalDetokenizer detok(*tok_);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace inferd::tokenizer
