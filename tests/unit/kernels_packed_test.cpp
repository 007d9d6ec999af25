// The packed path: the layout against the GGUF rows it came from, the reference group kernels
// against double-precision math on the same quantized values, and every ISA against the
// reference on odd shapes (rows not a multiple of 16, token counts around the tile sizes).
#include <cmath>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_k_ref.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/x86_avx512/gemm_avx512.h"
#include "random_data.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "util/error.h"

namespace inferd::kernels {
namespace {

using testing::random_floats;

struct QuantMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// rows x cols random weights quantized row by row with the reference quantizer, then packed.
QuantMatrix make_matrix(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  QuantMatrix m;
  const auto row_bytes = static_cast<size_t>(*inferd::row_bytes(type, cols));
  m.bytes.resize(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    auto x = random_floats(cols, seed + static_cast<uint32_t>(r));
    uint8_t* out = m.bytes.data() + static_cast<size_t>(r) * row_bytes;
    if (type == DType::Q4_0) ref::quantize_row_q4_0(x.data(), out, cols);
    if (type == DType::Q4_1) ref::quantize_row_q4_1(x.data(), out, cols);
    if (type == DType::Q8_0) ref::quantize_row_q8_0(x.data(), out, cols);
    if (type == DType::F16) ref::quantize_row_f16(x.data(), out, cols);
    if (type == DType::Q5_0 || type == DType::Q5_1 || type == DType::IQ4_NL ||
        type == DType::Q2_K || type == DType::Q3_K || type == DType::Q4_K ||
        type == DType::Q5_K || type == DType::Q6_K || type == DType::IQ4_XS) {  // no weight quantizer here: random blocks of the format
      const auto blocks = testing::random_blocks(type, cols, seed + static_cast<uint32_t>(r));
      std::copy(blocks.begin(), blocks.end(), out);
    }
  }
  m.w = {type, rows, cols, row_bytes, m.bytes.data(), nullptr};
  m.w.packed = PackedWeights::pack(type, m.bytes.data(), rows, cols, row_bytes);
  return m;
}

void dequantize(const WeightMatrix& w, int64_t r, float* out) {
  const WeightKernels* k = reference_kernels().for_weight(w.type);
  k->dequantize(w.row(r), out, w.cols);
}

const DType kPackedTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0,   DType::F16,
                              DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K,
                              DType::Q3_K, DType::Q4_K, DType::Q5_K,   DType::Q6_K,
                              DType::IQ4_XS};
// The formats whose integer kernels all ISAs share (the bf16 route aside).
const DType kInt8Types[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0,
                            DType::Q5_1, DType::IQ4_NL, DType::Q2_K, DType::Q3_K,
                            DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};

// The formats the bf16 route takes (Q5_0 and IQ4_NL pack as Q8_0).
const DType kBf16RouteTypes[] = {DType::Q4_0,   DType::Q4_1, DType::Q8_0,  DType::Q5_0,
                                 DType::IQ4_NL, DType::Q2_K, DType::Q3_K,  DType::Q4_K,
                                 DType::Q5_K,   DType::Q6_K, DType::IQ4_XS};

// A width the type packs: k-quants pack 256 columns at a time, so `cols` is rounded up.
int64_t cols_for(DType type, int64_t cols) {
  const int64_t unit = dtype_info(type).block_size == 256 ? kPackSuperCols : kPackCols;
  return (cols + unit - 1) / unit * unit;
}

void expect_same_blocks(const std::vector<ActQ8Block>& got, const std::vector<ActQ8Block>& want,
                        std::string_view isa) {
  for (size_t b = 0; b < got.size(); ++b) {
    const ActQ8Block &g = got[b], &w = want[b];
    ASSERT_EQ(g.d, w.d) << isa << " block " << b;
    ASSERT_EQ(g.s, w.s) << isa << " block " << b;
    ASSERT_EQ(g.d_sum, w.d_sum) << isa << " block " << b;
    ASSERT_EQ(g.half_sum[0], w.half_sum[0]) << isa << " block " << b;
    ASSERT_EQ(g.half_sum[1], w.half_sum[1]) << isa << " block " << b;
    ASSERT_EQ(g.offset32[0], w.offset32[0]) << isa << " block " << b;
    ASSERT_EQ(g.offset32[1], w.offset32[1]) << isa << " block " << b;
    ASSERT_EQ(g.offset128, w.offset128) << isa << " block " << b;
    for (int j = 0; j < kPackCols; ++j) ASSERT_EQ(g.qs[j], w.qs[j]) << isa << " block " << b;
  }
}

TEST(KernelsPacked, ActivationQuantizersAgreeExactly) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t blocks : {1, 3, 18, 48}) {
      const int64_t n = blocks * kPackCols;
      auto x = random_floats(n, 40 + static_cast<uint32_t>(blocks), 4.0f);
      for (int j = 0; j < kPackCols; ++j) x[static_cast<size_t>(j)] = 0;  // an all-zero block
      std::vector<ActQ8Block> got(static_cast<size_t>(blocks)), want(got.size());
      table->packed.quantize_act(x.data(), got.data(), n, 1);
      reference_kernels().packed.quantize_act(x.data(), want.data(), n, 1);
      expect_same_blocks(got, want, table->isa);
    }
  }
}

