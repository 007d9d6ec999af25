// llama.cpp's own samplers: top-n-sigma, typical, XTC, dynamic temperature, Mirostat 1 and 2,
// and DRY. Each against numbers worked out here from the definitions (or a brute-force
// reference on random inputs), through the distribution the sampler draws from.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/dry.h"
#include "sampling/sampler.h"
#include "util/error.h"

namespace inferd::sampling {
namespace {

// Softmax 0.4, 0.3, 0.2, 0.1, then nothing for the rest of a vocabulary of 8.
std::vector<float> four_way() {
  return {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f),
          -1e9f,          -1e9f,          -1e9f,          -1e9f};
}

SamplingParams plain(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  return p;
}

// The same four alone: dynamic temperature counts every candidate in its largest entropy.
std::vector<float> just_four() {
  return {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
}

std::vector<float> distribution(Sampler& s, std::vector<float> logits) {
  std::vector<float> probs(logits.size());
  s.distribution(logits, {}, {}, probs);
  return probs;
}

std::vector<float> distribution(const SamplingParams& p, const std::vector<float>& logits) {
  Sampler s(p, static_cast<int32_t>(logits.size()));
  return distribution(s, logits);
}

// The probabilities of `kept` tokens in proportion to `weights`, zero elsewhere.
void expect_distribution(const std::vector<float>& probs,
                         const std::map<int32_t, double>& weights) {
  double total = 0;
  for (const auto& [token, w] : weights) total += w;
  for (size_t i = 0; i < probs.size(); ++i) {
    const auto it = weights.find(static_cast<int32_t>(i));
    const double want = it == weights.end() ? 0.0 : it->second / total;
    EXPECT_NEAR(probs[i], want, 1e-5) << "token " << i;
  }
}

TEST(LlamaCppSamplers, TopNSigmaKeepsLogitsWithinNDeviationsOfTheTop) {
  // Mean 3.2, standard deviation sqrt(12.56) = 3.544: one sigma keeps 10 only, two keep 3 too.
  const std::vector<float> logits = {0, 1, 2, 3, 10};
  SamplingParams p = plain();
  p.top_n_sigma = 1.0f;
  expect_distribution(distribution(p, logits), {{4, 1.0}});
  p.top_n_sigma = 2.0f;
  expect_distribution(distribution(p, logits), {{3, std::exp(3.0)}, {4, std::exp(10.0)}});
  // Random logits against the definition; -inf (banned) tokens take no part in the statistics.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int round = 0; round < 20; ++round) {
    std::vector<float> z(257);
    for (float& v : z) v = normal(rng);
    z[5] = z[77] = -std::numeric_limits<float>::infinity();
    double sum = 0, sq = 0, n = 0;
    float top = -1e30f;
    for (float v : z)
      if (std::isfinite(v)) sum += v, n += 1, top = std::max(top, v);
    for (float v : z)
      if (std::isfinite(v)) sq += (v - sum / n) * (v - sum / n);
    const double floor = top - 1.5 * std::sqrt(sq / n);
    p.top_n_sigma = 1.5f;
    const std::vector<float> probs = distribution(p, z);
    for (size_t i = 0; i < z.size(); ++i)
      EXPECT_EQ(probs[i] > 0, std::isfinite(z[i]) && z[i] >= floor) << round << " " << i;
  }
}

TEST(LlamaCppSamplers, TypicalKeepsTheTokensNearestTheEntropy) {
  // Entropy 1.2799 nats; surprises 0.916, 1.204, 1.609, 2.303: nearest first are tokens 1
  // (0.3), 2 (0.2), 0 (0.4). Their mass passes 0.45 with tokens 1 and 2: the most likely
  // token is the one typical sampling drops.
  SamplingParams p = plain();
  p.typical_p = 0.45f;
  expect_distribution(distribution(p, four_way()), {{1, 0.3}, {2, 0.2}});
  p.typical_p = 0.25f;
  expect_distribution(distribution(p, four_way()), {{1, 1.0}});
  p.typical_p = 0.95f;  // 0.9 with token 0: token 3 too
  expect_distribution(distribution(p, four_way()), {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
}

TEST(LlamaCppSamplers, XtcRemovesTheTopChoicesButTheLeastLikelyOfThem) {
  SamplingParams p = plain();
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.25f;  // tokens 0 and 1 are above: 0 goes, 1 stays
  expect_distribution(distribution(p, four_way()), {{1, 0.3}, {2, 0.2}, {3, 0.1}});
  p.xtc_threshold = 0.35f;  // only token 0 is above: nothing goes
  expect_distribution(distribution(p, four_way()), {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
  p.xtc_threshold = 0.6f;  // above 0.5: off
  expect_distribution(distribution(p, four_way()), {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
  p.xtc_threshold = 0.15f;  // tokens 0, 1, 2 above: 0 and 1 go
  expect_distribution(distribution(p, four_way()), {{2, 0.2}, {3, 0.1}});
  // With probability one half, token 0 (0.4) is drawn 0.2 of the time.
  p.xtc_probability = 0.5f;
  p.xtc_threshold = 0.25f;
  Sampler s(p, 8);
  int zeros = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> z = four_way();
    zeros += s.sample(z, {}, {}) == 0;
  }
  EXPECT_NEAR(zeros / double(kDraws), 0.2, 0.015);
}

TEST(LlamaCppSamplers, PostSamplingProbsSeeTheLastDrawsXtcCoin) {
  SamplingParams p = plain();
  p.xtc_probability = 0.5f;
  p.xtc_threshold = 0.25f;
  Sampler s(p, 4);
  int fired = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> z = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
    const int32_t token = s.sample(z, {}, {});
    std::vector<TokenLogprob> top(8);
    float logprob = 0;
    const size_t n = s.post_sampling_top(z, token, top, logprob);
    // The coin either removed token 0 (3 left, the drawn one among them) or kept all 4.
    ASSERT_TRUE(n == 3 || n == 4);
    if (n == 3) {
      ++fired;
      EXPECT_NE(token, 0);
      EXPECT_EQ(top[0].token, 1);
      EXPECT_NEAR(std::exp(top[0].logprob), 0.5, 1e-5);
    }
    EXPECT_TRUE(std::isfinite(logprob));
  }
  EXPECT_GT(fired, 60);
  EXPECT_LT(fired, 140);
}

TEST(LlamaCppSamplers, DynamicTemperatureFollowsTheNormalisedEntropy) {
  // The four tokens' entropy over its largest value, ln 4: 0.92322. Temperature 1 +- 0.5
  // becomes 0.5 + 1.0 x 0.92322^exponent.
  const double base[] = {0.4, 0.3, 0.2, 0.1};
  double entropy = 0;
  for (const double q : base) entropy -= q * std::log(q);
  const double normalized = entropy / std::log(4.0);
  ASSERT_NEAR(normalized, 0.92322, 1e-5);
  SamplingParams p = plain(1.0f);
  p.dynatemp_range = 0.5f;
  for (const float exponent : {1.0f, 2.0f}) {
    const double temperature = 0.5 + std::pow(normalized, exponent);
    p.dynatemp_exponent = exponent;
    std::map<int32_t, double> want;
    for (int32_t i = 0; i < 4; ++i) want[i] = std::pow(base[i], 1.0 / temperature);
    const std::vector<float> probs = distribution(p, just_four());
    for (int32_t i = 0; i < 4; ++i)
      EXPECT_NEAR(probs[static_cast<size_t>(i)], want[i] / (want[0] + want[1] + want[2] + want[3]),
                  2e-4);
  }
  // A zero temperature with a range is not greedy: 0 +- 0.5 gives 0.5 x 0.92322 here.
  p.temperature = 0.0f;
  p.dynatemp_exponent = 1.0f;
  const std::vector<float> probs = distribution(p, just_four());
  EXPECT_NEAR(probs[0] / probs[1], std::pow(4.0 / 3.0, 1 / (0.5 * normalized)), 1e-3);
  // One candidate left (top-k 1): no temperature, that token.
  p.top_k = 1;
  expect_distribution(distribution(p, just_four()), {{0, 1.0}});
}

TEST(LlamaCppSamplers, MirostatTwoKeepsSurprisesUpToTheTargetAndMovesIt) {
  // tau 1: mu starts at 2 bits, so p >= 1/4 stays: tokens 0 and 1 (0.4 / 0.7, 0.3 / 0.7).
  SamplingParams p = plain();
  p.mirostat = 2;
  p.mirostat_tau = 1.0f;
  p.mirostat_eta = 10.0f;
  Sampler s(p, 8);
  expect_distribution(distribution(s, four_way()), {{0, 0.4}, {1, 0.3}});
  // Drawing 0 (surprise log2(1.75) = 0.807 bits) raises mu to 2 + 10 x 0.193 = 3.93: all four
  // stay; drawing 1 (1.222 bits) lowers it to -0.22: only the most likely stays.
  std::vector<float> z = four_way();
  const int32_t token = s.sample(z, {}, {});
  ASSERT_TRUE(token == 0 || token == 1);
  if (token == 0) {
    expect_distribution(distribution(s, four_way()), {{0, 0.4}, {1, 0.3}, {2, 0.2}, {3, 0.1}});
  } else {
    expect_distribution(distribution(s, four_way()), {{0, 1.0}});
  }
  // The post-sampling view is the draw's own (mu before it moved).
  std::vector<TokenLogprob> top(8);
  float logprob = 0;
  EXPECT_EQ(s.post_sampling_top(z, token, top, logprob), 2u);
}

TEST(LlamaCppSamplers, MirostatOneTruncatesAtTheZipfEstimate) {
  // A Zipf distribution p_i ~ 1 / (i + 1)^1.3 over 1000 tokens: the estimate s_hat is 1.3
  // exactly, and k = (eps 2^mu / (1 - N^-eps))^(1 / s_hat) with eps = 0.3.
  constexpr int32_t kVocab = 1000;
  constexpr double kS = 1.3;
  std::vector<float> z(kVocab);
  for (int32_t i = 0; i < kVocab; ++i)
    z[static_cast<size_t>(i)] = static_cast<float>(-kS * std::log(i + 1.0));
  for (const float tau : {2.0f, 3.0f, 4.0f}) {
    SamplingParams p = plain();
    p.mirostat = 1;
    p.mirostat_tau = tau;
    const double mu = 2.0 * tau;
    const double k =
        std::pow(0.3 * std::pow(2.0, mu) / (1 - std::pow(double(kVocab), -0.3)), 1 / kS);
    const std::vector<float> probs = distribution(p, z);
    const auto kept = std::count_if(probs.begin(), probs.end(), [](float v) { return v > 0; });
    EXPECT_EQ(kept, static_cast<int64_t>(k)) << "tau " << tau;
    EXPECT_GT(probs[0], 0);
    EXPECT_GT(probs[static_cast<size_t>(kept - 1)], 0);  // the most likely ones
  }
}

TEST(LlamaCppSamplers, TheseSamplersTakeLlamaCppsOrder) {
  // vLLM's order takes min-p after the temperature; llama.cpp's before it. With typical-p at
  // 1 (off) the request is vLLM-ordered; with top-n-sigma at a harmless 100 it is llama.cpp's.
  SamplingParams p = plain(4.0f);
  p.min_p = 0.3f;  // before the temperature: 0.4, 0.3 and 0.2 (>= 0.12) stay; after: all four
  expect_distribution(distribution(p, four_way()), {{0, std::pow(0.4, 0.25)},
                                                    {1, std::pow(0.3, 0.25)},
                                                    {2, std::pow(0.2, 0.25)},
                                                    {3, std::pow(0.1, 0.25)}});
  p.top_n_sigma = 100.0f;
  expect_distribution(
      distribution(p, four_way()),
      {{0, std::pow(0.4, 0.25)}, {1, std::pow(0.3, 0.25)}, {2, std::pow(0.2, 0.25)}});
}

TEST(LlamaCppSamplers, InvalidValuesNameTheParameter) {
  const auto message = [](auto change) {
    SamplingParams p;
    change(p);
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([](SamplingParams& p) { p.typical_p = 0; }).find("typical_p"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.xtc_probability = 1.5f; }).find("xtc_probability"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.mirostat = 3; }).find("mirostat"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.dry_base = 0.5f; }).find("dry_base"),
            std::string::npos);
  EXPECT_NE(
      message([](SamplingParams& p) { p.dry_penalty_last_n = -2; }).find("dry_penalty_last_n"),
      std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.dynatemp_range = -1; }).find("dynatemp_range"),
            std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.top_n_sigma = NAN; }).find("top_n_sigma"),
            std::string::npos);
  EXPECT_EQ(message([](SamplingParams&) {}), "");
}

