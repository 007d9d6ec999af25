// The 1-3-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M): where each field
// of a block lives, on hand-made blocks (one value's codebook index, sign and scale moved at a
// time), and every ISA's row dot against the reference bit for bit on random blocks. The
// codebooks themselves and dequantization on every bit pattern are checked against gguf-py by
// tests/golden/quant/check-dequant; the dots against float math and matmul's row path by
// kernels_quant_k_test.cpp.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/ref/quant_iq_ref.h"
#include "random_data.h"
#include "tensor/half.h"
#include "tensor/iq_grids.h"
#include "tensor/quant_blocks.h"
#include "util/thread_pool.h"

namespace inferd::kernels {
namespace {

using testing::random_blocks;
using testing::random_floats;

// Coordinate j of a codebook point.
int coordinate(uint64_t point, int j) {
  return static_cast<uint8_t>(point >> (8 * j));
}

TEST(KernelsQuantIq, SignsHaveEvenParity) {
  EXPECT_EQ(iq_signs_of(0), 0);
  EXPECT_EQ(iq_signs_of(1), 0x81);
  EXPECT_EQ(iq_signs_of(3), 0x03);
  EXPECT_EQ(iq_signs_of(127), 0xFF);
  EXPECT_EQ(iq_signs_of(0x80 | 5), 0x05);  // only 7 bits are read
}

TEST(KernelsQuantIq, Iq2XxsIndexSignsAndScaleOfOneGroup) {
  BlockIQ2_XXS b{};
  b.d = fp32_to_fp16(1.0f);
  // 32 values 3: group 2 takes point 7, its 7 sign bits 0b0000001 (coordinate 0 negative, and
  // the parity bit makes coordinate 7 negative), scale field 5.
  const uint32_t indices = 7u << 16, fields = (1u << 14) | (5u << 28);
  std::memcpy(&b.qs[4 * 3], &indices, 4);
  std::memcpy(&b.qs[4 * 3 + 2], &fields, 4);
  float out[256];
  ref::dequantize_row_iq2_xxs(&b, out, 256);
  const float db = 1.0f * (0.5f + 5) * 0.25f, db0 = 1.0f * 0.5f * 0.25f;
  const int base = 32 * 3 + 8 * 2;
  EXPECT_EQ(out[base], -db * coordinate(kIq2XxsGrid[7], 0));
  EXPECT_EQ(out[base + 7], -db * coordinate(kIq2XxsGrid[7], 7));
  EXPECT_EQ(out[base + 3], db * coordinate(kIq2XxsGrid[7], 3));
  EXPECT_EQ(out[32 * 3], db * coordinate(kIq2XxsGrid[0], 0));  // group 0 of the same 32
  EXPECT_EQ(out[0], db0 * 8);
}

TEST(KernelsQuantIq, Iq2XsNineBitIndexAndNibbleScales) {
  BlockIQ2_XS b{};
  b.d = fp32_to_fp16(2.0f);
  b.qs[4 * 6 + 3] = static_cast<uint16_t>(300 | (2u << 9));  // group 3: point 300, sign bit 1
  b.scales[6] = 0x90;  // groups 0-1 scale 0, groups 2-3 scale 9
  float out[256];
  ref::dequantize_row_iq2_xs(&b, out, 256);
  const float db = 2.0f * (0.5f + 9) * 0.25f;
  const int base = 32 * 6 + 24;
  EXPECT_EQ(out[base + 1], -db * coordinate(kIq2XsGrid[300], 1));
  EXPECT_EQ(out[base + 7], -db * coordinate(kIq2XsGrid[300], 7));  // parity
  EXPECT_EQ(out[base + 2], db * coordinate(kIq2XsGrid[300], 2));
  EXPECT_EQ(out[32 * 6], 2.0f * 0.5f * 0.25f * 8);
}

TEST(KernelsQuantIq, Iq2STenBitIndexFromQhAndPlainSigns) {
  BlockIQ2_S b{};
  b.d = fp32_to_fp16(1.0f);
  b.qs[4 * 1 + 2] = 0x34;
  b.qh[1] = 2u << 4;          // group 2's top bits: 2, so point 0x234
  b.signs[4 * 1 + 2] = 0x81;  // all 8 bits as stored: coordinates 0 and 7 negative
  b.scales[1] = 0x30;
  float out[256];
  ref::dequantize_row_iq2_s(&b, out, 256);
  const float db = (0.5f + 3) * 0.25f;
  const int base = 32 + 16;
  EXPECT_EQ(out[base], -db * coordinate(kIq2SGrid[0x234], 0));
  EXPECT_EQ(out[base + 7], -db * coordinate(kIq2SGrid[0x234], 7));
  EXPECT_EQ(out[base + 4], db * coordinate(kIq2SGrid[0x234], 4));
}

TEST(KernelsQuantIq, Iq3XxsTwoHalfPointsAGroup) {
  BlockIQ3_XXS b{};
  b.d = fp32_to_fp16(1.0f);
  b.qs[8 * 5 + 2] = 17;  // group 1 of 32 values 5: values 0-3 point 17, 4-7 point 200
  b.qs[8 * 5 + 3] = 200;
  const uint32_t fields = (0x10u << 7) | (11u << 28);  // group 1's bit 4: coordinate 4 negative
  std::memcpy(&b.qs[64 + 4 * 5], &fields, 4);
  float out[256];
  ref::dequantize_row_iq3_xxs(&b, out, 256);
  const float db = (0.5f + 11) * 0.5f;
  const int base = 32 * 5 + 8;
  const auto half = [](uint32_t p, int j) { return static_cast<uint8_t>(p >> (8 * j)); };
  EXPECT_EQ(out[base + 2], db * half(kIq3XxsGrid[17], 2));
  EXPECT_EQ(out[base + 4], -db * half(kIq3XxsGrid[200], 0));
  EXPECT_EQ(out[base + 7], -db * half(kIq3XxsGrid[200], 3));  // parity of one bit
}

TEST(KernelsQuantIq, Iq3SNinthIndexBitsAndOddScales) {
  BlockIQ3_S b{};
  b.d = fp32_to_fp16(0.5f);
  b.qs[8 * 3 + 5] = 9;  // group 2, values 4-7 (half 1): index 9 | bit 5 of qh[3] << 8
  b.qh[3] = 1u << 5;
  b.signs[4 * 3 + 2] = 0x20;  // coordinate 5 negative
  b.scales[1] = 0x70;         // 32 values 3 (odd): the high nibble, 7
  float out[256];
  ref::dequantize_row_iq3_s(&b, out, 256);
  const float db = 0.5f * (1 + 2 * 7);
  const auto half = [](uint32_t p, int j) { return static_cast<uint8_t>(p >> (8 * j)); };
  const int base = 32 * 3 + 16 + 4;
  EXPECT_EQ(out[base + 1], -db * half(kIq3SGrid[256 + 9], 1));
  EXPECT_EQ(out[base], db * half(kIq3SGrid[256 + 9], 0));
  EXPECT_EQ(out[32 * 2], 0.5f * 1 * half(kIq3SGrid[0], 0));  // 32 values 2: the low nibble, 0
}

TEST(KernelsQuantIq, Iq1SElevenBitIndexScaleAndShift) {
  BlockIQ1_S b{};
  b.d = fp32_to_fp16(1.0f);
  b.qs[4 * 2 + 1] = 0x55;
  b.qh[2] = static_cast<uint16_t>((5u << 3) | (3u << 12) | 0x8000u);  // group 1: 0x555, s 3, -
  float out[256];
  ref::dequantize_row_iq1_s(&b, out, 256);
  const float dl = 1.0f * (2 * 3 + 1);
  const auto c = [](int index, int j) { return static_cast<int8_t>(kIq1SGrid[index] >> (8 * j)); };
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(out[64 + 8 + j], dl * (static_cast<float>(c(0x555, j)) - kIq1Delta)) << j;
    EXPECT_EQ(out[64 + j], dl * (static_cast<float>(c(0, j)) - kIq1Delta)) << j;  // same shift
  }
  EXPECT_EQ(out[0], 1.0f * (static_cast<float>(c(0, 0)) + kIq1Delta));
}

TEST(KernelsQuantIq, Iq1MSplitScaleWordsAndGroupShifts) {
  BlockIQ1_M b{};
  // d = 2.0 (fp16 0x4000): nibble k in the top nibble of word k.
  uint16_t w[4] = {0, 0, 0, 0x4000};
  // 32 values 3 (word 1, upper 6 bits of its 12): groups 0-1 scale 2, groups 2-3 scale 5.
  w[1] |= static_cast<uint16_t>((2u | (5u << 3)) << 6);
  std::memcpy(b.scales, w, 8);
  b.qs[4 * 3 + 3] = 0x12;
  b.qh[2 * 3 + 1] = 0x3 << 4 | 0x80;  // group 3: top bits 3 (point 0x312), shift negative
  float out[256];
  ref::dequantize_row_iq1_m(&b, out, 256);
  const auto c = [](int index, int j) { return static_cast<int8_t>(kIq1SGrid[index] >> (8 * j)); };
  const float dl3 = 2.0f * (2 * 5 + 1), dl0 = 2.0f * (2 * 2 + 1);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(out[96 + 24 + j], dl3 * (static_cast<float>(c(0x312, j)) - kIq1Delta)) << j;
    EXPECT_EQ(out[96 + 16 + j], dl3 * (static_cast<float>(c(0, j)) + kIq1Delta)) << j;
    EXPECT_EQ(out[96 + j], dl0 * (static_cast<float>(c(0, j)) + kIq1Delta)) << j;
  }
  EXPECT_EQ(out[0], 2.0f * (static_cast<float>(c(0, 0)) + kIq1Delta));
}