// The Q8_K rounding of the 256-wide layouts: every ISA gives the reference's bits, and the
// reference gives llama.cpp's Q8_K blocks (quantize_row_q8_k, the definition) spread over 8
// blocks sharing d. The first super-block is all zero (with more than one); in the last the
// largest magnitude occurs at both signs, the negative one first (the first one's sign makes d's).
TEST(KernelsPacked, Q8KActivationQuantizersAgreeExactly) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t supers : {1, 2, 5}) {
      const int64_t n = supers * kPackSuperCols, stride = 3;
      auto x = random_floats(n, 60 + static_cast<uint32_t>(supers), 4.0f);
      for (int j = 0; j < kPackSuperCols && supers > 1; ++j) x[static_cast<size_t>(j)] = 0;
      x[static_cast<size_t>(n - 200)] = -1000.0f;
      x[static_cast<size_t>(n - 100)] = 1000.0f;
      std::vector<ActQ8Block> got(static_cast<size_t>(n / kPackCols * stride)), want(got.size());
      table->packed.quantize_act_k(x.data(), got.data(), n, stride);
      reference_kernels().packed.quantize_act_k(x.data(), want.data(), n, stride);
      expect_same_blocks(got, want, table->isa);
      for (int64_t sb = 0; sb < supers; ++sb) {
        BlockQ8_K q8k;
        ref::quantize_row_q8_k(&x[static_cast<size_t>(sb * kPackSuperCols)], &q8k, kPackSuperCols);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = want[static_cast<size_t>((sb * kSubBlocks + j) * stride)];
          ASSERT_EQ(a.d, q8k.d);
          ASSERT_EQ(a.half_sum[0], q8k.bsums[2 * j]);
          ASSERT_EQ(a.half_sum[1], q8k.bsums[2 * j + 1]);
          // The offsets the tiles start their sums at follow from the half sums.
          ASSERT_EQ(a.offset32[0], -32 * q8k.bsums[2 * j]);
          ASSERT_EQ(a.offset32[1], -32 * q8k.bsums[2 * j + 1]);
          ASSERT_EQ(a.offset128, -128 * (q8k.bsums[2 * j] + q8k.bsums[2 * j + 1]));
          for (int c = 0; c < kPackCols; ++c) ASSERT_EQ(a.qs[c], q8k.qs[j * kPackCols + c]);
        }
      }
      // In the last super-block -1000 comes before 1000: d's sign maps the first to -127, so d > 0.
      const ActQ8Block& last = want[static_cast<size_t>((n / kPackCols - 1) * stride)];
      EXPECT_FLOAT_EQ(last.d, 1000.0f / 127.0f);
    }
  }
}

