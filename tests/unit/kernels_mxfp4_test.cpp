// MXFP4 (ggml type 39): the E8M0 half scale, the reference dequantizer against hand-computed
// blocks, the quantizer against bytes from ggml's reference quantizer, the per-row dot against
// dequantized math, and the packed path (every ISA's group kernel against the reference, the
// packed path against the per-row path).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "quant/quantize.h"
#include "quant/type_policy.h"
#include "random_data.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels {
namespace {

using testing::random_floats;

// n values of random MXFP4 blocks: random nibbles, and each block's E8M0 byte drawn from
// `exponents` (scales near 1 keep products finite; 0..2 are the subnormal and smallest ones).
std::vector<uint8_t> random_mxfp4(int64_t n, uint32_t seed, const std::vector<uint8_t>& exponents) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(n / kQK) * sizeof(BlockMXFP4));
  for (size_t at = 0; at < out.size(); at += sizeof(BlockMXFP4)) {
    out[at] = exponents[rng() % exponents.size()];
    for (size_t j = 1; j < sizeof(BlockMXFP4); ++j) out[at + j] = static_cast<uint8_t>(rng() >> 24);
  }
  return out;
}

const std::vector<uint8_t> kUsualExponents = {0, 1, 2, 120, 123, 125, 126, 127, 128, 130};

struct Mxfp4Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;  // packed
};

Mxfp4Matrix make_matrix(int64_t rows, int64_t cols, uint32_t seed,
                        const std::vector<uint8_t>& exponents = kUsualExponents) {
  Mxfp4Matrix m;
  const auto row_bytes = static_cast<size_t>(*inferd::row_bytes(DType::MXFP4, cols));
  m.bytes = random_mxfp4(rows * cols, seed, exponents);
  m.w = {DType::MXFP4, rows, cols, row_bytes, m.bytes.data(), nullptr};
  m.w.packed = PackedWeights::pack(DType::MXFP4, m.bytes.data(), rows, cols, row_bytes);
  return m;
}

// y = W x for random x through `table`, tokens x rows.
std::vector<float> multiply(const WeightMatrix& w, const std::vector<float>& x, int64_t tokens,
                            const KernelTable& table, ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(tokens * w.rows));
  ActivationScratch scratch;
  scratch.reserve(tokens, w.cols);
  matmul(w, x.data(), tokens, y.data(), scratch, pool, table);
  return y;
}

TEST(Mxfp4, E8m0HalfScaleIsTwoToTheEMinus128) {
  EXPECT_EQ(e8m0_to_fp32_half(0), std::ldexp(1.0f, -128));  // subnormal
  EXPECT_EQ(e8m0_to_fp32_half(1), std::ldexp(1.0f, -127));  // subnormal
  EXPECT_EQ(e8m0_to_fp32_half(2), std::ldexp(1.0f, -126));  // the smallest normal float
  EXPECT_EQ(e8m0_to_fp32_half(127), 0.5f);
  EXPECT_EQ(e8m0_to_fp32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_fp32_half(130), 4.0f);
  EXPECT_EQ(e8m0_to_fp32_half(254), std::ldexp(1.0f, 126));
  EXPECT_EQ(e8m0_to_fp32_half(255), std::ldexp(1.0f, 127));  // not NaN, as ggml reads it
}

// One block holding every nibble in both halves (value j in the low nibble of byte j, value
// j + 16 in the high one), expanded by every table at several scales. The expected values are
// the E2M1 numbers themselves times 2^(e - 127), written out by hand.
TEST(Mxfp4, DequantizesAHandComputedBlock) {
  constexpr float kE2M1[16] = {0,    0.5f,  1,  1.5f,  2,  3,  4,  6,
                               0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  BlockMXFP4 block;
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  for (const KernelTable* table : available_kernels()) {
    const WeightKernels* k = table->for_weight(DType::MXFP4);
    ASSERT_NE(k, nullptr) << table->isa;
    EXPECT_EQ(k->activation_type, DType::Q8_0);
    for (int e : {0, 1, 2, 100, 127, 128, 140, 254}) {
      block.e = static_cast<uint8_t>(e);
      float out[32];
      k->dequantize(&block, out, 32);
      const float scale = std::ldexp(1.0f, e - 127);
      for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], kE2M1[j] * scale) << table->isa << " e=" << e << " j=" << j;
        EXPECT_EQ(out[j + 16], kE2M1[15 - j] * scale) << table->isa << " e=" << e << " j=" << j;
      }
    }
  }
  // e = 254: 6 x 2^127 is past float's range and becomes infinity, as in gguf-py.
  block.e = 254;
  float out[32];
  reference_kernels().mxfp4.dequantize(&block, out, 32);
  EXPECT_EQ(out[7], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[15], -std::numeric_limits<float>::infinity());
}