// Every table's Q8_K quantizer gives the reference's bytes, on the edge cases of its rule: an
// all-zero block, the largest magnitude twice with both signs (the first one sets the sign of
// d), values that round to a half, and the largest value exactly at the end of a block.
TEST(KernelsQuantIq, EveryQ8KQuantizerGivesTheReferenceBytes) {
  std::vector<float> x(4 * kQKK);
  const auto noise = random_floats(4 * kQKK, 91, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = noise[i];
  for (int j = 0; j < kQKK; ++j) x[static_cast<size_t>(j)] = 0;  // block 0: zeros
  x[kQKK + 40] = -5.0f;                                          // block 1: -5 first, then +5
  x[kQKK + 200] = 5.0f;
  for (int j = 0; j < kQKK; ++j) x[static_cast<size_t>(2 * kQKK + j)] = 0.5f * (j % 7 - 3);
  x[2 * kQKK + 9] = 127.0f;  // block 2: halves of the step, 127 the largest
  x[4 * kQKK - 1] = 9.0f;    // block 3: the largest value last
  const WeightKernels& r = *reference_kernels().for_weight(DType::IQ2_XXS);
  std::vector<BlockQ8_K> want(4), got(4);
  r.quantize_activation(x.data(), want.data(), 4 * kQKK);
  EXPECT_GT(want[1].d, 0.0f);  // -5 comes first: iscale = -127 / -5 > 0, so d > 0
  for (const KernelTable* table : available_kernels()) {
    for (DType type : {DType::Q4_K, DType::IQ2_XXS, DType::IQ1_M}) {
      std::memset(got.data(), 0x55, got.size() * sizeof(BlockQ8_K));
      table->for_weight(type)->quantize_activation(x.data(), got.data(), 4 * kQKK);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(BlockQ8_K)), 0)
          << table->isa << " " << dtype_name(type);
    }
  }
}

