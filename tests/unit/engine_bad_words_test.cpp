// vLLM's bad_words (engine/bad_words.h): a banned sequence's last token is never sampled where
// the output ends with the rest of it, so the greedy text parts from the unbanned one exactly
// there and never holds the sequence; drafts are verified under the same ban.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/bad_words.h"
#include "engine/engine.h"
#include "tiny_engine.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

bool contains(const std::vector<int32_t>& text, const std::vector<int32_t>& part) {
  return std::search(text.begin(), text.end(), part.begin(), part.end()) != text.end();
}

TEST(BadWords, BansTheLastTokenWhereTheOutputEndsWithTheRest) {
  const std::vector<std::vector<int32_t>> words = {{5}, {7, 8, 9}, {3, 4}};
  std::vector<float> logits(12, 0.5f);
  ban_bad_words(words, std::vector<int32_t>{1, 7, 8}, logits);
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_EQ(std::isinf(logits[i]), i == 5 || i == 9) << i;
  std::vector<float> fresh(12, 0.5f);
  ban_bad_words(words, std::vector<int32_t>{3}, fresh);  // (a prefix longer than the output:
  EXPECT_TRUE(std::isinf(fresh[4]));                     //  skipped; {3, 4} matches here)
  EXPECT_FALSE(std::isinf(fresh[9]));
  std::vector<float> small(3, 0.5f);
  ban_bad_words(words, {}, small);  // ids past the logits are left alone
  EXPECT_FALSE(std::isinf(small[2]));
}

class BadWordsEngineTest : public TinyEngineFixture {
 protected:
  std::vector<int32_t> greedy(Engine& e, std::vector<std::vector<int32_t>> bad, int spec = -1) {
    Request r = greedy_request(prompt(9), nullptr, 24);
    r.bad_words = std::move(bad);
    r.spec_tokens = spec;
    return generate_to_length(e, std::move(r));
  }
};

TEST_F(BadWordsEngineTest, GreedyTextPartsWhereTheBanApplies) {
  auto e = engine(2);
  const std::vector<int32_t> plain = greedy(*e, {});
  ASSERT_GE(plain.size(), 6u);
  // One token: never sampled; the text differs from its first use on.
  const std::vector<int32_t> no_first = greedy(*e, {{plain[3]}});
  EXPECT_EQ(std::count(no_first.begin(), no_first.end(), plain[3]), 0);
  const auto first_use = std::find(plain.begin(), plain.end(), plain[3]) - plain.begin();
  EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + first_use, no_first.begin()));
  EXPECT_NE(no_first[static_cast<size_t>(first_use)], plain[static_cast<size_t>(first_use)]);
  // Two tokens: the second is banned only after the first.
  const std::vector<int32_t> pair = {plain[4], plain[5]};
  const std::vector<int32_t> no_pair = greedy(*e, {pair});
  EXPECT_FALSE(contains(no_pair, pair));
  const auto second = std::search(plain.begin(), plain.end(), pair.begin(), pair.end()) -
                      plain.begin() + 1;  // where the pair first ends in the unbanned text
  EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + second, no_pair.begin()));
  EXPECT_NE(no_pair[static_cast<size_t>(second)], plain[static_cast<size_t>(second)]);
  // A bad word with an id outside the vocabulary, or none, is refused.
  Request r = greedy_request(prompt(4), std::make_shared<Collect>(), 2);
  r.bad_words = {{3, 99}};
  EXPECT_THROW(e->add_request(r), Error);
  r.bad_words = {{}};
  EXPECT_THROW(e->add_request(r), Error);
}

// With n-gram drafts the verification samples every row under the ban too.
TEST_F(BadWordsEngineTest, DraftsAreVerifiedUnderTheBan) {
  EngineConfig c = config(2);
  c.spec.method = SpecMethod::kNgram;
  c.spec.num_tokens = 4;
  c.spec.row_cost = 0;  // draft the most every step
  c.spec.measure_row_cost = false;
  auto e = engine(c);
  const std::vector<int32_t> plain = greedy(*e, {}, 0);
  ASSERT_GE(plain.size(), 8u);
  const std::vector<int32_t> pair = {plain[6], plain[7]};
  const std::vector<int32_t> undrafted = greedy(*e, {pair}, 0);
  const int64_t before = e->spec_decode_stats().num_draft_tokens;
  const std::vector<int32_t> drafted = greedy(*e, {pair}, -1);
  EXPECT_GT(e->spec_decode_stats().num_draft_tokens, before) << "nothing was drafted";
  EXPECT_EQ(drafted, undrafted);
  EXPECT_FALSE(contains(drafted, pair));
}

}  // namespace
}  // namespace inferd::engine