// The per-row dot of every table equals the double-precision dot of the dequantized weights and
// the dequantized Q8_0 activations, to float rounding.
TEST(Mxfp4, DotMatchesDequantizedMath) {
  for (const KernelTable* table : available_kernels()) {
    const WeightKernels& k = *table->for_weight(DType::MXFP4);
    for (int64_t n : {32, 96, 576, 2880}) {
      const auto w = random_mxfp4(n, static_cast<uint32_t>(n), {120, 124, 127, 128, 131});
      const auto x = random_floats(n, static_cast<uint32_t>(n) + 1, 2.0f);
      std::vector<BlockQ8_0> a(static_cast<size_t>(n / kQK));
      k.quantize_activation(x.data(), a.data(), n);
      std::vector<float> wf(static_cast<size_t>(n));
      k.dequantize(w.data(), wf.data(), n);
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        const BlockQ8_0& ab = a[static_cast<size_t>(i / kQK)];
        const double xi = double(fp16_to_fp32(ab.d)) * ab.qs[i % kQK];
        want += double(wf[static_cast<size_t>(i)]) * xi;
        magnitude += std::fabs(double(wf[static_cast<size_t>(i)]) * xi);
      }
      EXPECT_NEAR(k.dot(n, w.data(), a.data()), want, 1e-5 * magnitude) << table->isa << " n=" << n;
    }
  }
}

// Bytes of ggml's quantize_row_mxfp4_ref (libggml-base of the llama.cpp sources, called through
// ctypes; gguf-py's MXFP4.quantize_blocks gives the same) for blocks x[j] = k(j, b) * scale_b:
// ordinary, small, large and all-zero blocks; amax below 2^-125, where ggml's exponent wraps to
// 255; exact ties between levels (every half step of the scale); amax just below 1 and just
// below 1024 (log2f rounds the latter up to 10, and the exponent with it).
TEST(Mxfp4, QuantizerWritesGgmlsBytes) {
  std::vector<float> x;
  const float scales[] = {0.173f, 3.1e-3f, 250.0f, 1e-20f, 0.0f, 1e-39f};
  for (int b = 0; b < 6; ++b) {
    for (int j = 0; j < 32; ++j)
      x.push_back(static_cast<float>((j * 37 + b * 11) % 29 - 14) * scales[b]);
  }
  float block[32] = {};
  block[0] = 0.99999994f;
  block[1] = -0.99999994f;
  x.insert(x.end(), block, block + 32);
  for (int j = 0; j < 32; ++j) x.push_back(static_cast<float>(j - 16) * 0.0625f);
  std::memset(block, 0, sizeof(block));
  block[3] = std::nextafter(1024.0f, 0.0f);
  block[4] = -700.0f;
  block[5] = 100.0f;
  x.insert(x.end(), block, block + 32);
  const uint8_t want[9][17] = {
      {126, 0x9e, 0x4c, 0x61, 0xc5, 0x1e, 0x5a, 0xe3, 0xb6, 0x3d, 0x60, 0xd5, 0x9e, 0x4b, 0xe2,
       0xc6, 0x1d},
      {120, 0x6a, 0xe4, 0xb7, 0x3d, 0x60, 0xe5, 0x9f, 0x5c, 0xf2, 0xc6, 0x2e, 0x6a, 0xe4, 0xa7,
       0x4d, 0x71},
      {136, 0xe6, 0x9f, 0x5c, 0xf3, 0xd7, 0x2e, 0x6a, 0xf5, 0xb7, 0x4d, 0x71, 0xe6, 0x0f, 0x6c,
       0xf4, 0xc7},
      {62, 0x1e, 0x69, 0xe4, 0xa7, 0x4d, 0x61, 0xd5, 0x0e, 0x5b, 0xe3, 0xc6, 0x2d, 0x69, 0xe5, 0x9f,
       0x4c},
      {0},
      {255},
      {124, 0x07, 0x0f},
      {125, 0x0e, 0x0e, 0x1d, 0x1d, 0x2d, 0x2d, 0x3c, 0x3c, 0x4c, 0x4b, 0x4b, 0x5a, 0x5a, 0x59,
       0x59, 0x60},
      {135, 0x00, 0x00, 0x00, 0x06, 0x0d, 0x01},
  };
  std::vector<BlockMXFP4> got(9);
  quant::quantize_mxfp4(x.data(), got.data(), static_cast<int64_t>(x.size()));
  ASSERT_EQ(quant::quantizer_for(DType::MXFP4), &quant::quantize_mxfp4);
  for (int b = 0; b < 9; ++b) {
    EXPECT_EQ(got[static_cast<size_t>(b)].e, want[b][0]) << "block " << b;
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(got[static_cast<size_t>(b)].qs[j], want[b][j + 1])
          << "block " << b << " byte " << j;
  }
}