// The reference group kernel equals, up to float rounding, the double-precision dot product of
// the dequantized GGUF rows and the dequantized activations: this pins the layout. The offset m
// of Q4_1 and Q5_1 multiplies the fp16-rounded sum s (as with llama.cpp's Q8_1), not d * sum(q).
TEST(KernelsPacked, ReferenceMatchesDequantizedMath) {
  for (DType type : kPackedTypes) {
    const int64_t rows = 21, cols = cols_for(type, 96), tokens = 3, blocks = cols / kPackCols;
    QuantMatrix m = make_matrix(type, rows, cols, 7);
    auto x = random_floats(tokens * cols, 8, 2.0f);
    std::vector<ActQ8Block> act(static_cast<size_t>(tokens * blocks));
    for (int64_t t = 0; t < tokens; ++t)
      (dtype_info(type).block_size == 256 ? reference_kernels().packed.quantize_act_k
                                          : reference_kernels().packed.quantize_act)(
          &x[static_cast<size_t>(t * cols)], &act[static_cast<size_t>(t * blocks)], cols, 1);
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    ThreadPool pool(1);
    ActivationScratch scratch;
    scratch.reserve(tokens, cols);
    matmul(m.w, x.data(), tokens, y.data(), scratch, pool, reference_kernels());
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize(m.w, r, wrow.data());
      for (int64_t t = 0; t < tokens; ++t) {
        double want = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const ActQ8Block& a = act[static_cast<size_t>(t * blocks + c / kPackCols)];
          const double input = type == DType::F16 ? double(x[static_cast<size_t>(t * cols + c)])
                                                  : double(a.d) * a.qs[c % kPackCols];
          want += double(wrow[static_cast<size_t>(c)]) * input;
        }
        for (int64_t b = 0; b < blocks && (type == DType::Q4_1 || type == DType::Q5_1); ++b) {
          const ActQ8Block& a = act[static_cast<size_t>(t * blocks + b)];
          const uint16_t offset = type == DType::Q4_1
                                      ? reinterpret_cast<const BlockQ4_1*>(m.w.row(r))[b].m
                                      : reinterpret_cast<const BlockQ5_1*>(m.w.row(r))[b].m;
          want += double(fp16_to_fp32(offset)) * (double(a.s) - double(a.d_sum));
        }
        EXPECT_NEAR(y[static_cast<size_t>(t * rows + r)], want, 1e-4 * (1 + std::fabs(want)))
            << dtype_name(type) << " row " << r << " token " << t;
      }
    }
  }
}

// The packed path against the per-row kernels of the GGUF formats. For the 32-wide formats the
// activations differ (fp16 scale there, float here), so a value may round to the neighbouring
// int8 (about 0.02 each here): the two results differ by about 0.01 |w_row| for unit inputs. A
// layout error would be off by the size of the dot product itself (~|w_row|). The 256-wide
// formats take the same Q8_K activations on both paths, so they agree to float rounding.
TEST(KernelsPacked, AgreesWithPerRowKernels) {
  for (DType type : kPackedTypes) {
    const int64_t rows = 40, cols = cols_for(type, 576), tokens = 5;
    QuantMatrix m = make_matrix(type, rows, cols, 11);
    WeightMatrix unpacked = m.w;
    unpacked.packed = nullptr;
    auto x = random_floats(tokens * cols, 12);
    std::vector<float> y(static_cast<size_t>(tokens * rows)), y_rows(y.size());
    ThreadPool pool(1);
    ActivationScratch scratch;
    scratch.reserve(tokens, cols);
    matmul(m.w, x.data(), tokens, y.data(), scratch, pool, reference_kernels());
    matmul(unpacked, x.data(), tokens, y_rows.data(), scratch, pool, reference_kernels());
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize(m.w, r, wrow.data());
      double norm = 0;
      for (float v : wrow) norm += double(v) * v;
      const double tolerance = (dtype_info(type).block_size == 256 ? 1e-5 : 0.05) * std::sqrt(norm);
      for (int64_t t = 0; t < tokens; ++t) {
        const auto i = static_cast<size_t>(t * rows + r);
        EXPECT_NEAR(y[i], y_rows[i], tolerance) << dtype_name(type) << " row " << r;
      }
    }
  }
}

