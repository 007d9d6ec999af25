// Sampler chain: greedy, each truncation (top-k, top-p, min-p) restricting the candidates,
// temperature, penalties with exact numbers, logit bias, seeds, and logprobs.
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "util/error.h"

namespace inferd::sampling {
namespace {

// Logits whose softmax is 0.4, 0.3, 0.2, 0.1, then 0 for the rest of a vocabulary of 8.
std::vector<float> four_way() {
  return {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f),
          -1e9f,          -1e9f,          -1e9f,          -1e9f};
}

SamplingParams plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::map<int32_t, int> histogram(SamplingParams p, std::vector<float> logits, int draws) {
  p.seed = 1234;
  Sampler s(p, static_cast<int32_t>(logits.size()));
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    auto copy = logits;
    counts[s.sample(copy, {}, {})] += 1;
  }
  return counts;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f), 5);
  std::vector<float> logits{1, 3, 2, 3, 0};
  EXPECT_EQ(s.sample(logits, {}, {}), 1);
}

TEST(Sampler, PlainSamplingFollowsTheDistribution) {
  auto counts = histogram(plain(1.0f), four_way(), 20000);
  EXPECT_NEAR(counts[0] / 20000.0, 0.4, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[3] / 20000.0, 0.1, 0.02);
  EXPECT_EQ(counts.count(4), 0u);
}

TEST(Sampler, TopKKeepsKTokens) {
  SamplingParams p = plain(1.0f);
  p.top_k = 2;
  auto counts = histogram(p, four_way(), 5000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[0] / 5000.0, 0.4 / 0.7, 0.03);
}

TEST(Sampler, TopPKeepsSmallestSetWithMass) {
  SamplingParams p = plain(1.0f);
  p.top_p = 0.65f;  // 0.4 + 0.3 reaches it; 0.2 is not needed
  auto counts = histogram(p, four_way(), 5000);
  EXPECT_EQ((std::set<int32_t>{counts.begin()->first, std::next(counts.begin())->first}),
            (std::set<int32_t>{0, 1}));
  EXPECT_EQ(counts.size(), 2u);
}

TEST(Sampler, TopPOnLargeVocabularyWidensTheSort) {
  // 1000 equally likely tokens: top_p = 0.5 must keep exactly 500 of them.
  std::vector<float> flat(1000, 0.0f);
  SamplingParams p = plain(1.0f);
  p.top_p = 0.5f;
  auto counts = histogram(p, flat, 20000);
  for (const auto& [token, n] : counts) EXPECT_LT(token, 500);
  EXPECT_GT(counts.size(), 450u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p = plain(1.0f);
  p.min_p = 0.6f;  // keeps p >= 0.24: tokens 0 and 1
  auto counts = histogram(p, four_way(), 5000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts.count(2), 0u);
}

// llama.cpp's order (its /completion API): the filters see the unscaled probabilities, then the
// temperature reshapes what they kept.
std::vector<float> kept_distribution(SamplingParams p, std::vector<float> logits) {
  Sampler s(p, static_cast<int32_t>(logits.size()));
  std::vector<float> probs(logits.size());
  s.distribution(logits, {}, {}, probs);
  return probs;
}

TEST(Sampler, LlamaCppOrderFiltersBeforeTheTemperature) {
  // At temperature 2 token 2 has 0.2/0.4 -> sqrt: 0.71 of token 0's probability, at 1 only
  // 0.5: min-p 0.6 keeps it in vLLM's order and drops it in llama.cpp's.
  SamplingParams p = plain(2.0f);
  p.min_p = 0.6f;
  EXPECT_GT(kept_distribution(p, four_way())[2], 0.0f);
  p.llama_cpp_order = true;
  std::vector<float> probs = kept_distribution(p, four_way());
  EXPECT_EQ(probs[2], 0.0f);
  ASSERT_GT(probs[1], 0.0f);
  // Tokens 0 and 1 remain, their ratio that of temperature 2: sqrt(0.4 / 0.3).
  EXPECT_NEAR(probs[0] / probs[1], std::sqrt(0.4 / 0.3), 1e-5);
}

TEST(Sampler, LlamaCppOrderTakesTopPBeforeMinP) {
  // Probabilities 0.4, 0.3, 0.2, 0.1 and min-p 0.3 (floor 0.12): vLLM's order asks top-p 0.8 of
  // the 0.9 left by min-p (0.72: tokens 0, 1, 2 -- 0.7 is short of it), llama.cpp's asks 0.8 of
  // everything (tokens 0, 1, 2 again) and then min-p drops none of them. With top-p 0.75 the
  // orders differ: 0.675 of min-p's 0.9 is reached by tokens 0 and 1; 0.75 of the whole is not.
  SamplingParams p = plain(1.0f);
  p.min_p = 0.3f;
  p.top_p = 0.75f;
  EXPECT_EQ(kept_distribution(p, four_way())[2], 0.0f);
  p.llama_cpp_order = true;
  EXPECT_NEAR(kept_distribution(p, four_way())[2], 0.2f / 0.9f, 1e-5);
}

TEST(Sampler, LowTemperatureSharpens) {
  auto hot = histogram(plain(1.0f), four_way(), 5000);
  auto cold = histogram(plain(0.25f), four_way(), 5000);
  EXPECT_GT(cold[0], hot[0] + 1000);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  auto run = [](uint64_t seed) {
    SamplingParams p = plain(1.0f);
    p.seed = seed;
    Sampler s(p, 8);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto logits = four_way();
      out.push_back(s.sample(logits, {}, {}));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplingParams p = plain(0.0f);
  p.repetition_penalty = 2.0f;
  p.repeat_last_n = 2;  // window: the last two of prompt + output = {1, 2}
  Sampler s(p, 4);
  std::vector<float> logits{1.0f, 4.0f, -1.0f, 3.0f};
  std::vector<int32_t> prompt{0, 1}, output{2};
  EXPECT_EQ(s.sample(logits, prompt, output), 3);  // 4 -> 2 lets token 3 (3.0) win
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                // outside the window
  EXPECT_FLOAT_EQ(logits[1], 2.0f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f);
}

TEST(Sampler, FrequencyAndPresenceUseOutputOnly) {
  SamplingParams p = plain(0.0f);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p, 3);
  std::vector<float> logits{2.0f, 2.0f, 0.0f};
  std::vector<int32_t> prompt{1, 1, 1}, output{0, 0};
  EXPECT_EQ(s.sample(logits, prompt, output), 1);
  EXPECT_FLOAT_EQ(logits[0], 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[1], 2.0f);  // prompt tokens are not penalised
}

TEST(Sampler, LogitBiasBansAToken) {
  SamplingParams p = plain(1.0f);
  p.logit_bias = {{0, -1e30f}};
  auto counts = histogram(p, four_way(), 2000);
  EXPECT_EQ(counts.count(0), 0u);
}

TEST(Sampler, LogprobsAreTheModelDistribution) {
  SamplingParams p = plain(0.3f);  // temperature must not change reported logprobs
  Sampler s(p, 8);
  auto logits = four_way();
  int32_t token = s.sample(logits, {}, {});
  std::vector<float> expected{0.4f, 0.3f, 0.2f, 0.1f};
  EXPECT_NEAR(s.last_logprob(), std::log(expected[static_cast<size_t>(token)]), 1e-5);
  std::vector<TokenLogprob> top(3);
  ASSERT_EQ(s.top_logprobs(logits, top), 3u);
  EXPECT_EQ(top[0].token, 0);
  EXPECT_NEAR(top[0].logprob, std::log(0.4), 1e-5);
  EXPECT_EQ(top[2].token, 2);
  double total = 0;
  std::vector<TokenLogprob> all(8);
  s.top_logprobs(logits, all);
  for (const auto& t : all) total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-5);
}