// On random data every value takes the first level nearest to it, at the scale that puts the
// block's largest magnitude in [8, 16) half-scales (log2f aside, exactly at a power of two).
TEST(Mxfp4, QuantizerPicksTheNearestLevel) {
  const int64_t n = 32 * 64;
  const auto x = random_floats(n, 5, 3.0f);
  std::vector<BlockMXFP4> blocks(static_cast<size_t>(n / kQK));
  quant::quantize_mxfp4(x.data(), blocks.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  reference_kernels().mxfp4.dequantize(blocks.data(), y.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = e8m0_to_fp32_half(blocks[static_cast<size_t>(b)].e);
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * kQK + j)]));
    EXPECT_GE(amax / d, 8.0f) << "block " << b;
    EXPECT_LT(amax / d, 16.0f) << "block " << b;
    for (int j = 0; j < kQK; ++j) {
      const auto i = static_cast<size_t>(b * kQK + j);
      float best = std::numeric_limits<float>::infinity();
      for (int8_t v : kMxfp4Values) best = std::min(best, std::fabs(v * d - x[i]));
      EXPECT_EQ(std::fabs(y[i] - x[i]), best) << "value " << i;
    }
  }
}

// The packed layout holds the GGUF blocks' scales and values: rebuilt from its bytes, each
// row's weights are the reference dequantizer's (padding rows of the last group are zero).
TEST(Mxfp4, PackedLayoutHoldsTheRows) {
  const int64_t rows = 21, cols = 96;
  Mxfp4Matrix m = make_matrix(rows, cols, 3);
  const PackedWeights& p = *m.w.packed;
  ASSERT_EQ(p.format(), PackedFormat::MXFP4);
  ASSERT_EQ(p.block_bytes(), sizeof(PackedMXFP4Block));
  ASSERT_EQ(p.block_cols(), kPackCols);
  ASSERT_FALSE(uses_q8k_activations(p.format()));
  std::vector<float> want(static_cast<size_t>(cols));
  for (int64_t r = 0; r < p.groups() * kPackRows; ++r) {
    if (r < rows) reference_kernels().mxfp4.dequantize(m.w.row(r), want.data(), cols);
    const auto* blocks = reinterpret_cast<const PackedMXFP4Block*>(p.group(r / kPackRows));
    const int i = static_cast<int>(r % kPackRows);
    for (int64_t col = 0; col < cols; ++col) {
      const PackedMXFP4Block& blk = blocks[col / kPackCols];
      const int c = static_cast<int>(col % kPackCols);
      const uint8_t byte = blk.qs[c / 8][i * 4 + c % 4];
      const int q = c % 8 < 4 ? byte & 0x0F : byte >> 4;
      const float got = static_cast<float>(kMxfp4Values[q]) * e8m0_to_fp32_half(blk.e[i]);
      EXPECT_EQ(got, r < rows ? want[static_cast<size_t>(col)] : 0.0f)
          << "row " << r << " col " << col;
    }
  }
}