// y = W x for `tokens` random rows of x, through two kernel tables; rows from bf16_from on are
// marked for the bf16 route.
struct TwoResults {
  std::vector<float> got, want;
};
TwoResults multiply_both(const KernelTable& table, const KernelTable& reference,
                         const QuantMatrix& m, int64_t tokens, uint32_t seed, ThreadPool& pool,
                         int64_t bf16_from = kNoBf16Rows) {
  auto x = random_floats(tokens * m.w.cols, seed, 3.0f);
  TwoResults r{std::vector<float>(static_cast<size_t>(tokens * m.w.rows)), {}};
  r.want.resize(r.got.size());
  ActivationScratch scratch;
  scratch.reserve(tokens, m.w.cols);
  matmul(m.w, x.data(), tokens, r.got.data(), scratch, pool, table, bf16_from);
  matmul(m.w, x.data(), tokens, r.want.data(), scratch, pool, reference, bf16_from);
  return r;
}

// A table with its bf16 route on (the reference has the route's kernels but leaves it off).
KernelTable with_bf16_route(const KernelTable& table) {
  KernelTable t = table;
  t.packed.bf16_route = true;
  return t;
}

TEST(KernelsPacked, EveryIsaMatchesReferenceOnOddShapes) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    for (DType type : kPackedTypes) {
      for (int64_t rows : {1, 15, 16, 17, 50}) {
        for (int64_t narrow : {32, 160, 576}) {
          const int64_t cols = cols_for(type, narrow);
          if (cols != narrow && narrow != 576) continue;  // one k-quant width is enough
          QuantMatrix m = make_matrix(type, rows, cols, static_cast<uint32_t>(rows * cols));
          for (int64_t tokens : {1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 17, 25}) {
            const TwoResults r = multiply_both(*table, reference_kernels(), m, tokens,
                                               static_cast<uint32_t>(tokens), pool);
            for (size_t i = 0; i < r.got.size(); ++i) {
              ASSERT_NEAR(r.got[i], r.want[i],
                          1e-5 * (std::fabs(r.want[i]) + std::sqrt(double(cols))))
                  << table->isa << " " << dtype_name(type) << " rows=" << rows << " cols=" << cols
                  << " tokens=" << tokens << " i=" << i;
            }
          }
        }
      }
    }
  }
}

// Wide inputs and many tokens: matrices wider than the 32 blocks an AMX kernel unpacks at a
// time, token counts past one 16-token tile and with ragged last tiles.
TEST(KernelsPacked, EveryIsaMatchesReferenceOnWideInputsAndManyTokens) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    for (DType type : kInt8Types) {
      const int64_t cols = cols_for(type, 1056);
      QuantMatrix m = make_matrix(type, 33, cols, 5);
      for (int64_t tokens : {6, 16, 33, 40}) {
        const TwoResults r = multiply_both(*table, reference_kernels(), m, tokens,
                                           static_cast<uint32_t>(tokens + 7), pool);
        for (size_t i = 0; i < r.got.size(); ++i) {
          ASSERT_NEAR(r.got[i], r.want[i], 1e-5 * (std::fabs(r.want[i]) + std::sqrt(double(cols))))
              << table->isa << " " << dtype_name(type) << " tokens=" << tokens << " i=" << i;
        }
      }
    }
  }
}

// The AMX kernels scale each block's integer sums in the VNNI kernels' order of float
// operations, so the two give the same bits (a decode step and a batch agree exactly).
TEST(KernelsPacked, AmxEqualsVnniBitForBit) {
  const KernelTable *amx = nullptr, *vnni = nullptr;
  for (const KernelTable* table : available_kernels()) {
    if (table->isa == "amx") amx = table;
    if (table->isa == "avx512") vnni = table;
  }
  if (amx == nullptr || vnni == nullptr) GTEST_SKIP() << "this CPU has no AMX";
  ThreadPool pool(2);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    const TwoResults r = multiply_both(*amx, *vnni, make_matrix(type, 40, 1056, 9), 37, 10, pool);
    EXPECT_EQ(r.got, r.want) << dtype_name(type);
  }
}

