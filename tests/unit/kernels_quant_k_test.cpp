// The formats of downloaded GGUF files (Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS, the 1-3-bit
// i-quants) and the Q8_K activations: bit layouts on hand-made blocks, the reference dots against
// float math on the dequantized operands, and every ISA table against the reference on random
// blocks, through the row kernels and through matmul with odd row counts.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/ref/quant_k_ref.h"
#include "kernels/ref/quant_ref.h"
#include "random_data.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels {
namespace {

using testing::random_blocks;
using testing::random_floats;

const DType kTypes[] = {DType::Q5_0,    DType::Q5_1,    DType::IQ4_NL, DType::Q2_K,
                        DType::Q3_K,    DType::Q4_K,    DType::Q5_K,   DType::Q6_K,
                        DType::IQ4_XS,  DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                        DType::IQ3_XXS, DType::IQ3_S,   DType::IQ1_S,  DType::IQ1_M};

int64_t block_size(DType type) {
  return dtype_info(type).block_size;
}

size_t row_size(DType type, int64_t n) {
  return static_cast<size_t>(*row_bytes(type, n));
}

std::vector<float> dequantized(DType type, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  reference_kernels().for_weight(type)->dequantize(row.data(), out.data(), n);
  return out;
}

// The activation row as the floats the dot multiplies: d * q per block.
std::vector<float> activation_values(DType act, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (act == DType::Q8_K) {
    ref::dequantize_row_q8_k(row.data(), out.data(), n);
  } else if (act == DType::Q8_0) {
    ref::dequantize_row_q8_0(row.data(), out.data(), n);
  } else {  // Q8_1: d, s, then the same int8 values
    const auto* blocks = reinterpret_cast<const BlockQ8_1*>(row.data());
    for (int64_t i = 0; i < n; ++i) {
      const BlockQ8_1& b = blocks[i / kQK];
      out[static_cast<size_t>(i)] = fp16_to_fp32(b.d) * static_cast<float>(b.qs[i % kQK]);
    }
  }
  return out;
}

TEST(KernelsQuantK, TablesHaveEveryType) {
  for (const KernelTable* table : available_kernels()) {
    for (DType type : kTypes) {
      const WeightKernels* k = table->for_weight(type);
      ASSERT_NE(k, nullptr) << table->isa << " " << dtype_name(type);
      const DType want = type == DType::Q5_1                            ? DType::Q8_1
                         : type == DType::Q5_0 || type == DType::IQ4_NL ? DType::Q8_0
                                                                        : DType::Q8_K;
      EXPECT_EQ(k->activation_type, want) << dtype_name(type);
      EXPECT_NE(k->quantize_activation, nullptr);
      EXPECT_NE(k->dequantize, nullptr);
    }
    EXPECT_EQ(table->for_weight(DType::TQ1_0), nullptr);  // ternary: not implemented
    EXPECT_EQ(table->for_weight(DType::Q8_K), nullptr);  // an activation format only
  }
}

// Layouts, checked on blocks built by hand from the format descriptions (FACTS.md, ggml-common.h).
TEST(KernelsQuantK, Q5_0AndQ5_1TakeTheFifthBitFromQh) {
  BlockQ5_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint32_t qh = 0x80000001u;  // values 0 and 31
  std::memcpy(b.qh, &qh, 4);
  float out[32];
  ref::dequantize_row_q5_0(&b, out, 32);
  EXPECT_EQ(out[0], 0.5f * (0 + 16 - 16));
  EXPECT_EQ(out[1], 0.5f * (1 - 16));
  EXPECT_EQ(out[16], 0.5f * (15 - 16));
  EXPECT_EQ(out[31], 0.5f * (0 + 16 - 16));
  EXPECT_EQ(out[30], 0.5f * (1 - 16));

  BlockQ5_1 c{};
  c.d = fp32_to_fp16(0.25f);
  c.m = fp32_to_fp16(-1.0f);
  std::memcpy(c.qh, &qh, 4);
  c.qs[0] = 0x3F;  // value 0 = 15 | 16, value 16 = 3
  ref::dequantize_row_q5_1(&c, out, 32);
  EXPECT_EQ(out[0], 0.25f * 31 - 1.0f);
  EXPECT_EQ(out[16], 0.25f * 3 - 1.0f);
  EXPECT_EQ(out[31], 0.25f * 16 - 1.0f);
  EXPECT_EQ(out[5], -1.0f);
}

TEST(KernelsQuantK, Iq4NlUsesTheNonUniformGrid) {
  BlockIQ4_NL b{};
  b.d = fp32_to_fp16(2.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  ref::dequantize_row_iq4_nl(&b, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * kIq4Values[j]);
    EXPECT_EQ(out[16 + j], 2.0f * kIq4Values[15 - j]);
  }
}

TEST(KernelsQuantK, Q4_KSixBitScalesAndChunkedNibbles) {
  BlockQ4_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  // Scales and mins above 15 for s >= 4 so that their top 2 bits (stored apart) matter.
  for (int s = 0; s < 8; ++s) {
    const int scale = s < 4 ? 10 + s : 50 + s, min = s < 4 ? 20 + s : 40 + s;
    if (s < 4) {
      b.scales[s] = static_cast<uint8_t>(scale);
      b.scales[s + 4] = static_cast<uint8_t>(min);
    } else {
      b.scales[s + 4] = static_cast<uint8_t>((scale & 15) | ((min & 15) << 4));
      b.scales[s - 4] |= static_cast<uint8_t>((scale >> 4) << 6);
      b.scales[s] |= static_cast<uint8_t>((min >> 4) << 6);
    }
  }
  for (int c = 0; c < 4; ++c) b.qs[32 * c + 1] = static_cast<uint8_t>(c | ((c + 4) << 4));
  float out[256];
  ref::dequantize_row_q4_k(&b, out, 256);
  for (int c = 0; c < 4; ++c) {
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * c + half, scale = s < 4 ? 10 + s : 50 + s, min = s < 4 ? 20 + s : 40 + s;
      const int q = half == 0 ? c : c + 4;
      EXPECT_EQ(out[64 * c + 32 * half + 1], 1.0f * scale * q - 0.5f * min) << "sub-block " << s;
      EXPECT_EQ(out[64 * c + 32 * half], -0.5f * min) << "sub-block " << s;
    }
  }
}