// Every ISA's group kernel against the reference's, through matmul: rows not a multiple of 16,
// one to many blocks, token counts around and past the tiles (1..17, 25, 33).
TEST(Mxfp4, EveryIsaGroupKernelMatchesReference) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    ASSERT_NE(table->packed.mxfp4, nullptr) << table->isa;
    for (int64_t rows : {1, 15, 16, 17, 50}) {
      for (int64_t cols : {32, 160, 576, 1056}) {
        Mxfp4Matrix m = make_matrix(rows, cols, static_cast<uint32_t>(rows * cols));
        for (int64_t tokens = 1; tokens <= 40; tokens += tokens < 17 ? 1 : 8) {
          const auto x = random_floats(tokens * cols, static_cast<uint32_t>(tokens), 3.0f);
          const auto got = multiply(m.w, x, tokens, *table, pool);
          const auto want = multiply(m.w, x, tokens, reference_kernels(), pool);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 1e-5 * (std::fabs(want[i]) + std::sqrt(double(cols))))
                << table->isa << " rows=" << rows << " cols=" << cols << " tokens=" << tokens
                << " i=" << i;
          }
        }
      }
    }
  }
}

// Weights with only the smallest scales (e = 0, 1 are subnormal floats, 2 the smallest normal)
// against large activations, so the products stay normal: the SIMD tables must build the
// subnormal scales from their bits as the reference does.
TEST(Mxfp4, EveryIsaHandlesSubnormalScales) {
  ThreadPool pool(1);
  const int64_t rows = 33, cols = 256, tokens = 5;
  Mxfp4Matrix m = make_matrix(rows, cols, 17, {0, 1, 2});
  const auto x = random_floats(tokens * cols, 18, 1e6f);
  const auto want = multiply(m.w, x, tokens, reference_kernels(), pool);
  double peak = 0;
  for (float v : want) peak = std::max(peak, std::fabs(double(v)));
  ASSERT_GT(peak, 0.0);
  for (const KernelTable* table : available_kernels()) {
    const auto got = multiply(m.w, x, tokens, *table, pool);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * peak) << table->isa << " i=" << i;
  }
}

// A row's result does not depend on the batch it is in (as for every int8 layout).
TEST(Mxfp4, EveryIsaGivesARowTheSameBitsAtAnyBatchSize) {
  ThreadPool pool(2);
  const int64_t rows = 40, cols = 576, tokens = 40;
  Mxfp4Matrix m = make_matrix(rows, cols, 21);
  const auto x = random_floats(tokens * cols, 22, 3.0f);
  for (const KernelTable* table : available_kernels()) {
    const auto batch = multiply(m.w, x, tokens, *table, pool);
    for (int64_t t : {0, 17, 39}) {
      const std::vector<float> one(x.begin() + t * cols, x.begin() + (t + 1) * cols);
      const auto alone = multiply(m.w, one, 1, *table, pool);
      const std::vector<float> in_batch(batch.begin() + t * rows, batch.begin() + (t + 1) * rows);
      EXPECT_EQ(alone, in_batch) << table->isa << " token " << t;
    }
  }
}