// post_sampling_probs: the distribution after the chain. top_k 3 keeps 0.4, 0.3, 0.2, which
// renormalise to 4/9, 3/9, 2/9; the removed token is not listed even when more are asked for,
// and the chosen token's figure is its own. Greedy draws from a one-hot distribution.
TEST(Sampler, PostSamplingTopIsTheDistributionDrawnFrom) {
  SamplingParams p = plain(1.0f);
  p.top_k = 3;
  p.seed = 7;
  Sampler s(p, 8);
  auto logits = four_way();
  const int32_t token = s.sample(logits, {}, {});
  ASSERT_LT(token, 3);
  std::vector<TokenLogprob> top(6);
  float token_logprob = 0;
  ASSERT_EQ(s.post_sampling_top(logits, token, top, token_logprob), 3u);
  const double expected[] = {4.0 / 9, 3.0 / 9, 2.0 / 9};
  double total = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(top[static_cast<size_t>(i)].token, i);
    EXPECT_NEAR(std::exp(top[static_cast<size_t>(i)].logprob), expected[i], 1e-5);
    total += std::exp(top[static_cast<size_t>(i)].logprob);
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_NEAR(std::exp(token_logprob), expected[token], 1e-5);
  std::vector<TokenLogprob> one(1);
  ASSERT_EQ(s.post_sampling_top(logits, token, one, token_logprob), 1u);
  EXPECT_EQ(one[0].token, 0);

  Sampler greedy(plain(0.0f), 8);
  auto again = four_way();
  const int32_t best = greedy.sample(again, {}, {});
  ASSERT_EQ(greedy.post_sampling_top(again, best, top, token_logprob), 1u);
  EXPECT_EQ(top[0].token, 0);
  EXPECT_EQ(top[0].logprob, 0.0f);
  EXPECT_EQ(token_logprob, 0.0f);
}

TEST(Sampler, InvalidParametersNameTheParameter) {
  auto message = [](SamplingParams p) {
    try {
      p.validate(10);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(message(p).find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(message(p).find("top_p"), std::string::npos);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_NE(message(p).find("logit_bias"), std::string::npos);
  p = {};
  EXPECT_EQ(message(p), "");
}

TEST(Rng, UniformIsInRangeAndReproducible) {
  Rng a(5), b(5);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    float u = a.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(u, b.uniform());
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace inferd::sampling