// DRY: token ids stand for letters here (a = 0, b = 1, ...).
std::vector<float> dry_penalties(const SamplingParams& p,
                                 std::shared_ptr<const DryBreakers> breakers,
                                 const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& output, int32_t n_vocab = 8) {
  DryPenalty dry(p, std::move(breakers), n_vocab);
  std::vector<float> logits(static_cast<size_t>(n_vocab), 0.0f);
  dry.apply(prompt, output, logits);
  for (float& v : logits) v = -v;
  return logits;
}

SamplingParams dry_params(int32_t allowed = 2) {
  SamplingParams p = plain();
  p.dry_multiplier = 1.0f;
  p.dry_base = 2.0f;
  p.dry_allowed_length = allowed;
  p.dry_penalty_last_n = -1;
  return p;
}

TEST(Dry, PenalisesTheTokensThatWouldExtendARepeat) {
  // "a b c c b c y a b c": "a b c" was followed by c (a repeat of 3 would become 4: 2^1),
  // "b c" by y (2 would become 3: 2^0); "c" by c and b, shorter than allowed.
  const std::vector<int32_t> text = {0, 1, 2, 2, 1, 2, 6, 0, 1, 2};
  const std::vector<float> penalty = dry_penalties(dry_params(), nullptr, text, {});
  const std::vector<float> want = {0, 0, 2, 0, 0, 0, 1, 0};
  EXPECT_EQ(penalty, want);
  // The same text split between prompt and output, and a window of the last 6 tokens only
  // ("b c y a b c": only y).
  EXPECT_EQ(dry_penalties(dry_params(), nullptr, {0, 1, 2, 2}, {1, 2, 6, 0, 1, 2}), want);
  SamplingParams last6 = dry_params();
  last6.dry_penalty_last_n = 6;
  EXPECT_EQ(dry_penalties(last6, nullptr, text, {}), (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 0}));
  // Through the sampler: the logits it leaves hold the penalties.
  SamplingParams p = dry_params();
  p.temperature = 0;
  Sampler s(p, 8);
  std::vector<float> logits(8, 0.0f);
  logits[2] = 1.5f;  // c would win without DRY
  EXPECT_NE(s.sample(logits, text, {}), 2);
  EXPECT_FLOAT_EQ(logits[2], -0.5f);
  EXPECT_FLOAT_EQ(logits[6], -1.0f);
}