// The packed path against the per-row path (Q8_0 activations and the per-row dot). The two round
// the activations slightly differently (127 / amax there, 1 / d here), so a value may land on
// the neighbouring int8 now and then: about 0.01 |w_row| |x| apart at most; a layout or scale
// error would be off by the size of the dot product itself.
TEST(Mxfp4, PackedPathAgreesWithPerRowPath) {
  ThreadPool pool(1);
  const int64_t rows = 40, cols = 2880, tokens = 5;
  Mxfp4Matrix m = make_matrix(rows, cols, 11, {122, 125, 127, 129});
  WeightMatrix unpacked = m.w;
  unpacked.packed = nullptr;
  const auto x = random_floats(tokens * cols, 12);
  for (const KernelTable* table : available_kernels()) {
    const auto packed = multiply(m.w, x, tokens, *table, pool);
    const auto by_row = multiply(unpacked, x, tokens, *table, pool);
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      reference_kernels().mxfp4.dequantize(m.w.row(r), wrow.data(), cols);
      double norm = 0;
      for (float v : wrow) norm += double(v) * v;
      for (int64_t t = 0; t < tokens; ++t) {
        const auto i = static_cast<size_t>(t * rows + r);
        EXPECT_NEAR(packed[i], by_row[i], 0.02 * std::sqrt(norm)) << table->isa << " row " << r;
      }
    }
  }
}

// llama-quantize's MXFP4_MOE mix (src/llama-quant.cpp): stacked expert tensors (a third
// dimension over 1) in MXFP4, every other quantizable matrix in Q8_0 (the output and embedding
// included), norms and routers as they are; rows MXFP4 cannot split fall back to F16. With
// --pure every quantizable matrix is MXFP4. In bailingmoe3 only feed-forward experts count.
TEST(Mxfp4, Mxfp4MoeMixFollowsLlamaQuantize) {
  using quant::TensorDesc;
  const std::vector<TensorDesc> tensors = {
      {"token_embd.weight", DType::F32, {2880, 1000}},
      {"blk.0.attn_norm.weight", DType::F32, {2880}},
      {"blk.0.attn_q.weight", DType::F32, {2880, 4096}},
      {"blk.0.ffn_gate_inp.weight", DType::F32, {2880, 32}},
      {"blk.0.ffn_gate_exps.weight", DType::F32, {2880, 2880, 32}},
      {"blk.0.ffn_down_exps.weight", DType::F32, {2880, 2880, 32}},
      {"blk.0.ffn_up_exps.weight", DType::F32, {2880, 2880, 1}},  // one expert: not stacked
      {"blk.0.ffn_odd_exps.weight", DType::F32, {40, 16, 4}},     // 40 is no multiple of 32
      {"output.weight", DType::F32, {2880, 1000}},
  };
  quant::ModelShape model;
  model.arch = "gpt-oss";
  model.n_layer = 1;
  model.n_expert = 32;
  const auto choices = quant::choose_types(model, tensors, quant::FileType::MXFP4_MOE, false);
  const DType want[] = {DType::Q8_0,  DType::F32,  DType::Q8_0, DType::F32, DType::MXFP4,
                        DType::MXFP4, DType::Q8_0, DType::F16,  DType::Q8_0};
  for (size_t i = 0; i < tensors.size(); ++i)
    EXPECT_EQ(choices[i].type, want[i]) << tensors[i].name;
  EXPECT_TRUE(choices[7].fell_back);
  EXPECT_EQ(quant::default_type(quant::FileType::MXFP4_MOE), DType::MXFP4);
  EXPECT_EQ(quant::parse_file_type("mxfp4_moe"), quant::FileType::MXFP4_MOE);

  const auto pure = quant::choose_types(model, tensors, quant::FileType::MXFP4_MOE, true);
  EXPECT_EQ(pure[2].type, DType::MXFP4);  // attn_q
  EXPECT_EQ(pure[8].type, DType::MXFP4);  // output
  EXPECT_EQ(pure[1].type, DType::F32);    // the norm stays

  model.arch = "bailingmoe3";
  const std::vector<TensorDesc> mla = {{"blk.0.attn_k_b.weight", DType::F32, {128, 512, 16}},
                                       {"blk.0.ffn_up_exps.weight", DType::F32, {256, 512, 8}}};
  const auto bailing = quant::choose_types(model, mla, quant::FileType::MXFP4_MOE, false);
  EXPECT_EQ(bailing[0].type, DType::Q8_0);
  EXPECT_EQ(bailing[1].type, DType::MXFP4);
}

}  // namespace
}  // namespace inferd::kernels
