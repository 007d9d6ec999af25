// Speculative sampling is exact: tokens kept by speculative_draw, with drafts drawn from a
// distribution q unlike the target p, occur with p's frequencies (Pearson's chi-square over
// 20,000 draws, p-value > 0.01 in at least 4 of 5 replications), for plain, truncated and greedy
// targets and for one-hot drafts; the same test rejects a verifier that keeps every draft.
// Sampler::distribution is what sample() draws from.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "sampling/speculative_sampling.h"
#include "util/error.h"

namespace inferd::sampling {
namespace {

constexpr int kDraws = 20000;

// Upper regularized incomplete gamma Q(a, x): series below a + 1, continued fraction above.
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > 1e-15 * std::abs(sum); ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  // Lentz's method for the continued fraction of Q.
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefix) * h;
}

// Pearson's test of observed counts against probabilities `p`: the p-value. A token with
// p = 0 that was drawn makes it 0.
double chi_square_p_value(const std::vector<int>& counts, const std::vector<float>& p) {
  double stat = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] > 0) return 0.0;
      continue;
    }
    const double expected = double(p[i]) * kDraws;
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++cells;
  }
  if (cells < 2) return 1.0;
  return gamma_q((cells - 1) / 2.0, stat / 2.0);
}

std::vector<float> random_logits(int n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

SamplingParams params(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 7;
  return p;
}

std::vector<float> distribution_of(const SamplingParams& sp, std::vector<float> logits) {
  Sampler s(sp, static_cast<int32_t>(logits.size()));
  std::vector<float> probs(logits.size());
  s.distribution(logits, {}, {}, probs);
  return probs;
}

int32_t draw_from(const std::vector<float>& q, Rng& rng) {
  double target = rng.uniform(), last = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] > 0) last = double(i);
    target -= q[i];
    if (target < 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

// Replications of a 20,000-draw experiment (seeds 0..4) whose p-value is above 0.01: an exact
// sampler has each below it with probability 1%, so "at least 4 of 5" fails by chance with
// probability about 1e-3, while a biased one fails all of them.
template <typename Counts>
int replications_passing(const std::vector<float>& p, Counts counts_for_seed) {
  int passing = 0;
  for (uint64_t seed = 0; seed < 5; ++seed)
    passing += chi_square_p_value(counts_for_seed(seed), p) > 0.01;
  return passing;
}

// Counts of the tokens kept when drafts come from q and are verified against p.
std::vector<int> verified_counts(const std::vector<float>& p, const std::vector<float>& q,
                                 bool one_hot_drafts, uint64_t seed,
                                 bool keep_every_draft = false) {
  Rng rng(seed);
  std::vector<int> counts(p.size(), 0);
  std::vector<float> one_hot(p.size());
  for (int i = 0; i < kDraws; ++i) {
    const int32_t draft = draw_from(q, rng);
    int32_t token = draft;
    if (!keep_every_draft) {
      if (one_hot_drafts) {  // the drafter proposed `draft` without a distribution
        std::fill(one_hot.begin(), one_hot.end(), 0.0f);
        one_hot[static_cast<size_t>(draft)] = 1.0f;
        token = speculative_draw(p, one_hot, draft, rng).token;
      } else {
        token = speculative_draw(p, q, draft, rng).token;
      }
    }
    counts[static_cast<size_t>(token)] += 1;
  }
  return counts;
}

struct Case {
  const char* name;
  SamplingParams target;
};

TEST(SpeculativeSampling, KeptTokensFollowTheTargetDistribution) {
  const int n_vocab = 12;
  const std::vector<Case> cases = {
      {"plain", params(1.0f, 0, 1.0f, 0.0f)},
      {"temperature 0.7, top-k 6", params(0.7f, 6, 1.0f, 0.0f)},
      {"top-p 0.9, min-p 0.02", params(1.0f, 0, 0.9f, 0.02f)},
      {"greedy", params(0.0f, 0, 1.0f, 0.0f)},
  };
  for (const Case& c : cases) {
    const std::vector<float> p = distribution_of(c.target, random_logits(n_vocab, 1, 1.0f));
    // A draft that disagrees with the target: other logits, no truncation.
    const std::vector<float> q =
        distribution_of(params(1.0f, 0, 1.0f, 0.0f), random_logits(n_vocab, 2, 1.5f));
    for (const bool one_hot : {false, true}) {
      const int passing = replications_passing(
          p, [&](uint64_t seed) { return verified_counts(p, q, one_hot, seed); });
      EXPECT_GE(passing, 4) << c.name << (one_hot ? ", one-hot drafts" : ", drafts with q");
    }
  }
}

TEST(SpeculativeSampling, TheTestRejectsAVerifierThatKeepsEveryDraft) {
  const std::vector<float> p =
      distribution_of(params(1.0f, 0, 1.0f, 0.0f), random_logits(12, 1, 1.0f));
  const std::vector<float> q =
      distribution_of(params(1.0f, 0, 1.0f, 0.0f), random_logits(12, 2, 1.5f));
  EXPECT_EQ(replications_passing(
                p, [&](uint64_t seed) { return verified_counts(p, q, false, seed, true); }),
            0);
  EXPECT_LT(chi_square_p_value(verified_counts(p, q, false, 0, true), p), 1e-6);
}

TEST(SpeculativeSampling, AcceptsWithProbabilityMinOfOneAndPOverQ) {
  // p = (0.5, 0.5), q = (0.8, 0.2): draft 0 is kept with probability 0.625, draft 1 always.
  const std::vector<float> p{0.5f, 0.5f}, q{0.8f, 0.2f};
  Rng rng(3);
  int kept = 0;
  for (int i = 0; i < kDraws; ++i) kept += speculative_draw(p, q, 0, rng).accepted;
  EXPECT_NEAR(kept / double(kDraws), 0.625, 0.015);
  for (int i = 0; i < 100; ++i) {
    const SpeculativeDraw d = speculative_draw(p, q, 1, rng);
    EXPECT_TRUE(d.accepted);
    EXPECT_EQ(d.token, 1);
  }
  // A rejected draft 0 is replaced by the residual max(p - q, 0) = (0, 0.3): always token 1.
  for (int i = 0; i < 200; ++i) {
    const SpeculativeDraw d = speculative_draw(p, q, 0, rng);
    if (!d.accepted) {
      EXPECT_EQ(d.token, 1);
    }
  }
  EXPECT_THROW(speculative_draw(p, q, 2, rng), Error);
}

TEST(Sampler, DistributionIsWhatSampleDrawsFrom) {
  const std::vector<float> logits = random_logits(16, 4, 1.0f);
  for (const SamplingParams& sp :
       {params(1.0f, 0, 1.0f, 0.0f), params(0.6f, 5, 0.95f, 0.05f), params(1.3f, 0, 0.8f, 0.0f)}) {
    const std::vector<float> p = distribution_of(sp, logits);
    double total = 0;
    for (float v : p) total += v;
    EXPECT_NEAR(total, 1.0, 1e-5);
    const int passing = replications_passing(p, [&](uint64_t seed) {
      SamplingParams seeded = sp;
      seeded.seed = seed;
      Sampler s(seeded, 16);
      std::vector<int> counts(16, 0);
      for (int i = 0; i < kDraws; ++i) {
        std::vector<float> copy = logits;
        counts[static_cast<size_t>(s.sample(copy, {}, {}))] += 1;
      }
      return counts;
    });
    EXPECT_GE(passing, 4) << sp.temperature;
  }
  // Greedy: one-hot at the argmax.
  const std::vector<float> g = distribution_of(params(0.0f, 0, 1.0f, 0.0f), logits);
  Sampler s(params(0.0f, 0, 1.0f, 0.0f), 16);
  std::vector<float> copy = logits;
  EXPECT_EQ(g[static_cast<size_t>(s.sample(copy, {}, {}))], 1.0f);
}

TEST(ChiSquare, PValuesOfKnownStatistics) {
  // Q(k/2, x/2) for chi-square with k degrees of freedom: known quantiles.
  EXPECT_NEAR(gamma_q(0.5, 3.841 / 2), 0.05, 1e-3);   // k = 1
  EXPECT_NEAR(gamma_q(5.0, 23.209 / 2), 0.01, 1e-3);  // k = 10
  EXPECT_NEAR(gamma_q(2.0, 1.064 / 2), 0.90, 1e-3);   // k = 4
}

}  // namespace
}  // namespace inferd::sampling