// The AVX-512 one-token tiles prefetch their weights themselves on Intel and not on AMD
// (avx512::packed_kernels); the table this CPU does not choose must give the same bits as the
// one it does, for every format and a partial last group.
TEST(KernelsPacked, Avx512OneTokenTilesGiveTheSameBitsWithAndWithoutPrefetch) {
  const KernelTable* chosen = nullptr;
  for (const KernelTable* table : available_kernels())
    if (table->isa == "avx512") chosen = table;
  if (chosen == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  KernelTable other = *chosen;
  other.packed = avx512::packed_kernels(!cpu_features().intel);
  ThreadPool pool(2);
  for (DType type : kInt8Types) {
    for (int64_t rows : {17, 48}) {
      QuantMatrix m = make_matrix(type, rows, cols_for(type, 1056), 11);
      const TwoResults r = multiply_both(other, *chosen, m, 1, 12, pool);
      EXPECT_EQ(r.got, r.want) << dtype_name(type) << " rows=" << rows;
    }
  }
}

// The bf16 route (AMX-BF16 where the CPU has it) against its reference: weights dequantized and
// rounded to bf16, times bf16 activations, summed in double. The tiles sum in float, in their
// own order. Shapes cross the 32-block chunks the kernel dequantizes at a time and leave ragged
// token tiles; the partial last group of 33 rows goes through the small-batch path.
TEST(KernelsPacked, Bf16RouteMatchesItsReference) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    if (!table->packed.bf16_route) continue;
    for (DType type : kBf16RouteTypes) {
      // 33 and 70 rows: groups taken in pairs and alone, the last one partial; 1088 columns
      // (1280 for the 256-wide formats) are two chunks of dequantized weights.
      for (const auto& [rows, narrow] :
           {std::pair<int64_t, int64_t>{33, 32}, {33, 1088}, {70, 160}}) {
        const int64_t cols = cols_for(type, narrow);
        QuantMatrix m = make_matrix(type, rows, cols, static_cast<uint32_t>(cols));
        for (int64_t tokens : {1, 15, 16, 17, 32, 40}) {
          const TwoResults r = multiply_both(*table, with_bf16_route(reference_kernels()), m,
                                             tokens, static_cast<uint32_t>(tokens), pool, 0);
          for (size_t i = 0; i < r.got.size(); ++i) {
            ASSERT_NEAR(r.got[i], r.want[i],
                        1e-5 * (std::fabs(r.want[i]) + std::sqrt(double(cols))))
                << table->isa << " " << dtype_name(type) << " cols=" << cols << " tokens=" << tokens
                << " i=" << i;
          }
        }
      }
    }
  }
}

// Against the exact product of the dequantized weights and the float inputs, the bf16 route
// (bf16 inputs, bf16-rounded weights) is more accurate than the int8 route (inputs rounded to
// int8 per 32-value block): a check that it computes the right thing, not only the same thing
// as its reference.
TEST(KernelsPacked, Bf16RouteIsCloserToExactThanInt8Route) {
  ThreadPool pool(1);
  for (DType type : kBf16RouteTypes) {
    const int64_t rows = 32, cols = cols_for(type, 576), tokens = 4;
    QuantMatrix m = make_matrix(type, rows, cols, 3);
    auto x = random_floats(tokens * cols, 4, 3.0f);
    std::vector<float> bf16(static_cast<size_t>(tokens * rows)), int8(bf16.size());
    ActivationScratch scratch;
    scratch.reserve(tokens, cols);
    matmul(m.w, x.data(), tokens, bf16.data(), scratch, pool, with_bf16_route(reference_kernels()),
           0);
    matmul(m.w, x.data(), tokens, int8.data(), scratch, pool, reference_kernels());
    double err_bf16 = 0, err_int8 = 0, norm = 0;
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize(m.w, r, wrow.data());
      for (int64_t t = 0; t < tokens; ++t) {
        double exact = 0;
        for (int64_t c = 0; c < cols; ++c)
          exact += double(wrow[static_cast<size_t>(c)]) * x[static_cast<size_t>(t * cols + c)];
        const auto i = static_cast<size_t>(t * rows + r);
        err_bf16 += (bf16[i] - exact) * (bf16[i] - exact);
        err_int8 += (int8[i] - exact) * (int8[i] - exact);
        norm += exact * exact;
      }
    }
    EXPECT_LT(err_bf16, err_int8) << dtype_name(type);
    EXPECT_LT(std::sqrt(err_bf16 / norm), 0.005) << dtype_name(type);
  }
}

