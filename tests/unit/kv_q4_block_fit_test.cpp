// The KV cache's least-squares Q4_0 blocks (kv/q4_block_fit.h): ordinary Q4_0 blocks (the
// reference dequantizer reads them), each no worse than llama.cpp's rule on the same values, and
// better in total on the normal-like values a rotated cache holds.
#include "kv/q4_block_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/quant_ref.h"
#include "tensor/half.h"

namespace inferd::kv {
namespace {

double squared_error(const std::vector<float>& x, const std::vector<float>& y, size_t begin,
                     size_t n) {
  double e = 0;
  for (size_t i = begin; i < begin + n; ++i) e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  return e;
}

std::vector<float> round_trip(const std::vector<float>& x, bool least_squares) {
  std::vector<BlockQ4_0> blocks(x.size() / 32);
  if (least_squares) {
    quantize_q4_0_least_squares(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  } else {
    kernels::ref::quantize_row_q4_0(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  }
  std::vector<float> y(x.size());
  kernels::ref::dequantize_row_q4_0(blocks.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

TEST(KvQ4BlockFit, NoBlockWorseThanLlamaCppsRuleAndTheTotalClearlyBetter) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> x(32 * 4000);
  for (float& v : x) v = normal(rng);
  // Some blocks with one large value (an outlier the rotation did not spread) and some tiny.
  for (size_t b = 0; b < 400; ++b) x[(b * 10) * 32 + b % 32] *= 20.0f;  // blocks 0, 10, 20, ...
  for (size_t i = 0; i < 32 * 50; ++i) x[32 * 3000 + i] *= 1e-3f;
  const std::vector<float> fit = round_trip(x, true);
  const std::vector<float> rule = round_trip(x, false);
  double fit_total = 0, rule_total = 0;  // over the blocks of normal values
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const double e_fit = squared_error(x, fit, b * 32, 32);
    const double e_rule = squared_error(x, rule, b * 32, 32);
    // (d is rounded to fp16 in both: up to 2^-11 of a step either way)
    EXPECT_LE(e_fit, e_rule * 1.01 + 1e-12) << "block " << b;
    if (b % 10 == 0 || (b >= 3000 && b < 3050)) continue;
    fit_total += e_fit;
    rule_total += e_rule;
  }
  // The header's figure is 11.2% lower on normal values.
  EXPECT_LT(fit_total, 0.92 * rule_total);
}

TEST(KvQ4BlockFit, ZerosAndTheLevelsThemselves) {
  std::vector<float> x(64, 0.0f);
  // A second block already on the grid of a step 0.25: it comes back exactly.
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.25f * static_cast<float>(i % 16 - 8);
  const std::vector<float> y = round_trip(x, true);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  for (int i = 32; i < 64; ++i) EXPECT_FLOAT_EQ(y[i], x[i]) << i;
}

}  // namespace
}  // namespace inferd::kv