TEST(KernelsQuantK, Q6_KInterleavesLowAndHighBits) {
  BlockQ6_K b{};
  b.d = fp32_to_fp16(1.0f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  // Value 128 + 64 + 33: half 1, r = 97: low nibble = high nibble of ql[64 + 33], high bits =
  // field 3 of qh[32 + 1].
  b.ql[64 + 33] = 0xA0;
  b.qh[32 + 1] = 0x80;  // field 3 = 2
  float out[256];
  ref::dequantize_row_q6_k(&b, out, 256);
  const int i = 128 + 97;
  EXPECT_EQ(out[i], static_cast<float>(i / 16 - 8) * ((0xA | (2 << 4)) - 32));
  EXPECT_EQ(out[128 + 33], static_cast<float>((128 + 33) / 16 - 8) * -32);  // low nibble 0
  EXPECT_EQ(out[0], -8.0f * -32);
}

TEST(KernelsQuantK, Q3_KSignedScalesAndHighMask) {
  BlockQ3_K b{};
  b.d = fp32_to_fp16(1.0f);
  // Sub-block 12 gets scale 45 - 32 = 13: its low nibble is the high nibble of scales[4], its
  // high 2 bits field 3 of scales[8]. The other scales stay 0 - 32.
  b.scales[4] = 0xD0;
  b.scales[8] = 0x80;
  // Value 200 (sub-block 12): 2 low bits in field 2 of qs[32 + 8], the third bit is bit 6 of
  // hmask[8] (set: no -4 offset).
  b.qs[32 + 8] = 0x30;
  b.hmask[8] = 1 << 6;
  float out[256];
  ref::dequantize_row_q3_k(&b, out, 256);
  EXPECT_EQ(out[200], 13.0f * 3);
  EXPECT_EQ(out[201], 13.0f * -4);
  EXPECT_EQ(out[0], -32.0f * -4);
  EXPECT_EQ(out[192], 13.0f * -4);   // the first value of sub-block 12
  EXPECT_EQ(out[191], -32.0f * -4);  // the last of sub-block 11
}

TEST(KernelsQuantK, Q2_KNibbleScalesAndTwoBitFields) {
  BlockQ2_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  b.scales[12] = 0x35;  // sub-block 12: scale 5, min 3
  b.qs[32 + 8] = 0x20;  // value 200 = half 1, field 2 of byte 8: q = 2
  float out[256];
  ref::dequantize_row_q2_k(&b, out, 256);
  EXPECT_EQ(out[200], 5.0f * 2 - 0.5f * 3);
  EXPECT_EQ(out[201], -0.5f * 3);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(KernelsQuantK, Q5_KHighBitsAndSplitScales) {
  BlockQ5_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.25f);
  // Sub-block 6: scale 33 = 0b10'0001 (low nibble of scales[10], top bits of scales[2]), min
  // 18 = 0b01'0010 (high nibble of scales[10], top bits of scales[6]).
  b.scales[10] = 0x21;
  b.scales[2] = 0x80;
  b.scales[6] = 0x40;
  b.qs[96 + 8] = 0x07;  // value 200 = chunk 3, low nibble of byte 8
  b.qh[8] = 1 << 6;     // its fifth bit: bit 200 / 32 of qh[200 % 32]
  float out[256];
  ref::dequantize_row_q5_k(&b, out, 256);
  EXPECT_EQ(out[200], 33.0f * 23 - 0.25f * 18);
  EXPECT_EQ(out[201], -0.25f * 18);
  EXPECT_EQ(out[64], 0.0f);  // sub-block 2: scale and min 0 (their top bits belong to 6)
}

TEST(KernelsQuantK, Iq4XsScalesFromLowAndHighFields) {
  BlockIQ4_XS b{};
  b.d = fp32_to_fp16(1.0f);
  // Sub-block 5: scale 50 - 32 = 18: low 4 bits in the high nibble of scales_l[2], high 2 bits
  // in field 5 of scales_h.
  b.scales_l[2] = 0x20;
  b.scales_h = 3 << 10;
  b.qs[16 * 5 + 4] = 0xF0;  // values 164 (low nibble 0) and 180 (high nibble 15)
  float out[256];
  ref::dequantize_row_iq4_xs(&b, out, 256);
  EXPECT_EQ(out[180], 18.0f * 113);
  EXPECT_EQ(out[164], 18.0f * -127);
  EXPECT_EQ(out[0], -32.0f * -127);
}

TEST(KernelsQuantK, Q8_KQuantizer) {
  const int64_t n = 3 * kQKK;
  auto x = random_floats(n, 5, 2.0f);
  for (int j = 0; j < kQKK; ++j) x[static_cast<size_t>(kQKK + j)] = 0;  // an all-zero block
  x[2 * kQKK + 77] = 9.5f;  // the largest magnitude of block 2, positive
  std::vector<BlockQ8_K> q(3);
  ref::quantize_row_q8_k(x.data(), q.data(), n);
  EXPECT_EQ(q[1].d, 0.0f);
  for (int j = 0; j < kQKK; ++j) EXPECT_EQ(q[1].qs[j], 0);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(q[1].bsums[k], 0);
  EXPECT_EQ(q[2].qs[77], -127);  // d is negative there: -9.5 / 127
  EXPECT_FLOAT_EQ(q[2].d, -9.5f / 127);
  for (int b = 0; b < 3; ++b) {
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q[static_cast<size_t>(b)].qs[16 * k + j];
      EXPECT_EQ(q[static_cast<size_t>(b)].bsums[k], sum);
    }
    for (int j = 0; j < kQKK; ++j) {
      const float back = q[static_cast<size_t>(b)].d * q[static_cast<size_t>(b)].qs[j];
      EXPECT_NEAR(back, x[static_cast<size_t>(b * kQKK + j)],
                  std::fabs(q[static_cast<size_t>(b)].d) * 0.5001f);
    }
  }
  std::vector<float> back(static_cast<size_t>(n));
  ref::dequantize_row_q8_k(q.data(), back.data(), n);
  EXPECT_EQ(back[2 * kQKK + 77], 9.5f);
}