TEST(Dry, RepeatsDoNotReachBackOverABreaker) {
  // "a b c d a b c": d would extend "a b c" (3: a penalty of 2).
  const std::vector<int32_t> text = {0, 1, 2, 3, 0, 1, 2};
  EXPECT_EQ(dry_penalties(dry_params(), nullptr, text, {})[3], 2.0f);
  // b alone breaks: the repeat reaches back one token only, under the allowed length.
  EXPECT_EQ(dry_penalties(dry_params(), DryBreakers::from_tokens({{1}}), text, {})[3], 0.0f);
  // "b c" breaks (head b, tail c): the same. "b d" does not occur: no effect.
  EXPECT_EQ(dry_penalties(dry_params(), DryBreakers::from_tokens({{1, 2}}), text, {})[3], 0.0f);
  EXPECT_EQ(dry_penalties(dry_params(), DryBreakers::from_tokens({{1, 3}}), text, {})[3], 2.0f);
  // A breaker token is never penalised itself: "a b c d a b c d a b c" would penalise d for a
  // repeat of 7 without breakers; with d a breaker, not at all.
  const std::vector<int32_t> twice = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2};
  EXPECT_EQ(dry_penalties(dry_params(), nullptr, twice, {})[3], 32.0f);  // a 7-repeat: 2^5
  EXPECT_EQ(dry_penalties(dry_params(), DryBreakers::from_tokens({{3}}), twice, {})[3], 0.0f);
}