// Each weight as the bf16 route multiplies it is the GGUF dequantization's value rounded once
// to bf16: the inputs are the columns of the identity (1.0 is exact in bf16), so every result is
// one weight, on every table with bf16 kernels. A format's field read from the wrong bits or
// column, or a second rounding, changes some weight.
TEST(KernelsPacked, Bf16RouteMultipliesEachWeightRoundedOnce) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    if (table->packed.q4_bf16 == nullptr) continue;
    const KernelTable bf16 = with_bf16_route(*table);
    for (DType type : kBf16RouteTypes) {
      const int64_t rows = 17, cols = cols_for(type, 64);
      QuantMatrix m = make_matrix(type, rows, cols, 41);
      std::vector<float> x(static_cast<size_t>(cols * cols));
      for (int64_t t = 0; t < cols; ++t) x[static_cast<size_t>(t * cols + t)] = 1.0f;
      std::vector<float> y(static_cast<size_t>(cols * rows)), wrow(static_cast<size_t>(cols));
      ActivationScratch scratch;
      scratch.reserve(cols, cols);
      matmul(m.w, x.data(), cols, y.data(), scratch, pool, bf16, 0);
      for (int64_t r = 0; r < rows; ++r) {
        dequantize(m.w, r, wrow.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float want = bf16_to_fp32(fp32_to_bf16(wrow[static_cast<size_t>(c)]));
          ASSERT_EQ(y[static_cast<size_t>(c * rows + r)], want)
              << table->isa << " " << dtype_name(type) << " row " << r << " column " << c;
        }
      }
    }
  }
}

// One call with rows [0, split) on the int8 kernels and the rest on the bf16 route gives, row
// for row, the bits of the two separate calls: marking rows changes nothing for the others.
TEST(KernelsPacked, MarkedRowsTakeTheBf16RouteAndTheOthersDoNot) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    if (table->packed.q4_bf16 == nullptr) continue;  // no bf16 kernels in this table
    const KernelTable bf16 = with_bf16_route(*table);
    for (DType type : {DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
      const int64_t rows = 33, cols = cols_for(type, 96), tokens = 45;
      QuantMatrix m = make_matrix(type, rows, cols, 31);
      auto x = random_floats(tokens * cols, 32, 3.0f);
      ActivationScratch scratch;
      scratch.reserve(tokens, cols);
      for (int64_t split : {0, 7, 20, 45}) {
        std::vector<float> mixed(static_cast<size_t>(tokens * rows)), part(mixed.size());
        matmul(m.w, x.data(), tokens, mixed.data(), scratch, pool, bf16, split);
        if (split > 0) matmul(m.w, x.data(), split, part.data(), scratch, pool, bf16);
        if (split < tokens) {
          matmul(m.w, &x[static_cast<size_t>(split * cols)], tokens - split,
                 &part[static_cast<size_t>(split * rows)], scratch, pool, bf16, 0);
        }
        EXPECT_EQ(mixed, part) << table->isa << " " << dtype_name(type) << " split " << split;
      }
    }
  }
}