// The dot of a weight row with an activation row equals the float dot of the two dequantized
// rows up to float rounding: the integer sums are exact, only the scaling rounds.
TEST(KernelsQuantK, DotIsTheFloatDotOfTheDequantizedRows) {
  const auto& ref = reference_kernels();
  for (DType type : kTypes) {
    const WeightKernels& k = *ref.for_weight(type);
    for (int64_t blocks : {1, 3, 7, 12}) {
      const int64_t n = blocks * block_size(type);
      const auto seed = static_cast<uint32_t>(blocks * 100 + static_cast<int>(type));
      auto w = random_blocks(type, n, seed);
      auto x = random_floats(n, seed + 1, 3.0f);
      std::vector<uint8_t> a(row_size(k.activation_type, n));
      k.quantize_activation(x.data(), a.data(), n);
      const auto wf = dequantized(type, w, n);
      const auto af = activation_values(k.activation_type, a, n);
      double want = 0, magnitude = 0;
      for (size_t i = 0; i < wf.size(); ++i) {
        want += double(wf[i]) * af[i];
        magnitude += std::fabs(double(wf[i]) * af[i]);
      }
      double tol = 1e-5 * magnitude + 1e-6;
      if (type == DType::Q5_1) {  // m * s: s = d_a * sum(q) was rounded to fp16
        const auto* wb = reinterpret_cast<const BlockQ5_1*>(w.data());
        const auto* ab = reinterpret_cast<const BlockQ8_1*>(a.data());
        for (int64_t b = 0; b < blocks; ++b)
          tol += 2e-3 * std::fabs(fp16_to_fp32(wb[b].m) * fp16_to_fp32(ab[b].s));
      }
      EXPECT_NEAR(k.dot(n, w.data(), a.data()), want, tol) << dtype_name(type) << " n=" << n;
      // And close to the float dot with unquantized activations (the format is not broken).
      double exact = 0, norm_w = 0, norm_x = 0;
      for (size_t i = 0; i < wf.size(); ++i) {
        exact += double(wf[i]) * x[i];
        norm_w += double(wf[i]) * wf[i];
        norm_x += double(x[i]) * x[i];
      }
      EXPECT_NEAR(want, exact, 0.02 * std::sqrt(norm_w * norm_x)) << dtype_name(type);
    }
  }
}