TEST(Dry, LongRepeatsKeepTheirPenaltyFinite) {
  const std::vector<int32_t> same(300, 4);
  const std::vector<float> penalty = dry_penalties(dry_params(), nullptr, same, {});
  EXPECT_TRUE(std::isfinite(penalty[4]));
  EXPECT_FLOAT_EQ(penalty[4], std::ldexp(1.0f, 127));  // 2^(299 - 2) cut to 2^127
}

// Brute force: for each earlier position j, the longest run ending at j that equals the text's
// end (runs end at most at the second-last token); the token after j extends it.
std::vector<float> dry_reference(const std::vector<int32_t>& text, int32_t allowed,
                                 int32_t n_vocab) {
  const auto n = static_cast<int32_t>(text.size());
  std::vector<int32_t> longest(static_cast<size_t>(n_vocab), -1);
  for (int32_t j = 0; j + 1 < n; ++j) {
    int32_t len = 0;
    while (len <= j && text[static_cast<size_t>(j - len)] == text[static_cast<size_t>(n - 1 - len)])
      ++len;
    if (len < allowed) continue;
    int32_t& l = longest[static_cast<size_t>(text[static_cast<size_t>(j + 1)])];
    l = std::max(l, len);
  }
  std::vector<float> out(static_cast<size_t>(n_vocab), 0.0f);
  for (int32_t t = 0; t < n_vocab; ++t)
    if (longest[static_cast<size_t>(t)] >= 0)
      out[static_cast<size_t>(t)] =
          std::pow(2.0f, float(longest[static_cast<size_t>(t)] - allowed));
  return out;
}

TEST(Dry, MatchesBruteForceOnRandomTexts) {
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    const int32_t alphabet = 2 + round % 4;
    std::vector<int32_t> text(static_cast<size_t>(3 + round % 40));
    for (int32_t& t : text) t = static_cast<int32_t>(rng() % alphabet);
    const int32_t allowed = round % 3;
    EXPECT_EQ(dry_penalties(dry_params(allowed), nullptr, text, {}),
              dry_reference(text, allowed, 8))
        << "round " << round;
  }
}

}  // namespace
}  // namespace inferd::sampling
