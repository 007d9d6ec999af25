// fp16 / bf16 conversions against the compiler's own correctly rounded _Float16 and exact
// bf16 arithmetic, exhaustively where the domain is small.
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "tensor/half.h"

namespace inferd {
namespace {

TEST(Half, Fp16ToFp32IsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 reference = std::bit_cast<_Float16>(static_cast<uint16_t>(h));
    float expected = static_cast<float>(reference);
    float actual = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << h;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << h;
    }
  }
}

TEST(Half, Fp32ToFp16RoundsLikeTheCompiler) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  auto check = [&](float f) {
    if (std::isnan(f)) return;
    uint16_t expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(fp32_to_fp16(f), expected) << f << " bits " << std::bit_cast<uint32_t>(f);
    ++checked;
  };
  for (int i = 0; i < 2000000; ++i) check(std::bit_cast<float>(bits(rng)));
  // Every half, and the midpoints between neighbours (the round-half-to-even cases).
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    float lo = fp16_to_fp32(static_cast<uint16_t>(h));
    float hi = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    check(lo);
    check(-lo);
    check((lo + hi) / 2);
    check(-(lo + hi) / 2);
  }
  check(65504.0f);
  check(65520.0f);
  check(1e-8f);
  EXPECT_GT(checked, 2000000);
}

TEST(Half, Bf16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(fp32_to_bf16(f), h);
    }
  }
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.0f + 0x1.8p-8f)), 1.0f + 0x1.0p-7f);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace inferd