// A request's greedy output must not depend on what else the server batches with it: with the
// default kernels of every ISA, a row gets the same bits alone as in a batch of any size
// (integer block sums are exact, and the float steps, F16 weights' included, run in one order
// at every tile size). The bf16 route is therefore chosen per row (model/batch.h), never by
// batch size. Speculative decoding relies on it: verifying drafts adds rows to a step.
TEST(KernelsPacked, DefaultKernelsGiveARowTheSameBitsAtAnyBatchSize) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    for (DType type : kPackedTypes) {
      const int64_t rows = 40, cols = cols_for(type, 576), tokens = 40;
      QuantMatrix m = make_matrix(type, rows, cols, 21);
      auto x = random_floats(tokens * cols, 22, 3.0f);
      std::vector<float> batch(static_cast<size_t>(tokens * rows)), alone(rows);
      ActivationScratch scratch;
      scratch.reserve(tokens, cols);
      // Unmarked rows (int8 kernels), then rows marked for the bf16 route where the table has
      // it: the bf16 tiles, too, compute each row on its own.
      for (const int64_t bf16_from : {kNoBf16Rows, int64_t{0}}) {
        if (bf16_from == 0 && !table->packed.bf16_route) continue;
        matmul(m.w, x.data(), tokens, batch.data(), scratch, pool, *table, bf16_from);
        for (int64_t t : {0, 17, 39}) {
          matmul(m.w, &x[static_cast<size_t>(t * cols)], 1, alone.data(), scratch, pool, *table,
                 bf16_from);
          const std::vector<float> in_batch(batch.begin() + t * rows,
                                            batch.begin() + (t + 1) * rows);
          EXPECT_EQ(alone, in_batch) << table->isa << " " << dtype_name(type) << " token " << t
                                     << (bf16_from == 0 ? " (bf16 route)" : "");
        }
      }
    }
  }
}

// q, k and v share one input: one combined call gives what three separate calls give.
TEST(KernelsPacked, MatmulManyEqualsSeparateCalls) {
  ThreadPool pool(2);
  const int64_t cols = 64, tokens = 6;
  QuantMatrix a = make_matrix(DType::Q4_1, 48, cols, 1), b = make_matrix(DType::Q4_1, 17, cols, 2);
  auto x = random_floats(tokens * cols, 3);
  ActivationScratch scratch;
  scratch.reserve(tokens, cols);
  std::vector<float> ya(static_cast<size_t>(tokens * 48)), yb(static_cast<size_t>(tokens * 17));
  std::vector<float> ya1(ya.size()), yb1(yb.size());
  const MatmulTarget targets[] = {{&a.w, ya.data()}, {&b.w, yb.data()}};
  matmul_many(targets, x.data(), tokens, scratch, pool);
  matmul(a.w, x.data(), tokens, ya1.data(), scratch, pool);
  matmul(b.w, x.data(), tokens, yb1.data(), scratch, pool);
  EXPECT_EQ(ya, ya1);
  EXPECT_EQ(yb, yb1);
}

// A call mixing a 256-wide layout (Q8_K activations) with 32-wide ones is split by rounding:
// each output equals its own call's, on every ISA.
TEST(KernelsPacked, MatmulManyMixingActivationRoundingsEqualsSeparateCalls) {
  ThreadPool pool(2);
  const int64_t cols = 512, tokens = 5;
  QuantMatrix a = make_matrix(DType::Q4_K, 32, cols, 1), b = make_matrix(DType::Q8_0, 17, cols, 2);
  QuantMatrix c = make_matrix(DType::Q6_K, 16, cols, 3);
  auto x = random_floats(tokens * cols, 4);
  ActivationScratch scratch;
  scratch.reserve(tokens, cols);
  for (const KernelTable* table : available_kernels()) {
    std::vector<float> ya(static_cast<size_t>(tokens * 32)), yb(static_cast<size_t>(tokens * 17));
    std::vector<float> yc(static_cast<size_t>(tokens * 16));
    std::vector<float> ya1(ya.size()), yb1(yb.size()), yc1(yc.size());
    const MatmulTarget targets[] = {{&a.w, ya.data()}, {&b.w, yb.data()}, {&c.w, yc.data()}};
    matmul_many(targets, x.data(), tokens, scratch, pool, *table);
    matmul(a.w, x.data(), tokens, ya1.data(), scratch, pool, *table);
    matmul(b.w, x.data(), tokens, yb1.data(), scratch, pool, *table);
    matmul(c.w, x.data(), tokens, yc1.data(), scratch, pool, *table);
    EXPECT_EQ(ya, ya1) << table->isa;
    EXPECT_EQ(yb, yb1) << table->isa;
    EXPECT_EQ(yc, yc1) << table->isa;
  }
}