// Every table's row dot gives the reference's bits: the integer sums are exact and the float
// steps the same.
TEST(KernelsQuantIq, EveryTableGivesTheReferenceDotBitForBit) {
  const DType types[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                         DType::IQ3_S,   DType::IQ1_S,  DType::IQ1_M};
  const auto& ref = reference_kernels();
  for (const KernelTable* table : available_kernels()) {
    for (DType type : types) {
      const WeightKernels& k = *table->for_weight(type);
      const WeightKernels& r = *ref.for_weight(type);
      for (int64_t blocks : {1, 2, 3, 7, 24}) {
        const int64_t n = blocks * kQKK;
        const auto seed = static_cast<uint32_t>(blocks * 977 + static_cast<int>(type));
        const auto w = random_blocks(type, n, seed);
        const auto x = random_floats(n, seed + 3, 2.0f);
        std::vector<BlockQ8_K> a(static_cast<size_t>(blocks));
        r.quantize_activation(x.data(), a.data(), n);
        const float want = r.dot(n, w.data(), a.data()), got = k.dot(n, w.data(), a.data());
        EXPECT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
            << table->isa << " " << dtype_name(type) << " n=" << n << ": " << got << " vs " << want;
        EXPECT_NE(want, 0.0f);
      }
    }
  }
}

// Prompts go through the tiles (kernels/iq_tiles.h): super-blocks decoded once for all the
// tokens. Every output equals the reference row dot of its row and token, bit for bit, on every
// table, with row counts that leave a part-filled group of 16 and token counts that leave a
// part-filled group of 8.
TEST(KernelsQuantIq, PromptTilesGiveTheRowDotsBitForBit) {
  const DType types[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                         DType::IQ3_S,   DType::IQ1_S,  DType::IQ1_M};
  ThreadPool pool(2);
  ActivationScratch scratch;
  for (DType type : types) {
    const int64_t cols = 3 * kQKK;
    const size_t row_bytes = static_cast<size_t>(*inferd::row_bytes(type, cols));
    const auto& r = *reference_kernels().for_weight(type);
    for (int64_t rows : {7, 16, 33}) {
      const auto seed = static_cast<uint32_t>(rows * 71 + static_cast<int>(type));
      const auto bytes = random_blocks(type, rows * cols, seed);
      const WeightMatrix w{type, rows, cols, row_bytes, bytes.data(), nullptr};
      for (int64_t tokens : {4, 9, 17}) {
        const auto x = random_floats(tokens * cols, seed + static_cast<uint32_t>(tokens), 2.0f);
        scratch.reserve(tokens, cols);
        std::vector<float> want(static_cast<size_t>(tokens * rows));
        std::vector<BlockQ8_K> act(cols / kQKK);
        for (int64_t t = 0; t < tokens; ++t) {
          r.quantize_activation(&x[static_cast<size_t>(t * cols)], act.data(), cols);
          for (int64_t row = 0; row < rows; ++row)
            want[static_cast<size_t>(t * rows + row)] = r.dot(cols, w.row(row), act.data());
        }
        for (const KernelTable* table : available_kernels()) {
          std::vector<float> got(want.size(), -1.0f);
          matmul(w, x.data(), tokens, got.data(), scratch, pool, *table);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
              << table->isa << " " << dtype_name(type) << " rows=" << rows << " tokens=" << tokens;
        }
      }
    }
  }
}

}  // namespace
}  // namespace inferd::kernels