// Every ISA table against the reference: activations byte for byte, dequantization bit for bit,
// dots to float rounding.
TEST(KernelsQuantK, EveryTableMatchesReferenceOnRandomBlocks) {
  const auto& ref = reference_kernels();
  for (const KernelTable* table : available_kernels()) {
    for (DType type : kTypes) {
      const WeightKernels& k = *table->for_weight(type);
      const WeightKernels& r = *ref.for_weight(type);
      ASSERT_EQ(k.activation_type, r.activation_type);
      for (int64_t blocks : {1, 2, 5, 9, 24}) {
        const int64_t n = blocks * block_size(type);
        const auto seed = static_cast<uint32_t>(blocks * 31 + static_cast<int>(type));
        auto w = random_blocks(type, n, seed);
        auto x = random_floats(n, seed + 7, 3.0f);
        std::vector<uint8_t> a(row_size(k.activation_type, n)), a_ref(a.size());
        k.quantize_activation(x.data(), a.data(), n);
        r.quantize_activation(x.data(), a_ref.data(), n);
        EXPECT_EQ(a, a_ref) << table->isa << " " << dtype_name(type) << " activation n=" << n;
        const float got = k.dot(n, w.data(), a_ref.data());
        const float want = r.dot(n, w.data(), a_ref.data());
        EXPECT_NEAR(got, want, 1e-4 * (std::fabs(want) + std::sqrt(double(n))))
            << table->isa << " " << dtype_name(type) << " dot n=" << n;
        std::vector<float> out(static_cast<size_t>(n)), out_ref(out.size());
        k.dequantize(w.data(), out.data(), n);
        r.dequantize(w.data(), out_ref.data(), n);
        EXPECT_EQ(0, std::memcmp(out.data(), out_ref.data(), out.size() * sizeof(float)))
            << table->isa << " " << dtype_name(type) << " dequantize n=" << n;
      }
    }
  }
}

// Whole matrices through matmul's row path, with row counts that fit no tile and several
// tokens: each output is the reference dot of its row (exactly, for the reference table).
TEST(KernelsQuantK, MatmulWithOddRowCountsMatchesReferenceDots) {
  ThreadPool pool(2);
  ActivationScratch scratch;
  for (DType type : kTypes) {
    const int64_t cols = 3 * 256;  // a multiple of both block sizes
    const auto& r = *reference_kernels().for_weight(type);
    for (int64_t rows : {1, 7, 19}) {
      const auto seed = static_cast<uint32_t>(rows * 13 + static_cast<int>(type));
      auto bytes = random_blocks(type, rows * cols, seed);
      WeightMatrix w{type, rows, cols, row_size(type, cols), bytes.data(), nullptr};
      for (int64_t tokens : {1, 3, 5}) {
        auto x = random_floats(tokens * cols, seed + static_cast<uint32_t>(tokens), 2.0f);
        scratch.reserve(tokens, cols);
        std::vector<float> want(static_cast<size_t>(tokens * rows));
        std::vector<uint8_t> act(row_size(r.activation_type, cols));
        for (int64_t t = 0; t < tokens; ++t) {
          r.quantize_activation(&x[static_cast<size_t>(t * cols)], act.data(), cols);
          for (int64_t row = 0; row < rows; ++row)
            want[static_cast<size_t>(t * rows + row)] = r.dot(cols, w.row(row), act.data());
        }
        for (const KernelTable* table : available_kernels()) {
          std::vector<float> got(want.size());
          matmul(w, x.data(), tokens, got.data(), scratch, pool, *table);
          for (size_t i = 0; i < want.size(); ++i) {
            if (table == &reference_kernels()) {
              ASSERT_EQ(got[i], want[i]) << dtype_name(type) << " rows=" << rows;
            } else {
              ASSERT_NEAR(got[i], want[i], 1e-4 * (std::fabs(want[i]) + 30))
                  << table->isa << " " << dtype_name(type) << " rows=" << rows;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace inferd::kernels