// A weight type without a packed layout (BF16) beside packed ones: it goes row by row, the
// others still through the packed path; every output equals its own call's.
TEST(KernelsPacked, MatmulManyWithAnUnpackedTypeEqualsSeparateCalls) {
  ThreadPool pool(2);
  const int64_t cols = 256, tokens = 3, rows = 20;
  QuantMatrix a = make_matrix(DType::Q5_1, 32, cols, 1);
  const auto row_bytes = static_cast<size_t>(*inferd::row_bytes(DType::BF16, cols));
  std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = random_floats(cols, 50 + static_cast<uint32_t>(r));
    ref::quantize_row_bf16(row.data(), bytes.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  const WeightMatrix bf16{DType::BF16, rows, cols, row_bytes, bytes.data(), nullptr};
  ASSERT_FALSE(PackedWeights::supports(DType::BF16, cols));
  auto x = random_floats(tokens * cols, 9);
  ActivationScratch scratch;
  scratch.reserve(tokens, cols);
  std::vector<float> ya(static_cast<size_t>(tokens * 32)), yb(static_cast<size_t>(tokens * rows));
  std::vector<float> ya1(ya.size()), yb1(yb.size());
  const MatmulTarget targets[] = {{&bf16, yb.data()}, {&a.w, ya.data()}};
  matmul_many(targets, x.data(), tokens, scratch, pool);
  matmul(a.w, x.data(), tokens, ya1.data(), scratch, pool);
  matmul(bf16, x.data(), tokens, yb1.data(), scratch, pool);
  EXPECT_EQ(ya, ya1);
  EXPECT_EQ(yb, yb1);
}

// A matrix of several MiB is packed by several threads (as many as the CPUs this process may
// use), each a range of groups: the same bytes as packing it in slices of 512 rows, each small
// enough for one thread. 4100 rows: the last group is partial.
TEST(KernelsPacked, ThreadedPackingEqualsPackingInSlices) {
  for (const DType type : {DType::Q4_K, DType::F16}) {
    const int64_t rows = 4100, cols = 4608, slice_rows = 512;
    const QuantMatrix m = make_matrix(type, rows, cols, 91);
    const PackedWeights& whole = *m.w.packed;
    ASSERT_GT(whole.groups() * whole.blocks_per_row() * static_cast<int64_t>(whole.block_bytes()),
              int64_t{8} << 20);  // big enough for two threads where there are two CPUs
    const size_t group_bytes = static_cast<size_t>(whole.blocks_per_row()) * whole.block_bytes();
    for (int64_t first = 0; first < rows; first += slice_rows) {
      const int64_t n = std::min(slice_rows, rows - first);
      const auto slice =
          PackedWeights::pack(type, m.bytes.data() + first * m.w.row_bytes, n, cols, m.w.row_bytes);
      for (int64_t g = 0; g < slice->groups(); ++g) {
        const uint8_t* want = slice->group(g);
        const uint8_t* got = whole.group(first / kPackRows + g);
        ASSERT_TRUE(std::equal(want, want + group_bytes, got))
            << dtype_name(type) << " group " << first / kPackRows + g;
      }
    }
  }
}

TEST(KernelsPacked, RejectsShapesItCannotPack) {
  std::vector<uint8_t> bytes(64);
  EXPECT_THROW(PackedWeights::pack(DType::BF16, bytes.data(), 1, 32, 64), Error);
  EXPECT_THROW(PackedWeights::pack(DType::Q4_1, bytes.data(), 1, 48, 30), Error);
  EXPECT_FALSE(PackedWeights::supports(DType::F32, 64));
  EXPECT_FALSE(PackedWeights::supports(DType::F16, 48));
  EXPECT_TRUE(PackedWeights::supports(DType::F16, 64));
}

}  // namespace
}  // namespace inferd::kernels
