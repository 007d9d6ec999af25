// DRY's sequence breakers over real vocabularies (SmolLM2's byte-level BPE, Gemma 3's
// SentencePiece): every token that contains a breaker breaks alone, and every token whose text
// ends with a breaker's beginning is a head whose tail spells the rest.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model_fixture.h"
#include "sampling/dry.h"
#include "tokenizer/tokenizer.h"

namespace inferd::testing {
namespace {

class DryBreakersTest : public ::testing::TestWithParam<NamedModel> {};

TEST_P(DryBreakersTest, HeadsAndTailsSpellEachBreaker) {
  const std::string path = GetParam().path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found at " << path;
  const gguf::GgufFile file = gguf::GgufFile::open(path);
  const auto tok = tokenizer::Tokenizer::from_gguf(file);
  const std::vector<std::string> breakers = {"\n", ":", "Assistant:", " the end"};
  const auto table = sampling::DryBreakers::build(*tok, breakers);
  const auto n_vocab = static_cast<int32_t>(tok->vocab().size());
  int alone = 0, heads = 0;
  for (int32_t id = 0; id < n_vocab; ++id) {
    const std::string& piece = tok->token_piece(id);
    bool contains = false;
    for (const std::string& b : breakers) contains = contains || piece.find(b) != std::string::npos;
    ASSERT_EQ(table->breaks_alone(id), contains) << id << " '" << piece << "'";
    alone += contains;
    // Every tail the table holds for this token, and every one it should hold: the token ends
    // with the first k characters of a breaker it does not contain whole.
    std::vector<std::vector<int32_t>> want;
    for (const std::string& b : breakers) {
      if (piece.find(b) == std::string::npos) {
        for (size_t k = 1; k < b.size() && k <= piece.size(); ++k) {
          if (piece.compare(piece.size() - k, k, b, 0, k) != 0) continue;
          std::vector<int32_t> tail = tok->encode(b.substr(k), false, false);
          if (std::find(want.begin(), want.end(), tail) == want.end()) want.push_back(tail);
        }
      }
    }
    std::vector<std::vector<int32_t>> got;
    for (const std::vector<int32_t>& tail : table->tails(id))
      if (!tail.empty()) got.push_back(tail);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << id << " '" << piece << "'";
    for (const std::vector<int32_t>& tail : got) {
      std::string spelled = piece;
      for (const int32_t t : tail) spelled += tok->token_piece(t);
      bool ends_with_one = false;
      for (const std::string& b : breakers)
        ends_with_one =
            ends_with_one || (spelled.size() >= b.size() &&
                              spelled.compare(spelled.size() - b.size(), b.size(), b) == 0);
      EXPECT_TRUE(ends_with_one) << "'" << spelled << "'";
    }
    heads += !got.empty();
  }
  // Both kinds occur in a real vocabulary ("\n\n", ":", " Assistant", " the", ...).
  EXPECT_GT(alone, 10);
  EXPECT_GT(heads, 10);
}

INSTANTIATE_TEST_SUITE_P(Models, DryBreakersTest, ::testing::ValuesIn(kEngineTestModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace inferd::testing
