// Attention: each ISA's primitives against the reference on odd sizes, and the tiled
// flash-style driver against plain softmax attention computed in double precision.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "random_data.h"
#include "tensor/half.h"

namespace inferd::kernels {
namespace {

using testing::random_floats;

std::vector<uint16_t> random_halves(int64_t n, uint32_t seed) {
  auto f = random_floats(n, seed);
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = fp32_to_fp16(f[i]);
  return h;
}

// Every value of an ISA's output within 1e-5 (relative, plus absolute) of the reference's;
// `where` names the case in the failure message.
void expect_matches_reference(const std::vector<float>& got, const std::vector<float>& want,
                              const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << where << " i=" << i;
}

TEST(AttentionKernels, ScoresMatchReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int block_size : {8, 12, 16, 32}) {
      for (int head_dim : {33, 36, 64, 72}) {
        for (int rows : {1, 3, 5, 9, 16}) {
          auto keys = random_halves(int64_t{head_dim} * block_size, 1);
          auto q = random_floats(int64_t{rows} * head_dim, 2);
          // Rows of the output further apart than a block (as in a chunk of several blocks).
          const int s_stride = block_size + 3;
          std::vector<float> got(static_cast<size_t>(rows * s_stride)), want(got.size());
          table->attention.scores(keys.data(), block_size, head_dim, q.data(), rows, got.data(),
                                  s_stride);
          ref.scores(keys.data(), block_size, head_dim, q.data(), rows, want.data(), s_stride);
          ASSERT_NO_FATAL_FAILURE(expect_matches_reference(
              got, want,
              std::string(table->isa) + " bs=" + std::to_string(block_size) +
                  " hd=" + std::to_string(head_dim) + " rows=" + std::to_string(rows)));
        }
      }
    }
  }
}

// A row's scores and outputs are the same bits whether it is computed alone (a decode row) or
// among many (a prompt tile, whose blocks the SIMD kernels may convert once for all rows).
TEST(AttentionKernels, RowsDoNotDependOnTheRowsBesideThem) {
  for (const KernelTable* table : available_kernels()) {
    for (int block_size : {8, 16, 32}) {
      const int head_dim = 64, rows = 16;
      auto keys = random_halves(int64_t{head_dim} * block_size, 31);
      auto q = random_floats(int64_t{rows} * head_dim, 32);
      std::vector<float> together(static_cast<size_t>(rows * block_size)), alone(together.size());
      table->attention.scores(keys.data(), block_size, head_dim, q.data(), rows, together.data(),
                              block_size);
      for (int r = 0; r < rows; ++r)
        table->attention.scores(keys.data(), block_size, head_dim, q.data() + r * head_dim, 1,
                                alone.data() + r * block_size, block_size);
      EXPECT_EQ(together, alone) << table->isa << " scores, bs=" << block_size;
      auto values = random_halves(int64_t{block_size} * head_dim, 33);
      auto p = random_floats(int64_t{rows} * block_size, 34);
      std::vector<float> acc_together = random_floats(int64_t{rows} * head_dim, 35);
      std::vector<float> acc_alone = acc_together;
      table->attention.accumulate(values.data(), block_size, head_dim, p.data(), block_size, rows,
                                  acc_together.data());
      for (int r = 0; r < rows; ++r)
        table->attention.accumulate(values.data(), block_size, head_dim, p.data() + r * block_size,
                                    block_size, 1, acc_alone.data() + r * head_dim);
      EXPECT_EQ(acc_together, acc_alone) << table->isa << " accumulate, bs=" << block_size;
    }
  }
}

TEST(AttentionKernels, AccumulateMatchesReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int n_keys : {1, 5, 16}) {
      for (int head_dim : {33, 36, 64, 72, 128}) {
        for (int rows : {1, 3, 5, 9, 16}) {
          const int p_stride = 16;
          auto values = random_halves(int64_t{n_keys} * head_dim, 3);
          auto p = random_floats(int64_t{rows} * p_stride, 4);
          auto start = random_floats(int64_t{rows} * head_dim, 5);
          std::vector<float> got = start, want = start;
          table->attention.accumulate(values.data(), n_keys, head_dim, p.data(), p_stride, rows,
                                      got.data());
          ref.accumulate(values.data(), n_keys, head_dim, p.data(), p_stride, rows, want.data());
          ASSERT_NO_FATAL_FAILURE(expect_matches_reference(
              got, want,
              std::string(table->isa) + " keys=" + std::to_string(n_keys) +
                  " hd=" + std::to_string(head_dim) + " rows=" + std::to_string(rows)));
        }
      }
    }
  }
}

// accumulate_blocks over blocks scattered in memory (the last one part full) gives the very
// bits of `accumulate` called block by block, and so matches the reference as that does.
TEST(AttentionKernels, AccumulateBlocksIsAccumulateBlockByBlock) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int block_size : {1, 8, 16, 32}) {
      for (int n_keys : {1, 7, 16, 45, 256}) {
        for (int head_dim : {36, 64, 80, 256}) {
          for (int rows : {1, 4, 5, 8, 16}) {
            const int n_blocks = (n_keys + block_size - 1) / block_size;
            // Blocks in reverse order, a block's worth of room apart, as a paged cache has them.
            const int64_t block_values = int64_t{block_size} * head_dim;
            auto pool = random_halves(2 * n_blocks * block_values, 40 + head_dim);
            std::vector<const uint16_t*> blocks(static_cast<size_t>(n_blocks));
            for (int i = 0; i < n_blocks; ++i)
              blocks[static_cast<size_t>(i)] = pool.data() + 2 * (n_blocks - 1 - i) * block_values;
            const int p_stride = n_blocks * block_size + 3;
            auto p = random_floats(int64_t{rows} * p_stride, 41);
            auto start = random_floats(int64_t{rows} * head_dim, 42);
            std::vector<float> got = start, by_block = start, want = start;
            table->attention.accumulate_blocks(blocks.data(), block_size, n_keys, head_dim,
                                               p.data(), p_stride, rows, got.data());
            for (int i = 0; i < n_blocks; ++i) {
              const int j0 = i * block_size, keys = std::min(block_size, n_keys - j0);
              table->attention.accumulate(blocks[static_cast<size_t>(i)], keys, head_dim,
                                          p.data() + j0, p_stride, rows, by_block.data());
              ref.accumulate(blocks[static_cast<size_t>(i)], keys, head_dim, p.data() + j0,
                             p_stride, rows, want.data());
            }
            const std::string where =
                std::string(table->isa) + " bs=" + std::to_string(block_size) +
                " keys=" + std::to_string(n_keys) + " hd=" + std::to_string(head_dim) +
                " rows=" + std::to_string(rows);
            ASSERT_EQ(got, by_block) << where;
            ASSERT_NO_FATAL_FAILURE(expect_matches_reference(got, want, where));
          }
        }
      }
    }
  }
}

// Q8_0 KV storage (kv/kv_cache.h): int8 values with a float scale per 32 dimensions.
std::vector<int8_t> random_int8(int64_t n, uint32_t seed) {
  auto f = random_floats(n, seed, 60.0f);
  std::vector<int8_t> q(f.size());
  for (size_t i = 0; i < f.size(); ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::lrintf(f[i]), -127L, 127L));
  return q;
}
std::vector<float> random_scales(int64_t n, uint32_t seed) {
  auto f = random_floats(n, seed);
  for (float& x : f) x = 0.001f + std::fabs(x) * 0.01f;
  return f;
}

TEST(AttentionKernels, ScoresQ8MatchReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int block_size : {5, 8, 12, 16, 32}) {
      for (int head_dim : {32, 64, 96}) {
        for (int rows : {1, 3, 5, 9, 16}) {
          auto keys = random_int8(int64_t{head_dim} * block_size, 21);
          auto scales = random_scales(int64_t{head_dim / 32} * block_size, 22);
          auto q = random_floats(int64_t{rows} * head_dim, 23);
          const int s_stride = block_size + 3;
          std::vector<float> got(static_cast<size_t>(rows * s_stride)), want(got.size());
          table->attention.scores_q8(keys.data(), scales.data(), block_size, head_dim, q.data(),
                                     rows, got.data(), s_stride);
          ref.scores_q8(keys.data(), scales.data(), block_size, head_dim, q.data(), rows,
                        want.data(), s_stride);
          ASSERT_NO_FATAL_FAILURE(expect_matches_reference(
              got, want,
              std::string(table->isa) + " bs=" + std::to_string(block_size) +
                  " hd=" + std::to_string(head_dim) + " rows=" + std::to_string(rows)));
        }
      }
    }
  }
}

TEST(AttentionKernels, AccumulateQ8MatchesReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int n_keys : {1, 5, 16}) {
      for (int head_dim : {32, 64, 96, 128}) {
        for (int rows : {1, 2, 3, 5, 9, 16}) {
          const int p_stride = 16;
          auto values = random_int8(int64_t{n_keys} * head_dim, 24);
          auto scales = random_scales(int64_t{n_keys} * (head_dim / 32), 25);
          auto p = random_floats(int64_t{rows} * p_stride, 26);
          auto start = random_floats(int64_t{rows} * head_dim, 27);
          std::vector<float> got = start, want = start;
          table->attention.accumulate_q8(values.data(), scales.data(), n_keys, head_dim, p.data(),
                                         p_stride, rows, got.data());
          ref.accumulate_q8(values.data(), scales.data(), n_keys, head_dim, p.data(), p_stride,
                            rows, want.data());
          ASSERT_NO_FATAL_FAILURE(expect_matches_reference(
              got, want,
              std::string(table->isa) + " keys=" + std::to_string(n_keys) +
                  " hd=" + std::to_string(head_dim) + " rows=" + std::to_string(rows)));
        }
      }
    }
  }
}

// Q4_0 KV storage (kv/kv_cache.h): every byte is two valid nibbles; fp16 scales.
std::vector<uint8_t> random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}
std::vector<uint16_t> random_half_scales(int64_t n, uint32_t seed) {
  std::vector<uint16_t> out;
  for (const float x : random_scales(n, seed)) out.push_back(fp32_to_fp16(x));
  return out;
}

// `run(kernels, out)` on every ISA against the reference, each from a copy of `start`.
template <typename Run>
void expect_isas_match_reference(const std::vector<float>& start, const std::string& where,
                                 Run run) {
  std::vector<float> want = start;
  run(reference_kernels().attention, want);
  for (const KernelTable* table : available_kernels()) {
    std::vector<float> got = start;
    run(table->attention, got);
    ASSERT_NO_FATAL_FAILURE(expect_matches_reference(got, want, std::string(table->isa) + where));
  }
}

// Block sizes that are and are not multiples of the SIMD widths (8 and 16 keys), head sizes of
// one to five groups of 32, row counts on either side of each ISA's register groups.
TEST(AttentionKernels, ScoresQ4MatchReference) {
  for (int block_size : {5, 8, 12, 16, 24, 32}) {
    for (int head_dim : {32, 64, 96, 160}) {
      for (int rows : {1, 3, 4, 5, 9, 16}) {
        const auto keys = random_bytes(int64_t{head_dim / 2} * block_size, 41);
        const auto scales = random_half_scales(int64_t{head_dim / 32} * block_size, 42);
        const auto q = random_floats(int64_t{rows} * head_dim, 43);
        const int s_stride = block_size + 3;
        ASSERT_NO_FATAL_FAILURE(expect_isas_match_reference(
            std::vector<float>(static_cast<size_t>(rows * s_stride)),
            " bs=" + std::to_string(block_size) + " hd=" + std::to_string(head_dim) +
                " rows=" + std::to_string(rows),
            [&](const AttentionKernels& k, std::vector<float>& s) {
              k.scores_q4(keys.data(), scales.data(), block_size, head_dim, q.data(), rows,
                          s.data(), s_stride);
            }));
      }
    }
  }
}

TEST(AttentionKernels, AccumulateQ4MatchesReference) {
  for (int n_keys : {1, 5, 16}) {
    for (int head_dim : {32, 64, 96, 128, 160}) {
      for (int rows : {1, 2, 3, 4, 5, 8, 9, 16}) {
        const int p_stride = 16;
        const auto values = random_bytes(int64_t{n_keys} * head_dim / 2, 44);
        const auto scales = random_half_scales(int64_t{n_keys} * (head_dim / 32), 45);
        const auto p = random_floats(int64_t{rows} * p_stride, 46);
        ASSERT_NO_FATAL_FAILURE(expect_isas_match_reference(
            random_floats(int64_t{rows} * head_dim, 47),
            " keys=" + std::to_string(n_keys) + " hd=" + std::to_string(head_dim) +
                " rows=" + std::to_string(rows),
            [&](const AttentionKernels& k, std::vector<float>& acc) {
              k.accumulate_q4(values.data(), scales.data(), n_keys, head_dim, p.data(), p_stride,
                              rows, acc.data());
            }));
      }
    }
  }
}

// As with F16: a row's Q4_0 scores and outputs are the same bits alone (decode) or among many
// (a prompt tile), whatever register groups the rows fall into.
TEST(AttentionKernels, Q4RowsDoNotDependOnTheRowsBesideThem) {
  for (const KernelTable* table : available_kernels()) {
    const int block_size = 16, head_dim = 96, rows = 16;
    const auto keys = random_bytes(int64_t{head_dim / 2} * block_size, 48);
    const auto key_scales = random_half_scales(int64_t{head_dim / 32} * block_size, 49);
    const auto q = random_floats(int64_t{rows} * head_dim, 50);
    std::vector<float> together(static_cast<size_t>(rows * block_size)), alone(together.size());
    table->attention.scores_q4(keys.data(), key_scales.data(), block_size, head_dim, q.data(), rows,
                               together.data(), block_size);
    for (int r = 0; r < rows; ++r)
      table->attention.scores_q4(keys.data(), key_scales.data(), block_size, head_dim,
                                 q.data() + r * head_dim, 1, alone.data() + r * block_size,
                                 block_size);
    EXPECT_EQ(together, alone) << table->isa << " scores_q4";
    const auto values = random_bytes(int64_t{block_size} * head_dim / 2, 51);
    const auto value_scales = random_half_scales(int64_t{block_size} * (head_dim / 32), 52);
    const auto p = random_floats(int64_t{rows} * block_size, 53);
    std::vector<float> acc_together = random_floats(int64_t{rows} * head_dim, 54);
    std::vector<float> acc_alone = acc_together;
    table->attention.accumulate_q4(values.data(), value_scales.data(), block_size, head_dim,
                                   p.data(), block_size, rows, acc_together.data());
    for (int r = 0; r < rows; ++r)
      table->attention.accumulate_q4(values.data(), value_scales.data(), block_size, head_dim,
                                     p.data() + r * block_size, block_size, 1,
                                     acc_alone.data() + r * head_dim);
    EXPECT_EQ(acc_together, acc_alone) << table->isa << " accumulate_q4";
  }
}

TEST(AttentionKernels, ExpSumMatchesReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int n : {1, 7, 8, 16, 29}) {
      auto x = random_floats(n, static_cast<uint32_t>(n), 20.0f);
      x[0] = -std::numeric_limits<float>::infinity();  // a masked score
      if (n > 2) x[2] = -200.0f;                       // far below the float range of exp
      std::vector<float> got = x, want = x;
      const float max = 3.0f;
      const float sum = table->attention.exp_sum(got.data(), n, max);
      const float sum_ref = ref.exp_sum(want.data(), n, max);
      EXPECT_NEAR(sum, sum_ref, 1e-6 * sum_ref) << table->isa << " n=" << n;
      EXPECT_EQ(got[0], 0.0f) << table->isa;
      for (int i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6 * want[i] + 1e-30) << table->isa << " i=" << i;
    }
  }
}

// Scaling is one exact product per value, so every ISA must give the reference's bits; the max
// starts from the value passed in (the running max of earlier chunks).
TEST(AttentionKernels, ScaleMaxMatchesReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int n : {0, 1, 7, 8, 15, 16, 17, 33, 256}) {
      auto x = random_floats(n, static_cast<uint32_t>(n + 300), 10.0f);
      for (float start : {-std::numeric_limits<float>::infinity(), 0.5f, 1000.0f}) {
        std::vector<float> got = x, want = x;
        const float got_max = table->attention.scale_max(got.data(), n, 0.125f, start);
        const float want_max = ref.scale_max(want.data(), n, 0.125f, start);
        EXPECT_EQ(got_max, want_max) << table->isa << " n=" << n << " start=" << start;
        EXPECT_EQ(got, want) << table->isa << " n=" << n;
      }
    }
  }
}

TEST(AttentionKernels, RoundToFp16MatchesReference) {
  const AttentionKernels& ref = reference_kernels().attention;
  for (const KernelTable* table : available_kernels()) {
    for (int n : {1, 7, 8, 17, 64, 67}) {
      auto x = random_floats(n, static_cast<uint32_t>(n + 100), 4.0f);
      // Values at the edges: a tie between two halves (rounds to even), a subnormal half,
      // one that underflows to zero, and one past the largest half (inf).
      const float edges[] = {1.0f + 1.0f / 2048, 3.0e-6f, 1.0e-9f, 70000.0f, -0.0f, -65520.0f};
      for (int i = 0; i < n && i < 6; ++i) x[static_cast<size_t>(i)] = edges[i];
      std::vector<float> got = x, want = x;
      table->attention.round_to_fp16(got.data(), n);
      ref.round_to_fp16(want.data(), n);
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << table->isa << " n=" << n << " x=" << x[static_cast<size_t>(i)];
    }
  }
}

// Plain causal softmax attention over q, k, v (rounded to f16 first when round_f16), in double;
// with a window, only keys pos - window + 1 .. pos; with a softcap, scores c * tanh(s / c); with
// sinks ([n_heads]), head h's softmax also takes sinks[h] as one more logit, of no value; with a
// value_dim, values (and the output) have heads of that size instead of head_dim.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t pos, int n_heads,
                                    int n_kv_heads, int head_dim, float scale,
                                    bool round_f16 = true, int window = 0, float softcap = 0,
                                    const float* sinks = nullptr, int value_dim = 0) {
  auto r16 = [round_f16](float x) {
    return round_f16 ? double(fp16_to_fp32(fp32_to_fp16(x))) : double(x);
  };
  const int vd = value_dim > 0 ? value_dim : head_dim;
  const int group = n_heads / n_kv_heads, kv_dim = n_kv_heads * head_dim, v_dim = n_kv_heads * vd;
  std::vector<double> out(static_cast<size_t>(n_heads * vd), 0.0);
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    std::vector<double> w(static_cast<size_t>(pos + 1), 0.0);
    double max = -1e300, sum = 0;
    for (int64_t j = first; j <= pos; ++j) {
      double s = 0;
      for (int d = 0; d < head_dim; ++d)
        s += r16(q[h * head_dim + d]) * r16(k[j * kv_dim + kvh * head_dim + d]);
      w[j] = softcap > 0 ? softcap * std::tanh(s * scale / softcap) : s * scale;
      max = std::max(max, w[j]);
    }
    if (sinks != nullptr) max = std::max(max, double(sinks[h]));
    for (int64_t j = first; j <= pos; ++j) sum += (w[j] = std::exp(w[j] - max));
    if (sinks != nullptr) sum += std::exp(double(sinks[h]) - max);
    for (int64_t j = first; j <= pos; ++j)
      for (int d = 0; d < vd; ++d)
        out[h * vd + d] += w[j] / sum * r16(v[j * v_dim + kvh * vd + d]);
  }
  return out;
}

// Attention of tokens 0..n_tokens-1 of one sequence (positions 0..n_tokens-1) through
// attend_tile, tile by tile as the model runs it; the tile starting at token t0 reads the block
// table table_for(t0). Returns [n_tokens, n_heads * shape.value_head_dim()].
template <typename TableFor>
std::vector<float> attend_tiles(const std::vector<float>& q, int n_tokens,
                                const AttentionShape& shape, const kv::KvCache& cache,
                                const KernelTable& table, TableFor table_for, int layer = 0) {
  const int q_dim = shape.n_heads * shape.head_dim, out_dim = shape.n_heads * shape.value_head_dim();
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t) positions[static_cast<size_t>(t)] = t;
  std::vector<float> out(static_cast<size_t>(n_tokens * out_dim));
  const int tile_tokens = attention_tile_tokens(shape);
  for (int t0 = 0; t0 < n_tokens; t0 += tile_tokens) {
    const std::vector<int32_t> block_table = table_for(t0);
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      const AttentionTile tile{
          &q[static_cast<size_t>(t0 * q_dim)], &positions[static_cast<size_t>(t0)],
          std::min(tile_tokens, n_tokens - t0), h, &out[static_cast<size_t>(t0 * out_dim)]};
      attend_tile(tile, cache, layer, block_table, shape, nullptr, table);
    }
  }
  return out;
}

struct AttentionCase {
  int n_heads, n_kv_heads, block_size, n_tokens;
};

// Random K and V of tokens 0..n_tokens-1 ([n_tokens, n_kv_heads * head_dim] and [n_tokens,
// n_kv_heads * value_dim], from seeds `seed` and `seed + 1`), written to layer 0 of `cache`
// through `block_table`.
std::pair<std::vector<float>, std::vector<float>> write_random_kv(
    kv::KvCache& cache, const std::vector<int32_t>& block_table, int n_tokens, uint32_t seed,
    int layer = 0) {
  const int kv_dim = cache.n_kv_heads(layer) * cache.head_dim(layer);
  const int v_dim = cache.n_kv_heads(layer) * cache.value_dim(layer);
  const int block_size = cache.block_size();
  auto k = random_floats(int64_t{n_tokens} * kv_dim, seed);
  auto v = random_floats(int64_t{n_tokens} * v_dim, seed + 1);
  for (int t = 0; t < n_tokens; ++t) {
    const int64_t slot =
        int64_t{block_table[static_cast<size_t>(t / block_size)]} * block_size + t % block_size;
    cache.write(layer, slot, &k[static_cast<size_t>(t * kv_dim)],
                &v[static_cast<size_t>(t * v_dim)]);
  }
  return {std::move(k), std::move(v)};
}

TEST(Attention, TilesMatchPlainSoftmaxAttention) {
  const int head_dim = 40;
  // GQA with two block sizes, and MQA with 32 query heads on one kv head (32 rows a tile); the
  // long cases span several chunks of keys (kChunkKeys in attention.cpp), so the softmax state
  // is carried from one chunk to the next.
  for (const auto [n_heads, n_kv_heads, block_size, n_tokens] :
       {AttentionCase{6, 2, 8, 37}, AttentionCase{6, 2, 16, 37}, AttentionCase{32, 1, 16, 37},
        AttentionCase{6, 2, 8, 300}, AttentionCase{32, 1, 16, 300}}) {
    const int n_blocks = (n_tokens + block_size - 1) / block_size + 3;
    kv::KvCacheConfig config{1, n_kv_heads, head_dim, block_size, n_blocks, DType::F16};
    kv::KvCache cache(config);
    // The sequence's blocks are deliberately not in order.
    std::vector<int32_t> block_table;
    for (int b = 0; b < n_blocks; ++b) block_table.push_back((b * 7 + 3) % n_blocks);
    ASSERT_NE(n_blocks % 7, 0);  // so that the table is a permutation
    const int q_dim = n_heads * head_dim;
    const auto [k, v] = write_random_kv(cache, block_table, n_tokens, 10);
    auto q = random_floats(int64_t{n_tokens} * q_dim, 12, 2.0f);
    const AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim))};
    std::vector<std::vector<double>> want;
    for (int t = 0; t < n_tokens; ++t) {
      std::vector<float> qt(q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
      want.push_back(naive_attention(qt, k, v, t, n_heads, n_kv_heads, head_dim, shape.scale));
    }
    for (const KernelTable* table : available_kernels()) {
      const std::vector<float> out =
          attend_tiles(q, n_tokens, shape, cache, *table, [&](int) { return block_table; });
      for (int t = 0; t < n_tokens; ++t) {
        for (int i = 0; i < q_dim; ++i)
          ASSERT_NEAR(out[static_cast<size_t>(t * q_dim + i)],
                      want[static_cast<size_t>(t)][static_cast<size_t>(i)], 2e-5)
              << table->isa << " heads " << n_heads << "/" << n_kv_heads << " block_size "
              << block_size << " token " << t << " value " << i;
      }
    }
  }
}

// A cache whose sliding layers have their own kv heads and head size (Gemma 4: 2 kv heads of
// 512 on the sliding layer, 1 of 64 on the full one): each layer stores and attends with its
// own, 512-dimension heads included, on every ISA.
TEST(Attention, LayersOfTwoHeadSizesInOneCache) {
  const int block_size = 16, n_tokens = 45, n_blocks = 4;
  kv::KvCacheConfig config{2, 1, 64, block_size, n_blocks, DType::F16};
  config.sliding_layers = {false, true};
  config.sliding_window = 1000;
  config.sliding_n_kv_heads = 2;
  config.sliding_head_dim = 512;
  kv::KvCache cache(config);
  ASSERT_EQ(cache.groups().size(), 2u);
  EXPECT_EQ(cache.head_dim(0), 64);
  EXPECT_EQ(cache.n_kv_heads(0), 1);
  EXPECT_EQ(cache.head_dim(1), 512);
  EXPECT_EQ(cache.n_kv_heads(1), 2);
  // A block of the sliding group holds 2 heads of 512 keys and values of 16 tokens in f16.
  EXPECT_EQ(cache.groups()[1].block_bytes, size_t{2} * 2 * 512 * block_size * 2);
  EXPECT_EQ(cache.groups()[0].block_bytes, size_t{1} * 2 * 64 * block_size * 2);
  const std::vector<int32_t> table = {2, 0, 3, 1};
  struct Layer {
    int layer, n_heads, n_kv_heads, head_dim;
  };
  const auto [k0, v0] = write_random_kv(cache, table, n_tokens, 20, 0);
  const auto [k1, v1] = write_random_kv(cache, table, n_tokens, 30, 1);
  for (const Layer l : {Layer{0, 4, 1, 64}, Layer{1, 8, 2, 512}}) {
    const std::vector<float>& k = l.layer == 0 ? k0 : k1;
    const std::vector<float>& v = l.layer == 0 ? v0 : v1;
    const int q_dim = l.n_heads * l.head_dim;
    const auto q = random_floats(int64_t{n_tokens} * q_dim, 40 + l.layer, 0.2f);
    const AttentionShape shape{l.n_heads, l.n_kv_heads, l.head_dim, 1.0f / std::sqrt(float(l.head_dim))};
    for (const KernelTable* kernels : available_kernels()) {
      const std::vector<float> out =
          attend_tiles(q, n_tokens, shape, cache, *kernels, [&](int) { return table; }, l.layer);
      for (int t = 0; t < n_tokens; ++t) {
        std::vector<float> qt(q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
        const std::vector<double> want =
            naive_attention(qt, k, v, t, l.n_heads, l.n_kv_heads, l.head_dim, shape.scale);
        for (int i = 0; i < q_dim; ++i)
          ASSERT_NEAR(out[static_cast<size_t>(t * q_dim + i)], want[static_cast<size_t>(i)], 2e-5)
              << kernels->isa << " layer " << l.layer << " token " << t << " value " << i;
      }
    }
  }
}

// Sliding windows (Gemma's mask: key j hidden from query p when p - j >= window) and
// soft-capped scores, on every ISA, against the plain computation. The blocks wholly before a
// tile's window are marked -1 in the table it gets: attend_tile must not touch them (a sliding
// layer's old blocks may already be reused).
TEST(Attention, SlidingWindowAndSoftcapMatchPlainAttention) {
  const int head_dim = 32, n_heads = 4, n_kv_heads = 2, block_size = 8, n_tokens = 90;
  const int n_blocks = (n_tokens + block_size - 1) / block_size;
  kv::KvCacheConfig config{1, n_kv_heads, head_dim, block_size, n_blocks, DType::F16};
  kv::KvCache cache(config);
  std::vector<int32_t> block_table;
  for (int b = 0; b < n_blocks; ++b) block_table.push_back(b);
  const int q_dim = n_heads * head_dim;
  const auto [k, v] = write_random_kv(cache, block_table, n_tokens, 20);
  auto q = random_floats(int64_t{n_tokens} * q_dim, 22, 2.0f);
  for (const auto& [window, softcap] :
       {std::pair{1, 0.0f}, std::pair{13, 0.0f}, std::pair{40, 0.0f}, std::pair{0, 3.0f},
        std::pair{21, 3.0f}}) {
    const AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)),
                               window,  softcap};
    // The table a tile gets: blocks wholly before its first token's window marked -1.
    const auto visible_from = [&](int t0) {
      std::vector<int32_t> visible = block_table;
      if (window > 0) {
        const int first_key = std::max(0, t0 - window + 1);
        for (int b = 0; (b + 1) * block_size <= first_key; ++b)
          visible[static_cast<size_t>(b)] = -1;
      }
      return visible;
    };
    for (const KernelTable* table : available_kernels()) {
      const std::vector<float> out = attend_tiles(q, n_tokens, shape, cache, *table, visible_from);
      for (int t = 0; t < n_tokens; ++t) {
        std::vector<float> qt(q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
        const auto want = naive_attention(qt, k, v, t, n_heads, n_kv_heads, head_dim, shape.scale,
                                          true, window, softcap);
        for (int i = 0; i < q_dim; ++i)
          ASSERT_NEAR(out[static_cast<size_t>(t * q_dim + i)], want[static_cast<size_t>(i)], 2e-5)
              << table->isa << " window " << window << " softcap " << softcap << " token " << t;
      }
    }
  }
}

// A token's attention output is the same bits whether it is computed alone (decode) or in a
// tile with its neighbours (prefill): chunks of keys lie at fixed positions and each row's sums
// run in one order whatever rows share its tile. Prefix caching and chunked prefill rely on it:
// cached K/V and freshly computed K/V must agree exactly for outputs not to depend on them.
TEST(Attention, TokenOutputDoesNotDependOnItsTile) {
  const int head_dim = 64, n_tokens = 600, block_size = 16;
  const int n_blocks = (n_tokens + block_size - 1) / block_size;
  for (const DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (const auto& [n_heads, n_kv_heads] : {std::pair{9, 3}, std::pair{8, 2}}) {
      kv::KvCache cache({1, n_kv_heads, head_dim, block_size, n_blocks, type, type});
      std::vector<int32_t> block_table;
      for (int b = 0; b < n_blocks; ++b) block_table.push_back(b);
      const int q_dim = n_heads * head_dim;
      write_random_kv(cache, block_table, n_tokens, 30);
      auto q = random_floats(int64_t{n_tokens} * q_dim, 32, 2.0f);
      const auto sinks = random_floats(n_heads, 33, 3.0f);
      for (const int window : {0, 300}) {
        AttentionShape shape{n_heads, n_kv_heads, head_dim, 0.125f, window};
        if (window > 0) shape.sinks = sinks.data();  // sliding with sinks, as gpt-oss has them
        for (const KernelTable* table : available_kernels()) {
          const std::vector<float> tiled =
              attend_tiles(q, n_tokens, shape, cache, *table, [&](int) { return block_table; });
          std::vector<float> alone(static_cast<size_t>(q_dim));
          for (int t = 0; t < n_tokens; t += 7) {
            for (int h = 0; h < n_kv_heads; ++h) {
              const AttentionTile tile{&q[static_cast<size_t>(t * q_dim)], &t, 1, h, alone.data()};
              attend_tile(tile, cache, 0, block_table, shape, nullptr, *table);
            }
            ASSERT_EQ(0, std::memcmp(alone.data(), &tiled[static_cast<size_t>(t * q_dim)],
                                     alone.size() * sizeof(float)))
                << table->isa << " " << dtype_name(type) << " heads " << n_heads << "/"
                << n_kv_heads << " window " << window << " token " << t;
          }
        }
      }
    }
  }
}

// One token's values as the Q8_0 cache stores them: a scale of amax / 127 (rounded to fp16, as
// Q8_0) per 32 values and every value within about half a step of its input. Head size 96, which
// is stored unrotated.
TEST(Attention, Q8CacheStoresEachValueWithinHalfAStep) {
  const int head_dim = 96, n_kv_heads = 2, block_size = 16;
  kv::KvCache cache({1, n_kv_heads, head_dim, block_size, 2, DType::Q8_0, DType::Q8_0});
  ASSERT_EQ(cache.key_rotation(0) + cache.value_rotation(0), 0);
  auto k = random_floats(n_kv_heads * head_dim, 40, 3.0f);
  auto v = random_floats(n_kv_heads * head_dim, 41, 3.0f);
  const int pos = 5;
  cache.write(0, block_size + pos, k.data(), v.data());
  for (int h = 0; h < n_kv_heads; ++h) {
    for (int g = 0; g < head_dim / 32; ++g) {
      float amax_k = 0, amax_v = 0;
      for (int i = 0; i < 32; ++i) {
        amax_k = std::max(amax_k, std::fabs(k[static_cast<size_t>(h * head_dim + g * 32 + i)]));
        amax_v = std::max(amax_v, std::fabs(v[static_cast<size_t>(h * head_dim + g * 32 + i)]));
      }
      const float dk = cache.key_scales(0, 1, h)[g * block_size + pos];
      const float dv = cache.value_scales(0, 1, h)[pos * (head_dim / 32) + g];
      EXPECT_EQ(dk, fp16_to_fp32(fp32_to_fp16(amax_k / 127)));
      EXPECT_EQ(dv, fp16_to_fp32(fp32_to_fp16(amax_v / 127)));
      for (int i = 0; i < 32; ++i) {
        const int d = g * 32 + i;
        const float key = dk * cache.keys_q8(0, 1, h)[d * block_size + pos];
        const float value = dv * cache.values_q8(0, 1, h)[pos * head_dim + d];
        // Half a step of the exact scale, plus what rounding it to fp16 moves a value of up
        // to 127 steps.
        const float tol_k = 0.5f * amax_k / 127 + 127 * std::fabs(dk - amax_k / 127) + 1e-6f;
        const float tol_v = 0.5f * amax_v / 127 + 127 * std::fabs(dv - amax_v / 127) + 1e-6f;
        ASSERT_LE(std::fabs(key - k[static_cast<size_t>(h * head_dim + d)]), tol_k);
        ASSERT_LE(std::fabs(value - v[static_cast<size_t>(h * head_dim + d)]), tol_v);
      }
    }
  }
  // The other slots of the block were never written and read as zero.
  EXPECT_EQ(cache.keys_q8(0, 1, 0)[pos + 1], 0);
  EXPECT_EQ(cache.key_scales(0, 1, 0)[pos + 1], 0.0f);
}

// Dimension d of key and of value `pos` of a block of a Q4_0 cache's layer 0, kv head h, read
// back from the layout kv_cache.h describes: keys two dimensions a byte ([head_dim / 2,
// block_size]), values as Q4_0 blocks ([block_size, head_dim / 2]), fp16 scales.
float q4_key(const kv::KvCache& cache, int32_t block, int h, int d, int pos) {
  const int block_size = cache.block_size();
  const uint8_t byte = cache.keys_q4(0, block, h)[d / 2 * block_size + pos];
  const float scale = fp16_to_fp32(cache.key_scales_q4(0, block, h)[d / 32 * block_size + pos]);
  return scale * static_cast<float>((d % 2 == 0 ? byte & 0x0F : byte >> 4) - 8);
}
float q4_value(const kv::KvCache& cache, int32_t block, int h, int d, int pos) {
  const int head_dim = cache.value_dim(0);
  const uint8_t byte = cache.values_q4(0, block, h)[pos * head_dim / 2 + d / 32 * 16 + d % 16];
  const float scale =
      fp16_to_fp32(cache.value_scales_q4(0, block, h)[pos * (head_dim / 32) + d / 32]);
  return scale * static_cast<float>((d % 32 < 16 ? byte & 0x0F : byte >> 4) - 8);
}

// One token's keys and values as the Q4_0 cache stores them: per 32 values the nibbles and fp16
// scale of llama.cpp's Q4_0 block (the value of largest magnitude maps to -8), keys spread over
// the transposed layout, every value within half a step of its input (a whole step where the
// opposite extreme is clamped to 7). Head size 96, which is stored unrotated.
TEST(Attention, Q4CacheStoresTheBlocksOfQ4_0) {
  const int head_dim = 96, n_kv_heads = 2, block_size = 16, pos = 5;
  kv::KvCache cache({1, n_kv_heads, head_dim, block_size, 2, DType::Q4_0, DType::Q4_0});
  ASSERT_EQ(cache.key_rotation(0), 0);
  ASSERT_EQ(cache.value_rotation(0), 0);
  auto k = random_floats(n_kv_heads * head_dim, 42, 3.0f);
  auto v = random_floats(n_kv_heads * head_dim, 43, 3.0f);
  k[3] = 40.0f;  // a group whose extremes are opposite: -40 would be +8, and clamps to 7
  k[7] = -40.0f;
  cache.write(0, block_size + pos, k.data(), v.data());
  for (int h = 0; h < n_kv_heads; ++h) {
    for (const bool keys : {true, false}) {
      const float* x = (keys ? k : v).data() + h * head_dim;
      for (int g = 0; g < head_dim / 32; ++g) {
        float max = 0;  // the signed value of largest magnitude
        for (int i = 0; i < 32; ++i)
          if (std::fabs(x[g * 32 + i]) > std::fabs(max)) max = x[g * 32 + i];
        const float d_exact = max / -8, d = fp16_to_fp32(fp32_to_fp16(d_exact));
        for (int i = 0; i < 32; ++i) {
          const int dim = g * 32 + i;
          const float held = keys ? q4_key(cache, 1, h, dim, pos) : q4_value(cache, 1, h, dim, pos);
          if (i == 0) {
            const uint16_t scale = keys ? cache.key_scales_q4(0, 1, h)[g * block_size + pos]
                                        : cache.value_scales_q4(0, 1, h)[pos * (head_dim / 32) + g];
            EXPECT_EQ(fp16_to_fp32(scale), d) << "head " << h << " group " << g;
          }
          const bool clamped = x[dim] / d_exact + 8 > 15.5f;
          const float tol =
              std::fabs(d_exact) * (clamped ? 1.0f : 0.5f) + 8 * std::fabs(d - d_exact) + 1e-6f;
          ASSERT_LE(std::fabs(held - x[dim]), tol) << (keys ? "key" : "value") << " " << dim;
        }
      }
    }
  }
  EXPECT_EQ(q4_key(cache, 1, 0, 3, pos), 40.0f);  // the extreme itself is exact
  EXPECT_EQ(q4_key(cache, 1, 0, 7, pos), -35.0f);
  // The other slots of the block were never written and read as zero.
  EXPECT_EQ(cache.keys_q4(0, 1, 0)[pos + 1], 0);
  EXPECT_EQ(cache.key_scales_q4(0, 1, 0)[pos + 1], 0);
  // 18 bytes per 32 values, as llama.cpp's Q4_0, records rounded up to 64 bytes.
  EXPECT_EQ(cache.key_block_bytes(0), (size_t{block_size} * head_dim / 32 * 18 + 63) / 64 * 64);
}

// The rotation of Q8_0 and Q4_0 heads (kv_cache.h): orthonormal and its own inverse; keys rotated
// as wide as the largest power of two dividing a head size that is a multiple of 64, values in
// pieces of 64; other head sizes and F16 unrotated.
TEST(Attention, QuantizedCacheRotatesHeadsOfMultiplesOf64) {
  auto x = random_floats(256, 70);
  auto y = x;
  kv::hadamard_rotate(y.data(), 256, 64);
  double norm_x = 0, norm_y = 0;
  for (size_t i = 0; i < x.size(); ++i) norm_x += x[i] * x[i], norm_y += y[i] * y[i];
  EXPECT_NEAR(norm_y, norm_x, 1e-4 * norm_x);
  kv::hadamard_rotate(y.data(), 256, 64);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5f) << i;
  for (const auto& [head_dim, key_rotation, value_rotation] :
       {std::tuple{64, 64, 64}, std::tuple{128, 128, 64}, std::tuple{192, 64, 64},
        std::tuple{256, 256, 64}, std::tuple{96, 0, 0}, std::tuple{32, 0, 0}}) {
    kv::KvCache q4({1, 1, head_dim, 16, 1, DType::Q4_0, DType::Q4_0});
    EXPECT_EQ(q4.key_rotation(0), key_rotation) << head_dim;
    EXPECT_EQ(q4.value_rotation(0), value_rotation) << head_dim;
    kv::KvCache q8({1, 1, head_dim, 16, 1, DType::Q8_0, DType::F16});
    EXPECT_EQ(q8.key_rotation(0), key_rotation) << head_dim;
    EXPECT_EQ(q8.value_rotation(0), 0) << head_dim;
  }
  // A head with an outlier dimension, as real keys have, stored and read back: rotated back, it
  // is the input up to Q4_0's rounding (a wrong rotation leaves an error of the input's size).
  const int head_dim = 128;
  auto k = random_floats(head_dim, 71, 0.5f);
  k[5] = 30.0f;
  std::vector<float> held(head_dim);
  kv::KvCache cache({1, 1, head_dim, 16, 1, DType::Q4_0, DType::Q4_0});
  cache.write(0, 0, k.data(), k.data());
  for (int d = 0; d < head_dim; ++d) held[static_cast<size_t>(d)] = q4_key(cache, 0, 0, d, 0);
  kv::hadamard_rotate(held.data(), head_dim, cache.key_rotation(0));
  double norm = 0, error = 0;
  for (size_t d = 0; d < k.size(); ++d) {
    norm += k[d] * k[d];
    error += (held[d] - k[d]) * (held[d] - k[d]);
  }
  EXPECT_LT(error, 0.01 * norm);
  EXPECT_NEAR(held[5], 30.0f, 1.0f);
}

// K and V ([n_tokens, n_kv_heads * head_dim], as written by write_random_kv) as layer 0 of
// `cache` holds them, read back: dequantized Q8_0 or Q4_0, or rounded to f16 (the reference
// rounds the queries too when the keys are F16, as the tiles do).
std::pair<std::vector<float>, std::vector<float>> held_kv(const kv::KvCache& cache,
                                                          const std::vector<int32_t>& block_table,
                                                          const std::vector<float>& k,
                                                          const std::vector<float>& v) {
  const int n_kv_heads = cache.config().n_kv_heads, head_dim = cache.head_dim(0);
  const int value_dim = cache.value_dim(0);
  const int kv_dim = n_kv_heads * head_dim, v_dim = n_kv_heads * value_dim;
  const int block_size = cache.block_size();
  const auto n_tokens = static_cast<int>(k.size()) / kv_dim;
  std::vector<float> k_held = k, v_held = v;
  for (int t = 0; t < n_tokens; ++t) {
    const int32_t block = block_table[static_cast<size_t>(t / block_size)];
    const int pos = t % block_size;
    for (int h = 0; h < n_kv_heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        const auto i = static_cast<size_t>(t * kv_dim + h * head_dim + d);
        if (cache.key_type() == DType::Q8_0) {
          k_held[i] = cache.key_scales(0, block, h)[d / 32 * block_size + pos] *
                      cache.keys_q8(0, block, h)[d * block_size + pos];
        } else if (cache.key_type() == DType::Q4_0) {
          k_held[i] = q4_key(cache, block, h, d, pos);
        } else {
          k_held[i] = fp16_to_fp32(fp32_to_fp16(k[i]));
        }
      }
      for (int d = 0; d < value_dim; ++d) {
        const auto i = static_cast<size_t>(t * v_dim + h * value_dim + d);
        if (cache.value_type() == DType::Q8_0) {
          v_held[i] = cache.value_scales(0, block, h)[pos * (value_dim / 32) + d / 32] *
                      cache.values_q8(0, block, h)[pos * value_dim + d];
        } else if (cache.value_type() == DType::Q4_0) {
          v_held[i] = q4_value(cache, block, h, d, pos);
        } else {
          v_held[i] = fp16_to_fp32(fp32_to_fp16(v[i]));
        }
      }
      // Rotated heads (kv_cache.h) back to the space of the queries and outputs.
      if (cache.key_rotation(0) > 0)
        kv::hadamard_rotate(&k_held[static_cast<size_t>(t * kv_dim + h * head_dim)], head_dim,
                            cache.key_rotation(0));
      if (cache.value_rotation(0) > 0)
        kv::hadamard_rotate(&v_held[static_cast<size_t>(t * v_dim + h * value_dim)], value_dim,
                            cache.value_rotation(0));
    }
  }
  return {std::move(k_held), std::move(v_held)};
}

// Random K and V of n_tokens written to layer 0 of `cache` (seed), random queries (seed + 2):
// on every ISA, the tiles' output at every `step`-th token equals plain softmax attention over
// what the cache holds, the dequantized K and V (queries as they are, or rounded to f16 where
// the keys are F16 as the tiles round them).
void expect_tiles_match_held_kv(kv::KvCache& cache, const std::vector<int32_t>& block_table,
                                int n_tokens, const AttentionShape& shape, uint32_t seed,
                                int step) {
  const int q_dim = shape.n_heads * shape.head_dim;
  const int out_dim = shape.n_heads * shape.value_head_dim();
  const auto [k, v] = write_random_kv(cache, block_table, n_tokens, seed);
  auto q = random_floats(int64_t{n_tokens} * q_dim, seed + 2, 2.0f);
  const auto [k_held, v_held] = held_kv(cache, block_table, k, v);
  for (const KernelTable* table : available_kernels()) {
    const std::vector<float> out =
        attend_tiles(q, n_tokens, shape, cache, *table, [&](int) { return block_table; });
    for (int t = 0; t < n_tokens; t += step) {
      std::vector<float> qt(q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
      if (cache.key_type() == DType::F16)
        for (float& x : qt) x = fp16_to_fp32(fp32_to_fp16(x));
      const auto want =
          naive_attention(qt, k_held, v_held, t, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                          shape.scale, false, 0, 0, nullptr, shape.value_head_dim());
      for (int i = 0; i < out_dim; ++i)
        ASSERT_NEAR(out[static_cast<size_t>(t * out_dim + i)], want[static_cast<size_t>(i)], 2e-5)
            << table->isa << " " << dtype_name(cache.key_type()) << "/"
            << dtype_name(cache.value_type()) << " heads " << shape.n_heads << "/"
            << shape.n_kv_heads << " block_size " << cache.block_size() << " token " << t
            << " value " << i;
    }
  }
}

// With Q8_0 or Q4_0 keys and values, in any pairing, the tiles compute attention over what the
// cache holds: plain softmax attention over the dequantized K and V (queries as they are).
TEST(Attention, TilesWithQuantizedCacheMatchPlainSoftmaxAttention) {
  const int head_dim = 64;
  for (const auto [n_heads, n_kv_heads, block_size, n_tokens] :
       {AttentionCase{6, 2, 16, 37}, AttentionCase{6, 2, 8, 300}, AttentionCase{32, 1, 16, 300}}) {
    const int n_blocks = (n_tokens + block_size - 1) / block_size + 3;
    for (const auto& [key_type, value_type] :
         {std::pair{DType::Q8_0, DType::Q8_0}, std::pair{DType::Q8_0, DType::F16},
          std::pair{DType::F16, DType::Q8_0}, std::pair{DType::Q4_0, DType::Q4_0},
          std::pair{DType::Q4_0, DType::F16}, std::pair{DType::F16, DType::Q4_0},
          std::pair{DType::Q8_0, DType::Q4_0}, std::pair{DType::Q4_0, DType::Q8_0}}) {
      kv::KvCache cache({1, n_kv_heads, head_dim, block_size, n_blocks, key_type, value_type});
      std::vector<int32_t> block_table;
      for (int b = 0; b < n_blocks; ++b) block_table.push_back((b * 7 + 3) % n_blocks);
      const AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim))};
      ASSERT_NO_FATAL_FAILURE(expect_tiles_match_held_kv(cache, block_table, n_tokens, shape, 30, 7));
    }
  }
}

// Values of another head size than the keys' (DeepSeek's latent attention, decompressed: keys of
// 96 = 64 unrotated + 32 rotated dimensions, values of 64), in F16, Q8_0 and Q4_0 caches (the
// values of 64 rotated, the keys of 96 not), with a head per kv head and grouped, on every ISA,
// against plain softmax attention over what the cache holds.
TEST(Attention, ValuesOfAnotherHeadSizeMatchPlainAttention) {
  const int head_dim = 96, value_dim = 64;
  for (const auto [n_heads, n_kv_heads, block_size, n_tokens] :
       {AttentionCase{4, 4, 16, 37}, AttentionCase{6, 2, 8, 300}}) {
    const int n_blocks = (n_tokens + block_size - 1) / block_size + 3;
    for (const auto& [key_type, value_type] :
         {std::pair{DType::F16, DType::F16}, std::pair{DType::Q8_0, DType::Q8_0},
          std::pair{DType::Q4_0, DType::Q4_0}, std::pair{DType::F16, DType::Q8_0}}) {
      kv::KvCacheConfig config{1, n_kv_heads, head_dim, block_size, n_blocks, key_type, value_type};
      config.value_head_dim = value_dim;
      kv::KvCache cache(config);
      ASSERT_EQ(cache.head_dim(0), head_dim);
      ASSERT_EQ(cache.value_dim(0), value_dim);
      if (key_type == DType::F16 && value_type == DType::F16) {  // K and V of their own sizes
        EXPECT_EQ(cache.groups()[0].block_bytes,
                  size_t(n_kv_heads) * (head_dim + value_dim) * block_size * 2);
      }
      std::vector<int32_t> block_table;
      for (int b = 0; b < n_blocks; ++b) block_table.push_back((b * 7 + 3) % n_blocks);
      AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim))};
      shape.value_dim = value_dim;
      ASSERT_NO_FATAL_FAILURE(expect_tiles_match_held_kv(cache, block_table, n_tokens, shape, 60, 5));
    }
  }
}

// Attention sinks (gpt-oss): per query head one logit that joins the softmax without a value,
// on every ISA, with F16, Q8_0 and Q4_0 KV, full and sliding, against the plain computation. Odd
// head counts (7 = MHA, 9 on 3, 5 on 1 = MQA-like) and lengths; 300 tokens span several key chunks.
// The softcap case checks that the sink enters as it is, neither scaled nor capped.
TEST(Attention, SinksMatchPlainSoftmaxAttention) {
  const int head_dim = 64;
  for (const auto [n_heads, n_kv_heads, block_size, n_tokens] :
       {AttentionCase{7, 7, 16, 37}, AttentionCase{9, 3, 8, 300}, AttentionCase{5, 1, 16, 45}}) {
    const int n_blocks = (n_tokens + block_size - 1) / block_size + 3;
    auto sinks = random_floats(n_heads, 50, 4.0f);  // [n_heads]
    sinks[1] = 12.0f;  // above most scores, so that head's outputs shrink
    for (const DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
      kv::KvCache cache({1, n_kv_heads, head_dim, block_size, n_blocks, type, type});
      std::vector<int32_t> block_table;
      for (int b = 0; b < n_blocks; ++b) block_table.push_back((b * 7 + 3) % n_blocks);
      const int q_dim = n_heads * head_dim;
      const auto [k, v] = write_random_kv(cache, block_table, n_tokens, 51);
      const auto [k_held, v_held] = held_kv(cache, block_table, k, v);
      auto q = random_floats(int64_t{n_tokens} * q_dim, 53, 2.0f);  // [n_tokens, q_dim]
      for (const auto& [window, softcap] :
           {std::pair{0, 0.0f}, std::pair{13, 0.0f}, std::pair{128, 0.0f}, std::pair{21, 3.0f}}) {
        AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)),
                             window,  softcap};
        shape.sinks = sinks.data();
        const int step = n_tokens > 100 ? 7 : 1;
        std::vector<std::vector<double>> want;  // [checked tokens][q_dim]
        for (int t = 0; t < n_tokens; t += step) {
          std::vector<float> qt(q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
          if (type == DType::F16)
            for (float& x : qt) x = fp16_to_fp32(fp32_to_fp16(x));
          want.push_back(naive_attention(qt, k_held, v_held, t, n_heads, n_kv_heads, head_dim,
                                         shape.scale, false, window, softcap, sinks.data()));
        }
        for (const KernelTable* table : available_kernels()) {
          const std::vector<float> out =
              attend_tiles(q, n_tokens, shape, cache, *table, [&](int) { return block_table; });
          for (int t = 0; t < n_tokens; t += step) {
            for (int i = 0; i < q_dim; ++i)
              ASSERT_NEAR(out[static_cast<size_t>(t * q_dim + i)],
                          want[static_cast<size_t>(t / step)][static_cast<size_t>(i)], 2e-5)
                  << table->isa << " " << dtype_name(type) << " heads " << n_heads << "/"
                  << n_kv_heads << " window " << window << " softcap " << softcap << " token " << t
                  << " value " << i;
          }
        }
      }
    }
  }
}

// Tokens 0..n_tokens-1 of random q, k, v (9 query heads on 3 kv heads) attended through
// `shape` on one ISA; the sink-only tests below need no more than this.
std::vector<float> attend_random(const AttentionShape& shape, DType type, int n_tokens,
                                 const KernelTable& table) {
  const int block_size = 16, n_blocks = (n_tokens + block_size - 1) / block_size;
  kv::KvCache cache({1, shape.n_kv_heads, shape.head_dim, block_size, n_blocks, type, type});
  std::vector<int32_t> block_table;
  for (int b = 0; b < n_blocks; ++b) block_table.push_back(b);
  write_random_kv(cache, block_table, n_tokens, 60);
  auto q = random_floats(int64_t{n_tokens} * shape.n_heads * shape.head_dim, 62, 2.0f);
  return attend_tiles(q, n_tokens, shape, cache, table, [&](int) { return block_table; });
}

// A sink of -inf takes no weight: the output is the same bits as without sinks.
TEST(Attention, SinkOfMinusInfinityIsNoSink) {
  const int n_heads = 9, n_kv_heads = 3, head_dim = 64, n_tokens = 70;
  const std::vector<float> none(n_heads, -std::numeric_limits<float>::infinity());
  for (const DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (const int window : {0, 13}) {
      AttentionShape shape{n_heads, n_kv_heads, head_dim, 0.125f, window};
      for (const KernelTable* table : available_kernels()) {
        const std::vector<float> plain = attend_random(shape, type, n_tokens, *table);
        shape.sinks = none.data();
        const std::vector<float> with_sinks = attend_random(shape, type, n_tokens, *table);
        shape.sinks = nullptr;
        EXPECT_EQ(0, std::memcmp(plain.data(), with_sinks.data(), plain.size() * sizeof(float)))
            << table->isa << " " << dtype_name(type) << " window " << window;
      }
    }
  }
}

// A growing sink takes more and more of the weight: the outputs shrink toward 0, and a sink far
// above every score leaves exactly 0 (all the weight on it, and it has no value).
TEST(Attention, HugeSinkDrivesOutputToZero) {
  const int n_heads = 9, n_kv_heads = 3, head_dim = 64, n_tokens = 40;
  for (const DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
    for (const KernelTable* table : available_kernels()) {
      float previous = std::numeric_limits<float>::infinity();
      for (const float sink : {0.0f, 10.0f, 20.0f, 40.0f, 1e4f}) {
        const std::vector<float> sinks(n_heads, sink);
        const AttentionShape shape{n_heads, n_kv_heads, head_dim, 0.125f, 0, 0.0f, sinks.data()};
        const std::vector<float> out = attend_random(shape, type, n_tokens, *table);
        float largest = 0;
        for (const float x : out) largest = std::max(largest, std::fabs(x));
        EXPECT_LT(largest, previous) << table->isa << " " << dtype_name(type) << " sink " << sink;
        previous = largest;
      }
      EXPECT_EQ(previous, 0.0f) << table->isa << " " << dtype_name(type);
    }
  }
}


namespace {

// A tile's output at token t alone and with the tokens around it (tiles of `tile_tokens`).
std::vector<float> attend_tiles_exact(const std::vector<float>& q, int n_tokens, int tile_tokens,
                                      const AttentionShape& shape, const kv::KvCache& cache,
                                      const KernelTable& table,
                                      const std::vector<int32_t>& block_table,
                                      const ExactBlocks& exact) {
  const int q_dim = shape.n_heads * shape.head_dim, out_dim = shape.n_heads * shape.value_head_dim();
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t) positions[static_cast<size_t>(t)] = t;
  std::vector<float> out(static_cast<size_t>(n_tokens * out_dim));
  for (int t0 = 0; t0 < n_tokens; t0 += tile_tokens) {
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      const AttentionTile tile{
          &q[static_cast<size_t>(t0 * q_dim)], &positions[static_cast<size_t>(t0)],
          std::min(tile_tokens, n_tokens - t0), h, &out[static_cast<size_t>(t0 * out_dim)]};
      attend_tile(tile, cache, 0, block_table, shape, nullptr, table, &exact);
    }
  }
  return out;
}

}  // namespace

// Exact copies (kv/kv_cache.h): a row reads block 0 and its own block and the window - 1
// before it from their F16 copies where a copy is given, every other key from the quantized
// cache. On every ISA, in F16-rounded keys and values (the copies, rotated back) and dequantized
// ones (the rest), against plain softmax attention, full and sliding, with blocks that have no
// copy; and a token's output is the same bit for bit in a tile of its own and in a tile of
// several tokens (the copies are met in one order).
TEST(Attention, ExactCopiesReplaceTheirQuantizedBlocks) {
  const int head_dim = 64;
  for (const auto [n_heads, n_kv_heads, block_size, n_tokens] :
       {AttentionCase{6, 2, 16, 83}, AttentionCase{4, 4, 8, 61}, AttentionCase{8, 1, 16, 300},
        AttentionCase{4, 2, 4, 29}}) {
    const int n_blocks = (n_tokens + block_size - 1) / block_size;
    for (const auto& [key_type, value_type] :
         {std::pair{DType::Q4_0, DType::Q4_0}, std::pair{DType::Q8_0, DType::Q8_0},
          std::pair{DType::Q4_0, DType::F16}}) {
      kv::KvCacheConfig config{1, n_kv_heads, head_dim, block_size, n_blocks, key_type, value_type};
      config.num_state_slots = 1;
      config.exact_recent_tokens = 2 * block_size;
      kv::KvCache cache(config);
      ASSERT_EQ(cache.exact_window_blocks(), 3);  // 2 blocks before a row's own
      std::vector<int32_t> block_table;
      for (int b = 0; b < n_blocks; ++b) block_table.push_back((b * 5 + 2) % n_blocks);
      const int kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
      const auto [k, v] = write_random_kv(cache, block_table, n_tokens, 70);
      const auto [k_held, v_held] = held_kv(cache, block_table, k, v);
      // Every block's copy (an F16 block of every kv head), but blocks 2 and 5: none.
      const size_t key_block = cache.exact_key_stride(0) * n_kv_heads;
      const size_t value_block = cache.exact_value_stride(0) * n_kv_heads;
      std::vector<uint16_t> copy_keys(n_blocks * key_block), copy_values(n_blocks * value_block);
      for (int t = 0; t < n_tokens; ++t) {
        const int b = t / block_size;
        cache.store_exact(0, &k[static_cast<size_t>(t * kv_dim)], &v[static_cast<size_t>(t * kv_dim)],
                          &copy_keys[b * key_block], &copy_values[b * value_block], t % block_size);
      }
      const auto missing = [](int b) { return b == 2 || b == 5; };
      std::vector<const uint16_t*> keys, values;
      for (int b = 1; b < n_blocks; ++b) {
        keys.push_back(missing(b) ? nullptr : &copy_keys[b * key_block]);
        values.push_back(missing(b) ? nullptr : &copy_values[b * value_block]);
      }
      ExactBlocks exact;
      exact.window_blocks = cache.exact_window_blocks();
      exact.first_block = 1;
      exact.keys = keys;
      exact.values = values;
      exact.sink_keys = copy_keys.data();
      exact.sink_values = copy_values.data();
      exact.key_stride = cache.exact_key_stride(0);
      exact.value_stride = cache.exact_value_stride(0);
      auto q = random_floats(int64_t{n_tokens} * q_dim, 72, 2.0f);
      for (const int window : {0, 21}) {
        AttentionShape shape{n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)), window};
        for (const KernelTable* table : available_kernels()) {
          const auto out = attend_tiles_exact(q, n_tokens, attention_tile_tokens(shape), shape, cache,
                                              *table, block_table, exact);
          const auto alone = attend_tiles_exact(q, n_tokens, 1, shape, cache, *table, block_table, exact);
          ASSERT_EQ(out, alone) << table->isa << " " << dtype_name(key_type) << " window " << window;
          for (int t = 0; t < n_tokens; t += n_tokens > 100 ? 7 : 1) {
            // Plain softmax attention in the cache's rotated space: a key of a block the row
            // reads from its copy is the copy (f16 of the rotated key) met by the f16 of the
            // rotated query, any other the dequantized key met by the rotated query as it is.
            const int own = t / block_size;
            const int first = window > 0 ? std::max(0, t - window + 1) : 0;
            const auto rotated = [&](const float* x, int rotation, bool round) {
              std::vector<double> out(static_cast<size_t>(head_dim));
              std::vector<float> y(x, x + head_dim);
              if (rotation > 0) kv::hadamard_rotate(y.data(), head_dim, rotation);
              for (int d = 0; d < head_dim; ++d)
                out[static_cast<size_t>(d)] = round ? fp16_to_fp32(fp32_to_fp16(y[static_cast<size_t>(d)])) : y[static_cast<size_t>(d)];
              return out;
            };
            for (int hq = 0; hq < n_heads; ++hq) {
              const int h = hq / (n_heads / n_kv_heads);
              const float* qh = &q[static_cast<size_t>(t * q_dim + hq * head_dim)];
              const auto q_plain = rotated(qh, cache.key_rotation(0), false);
              const auto q_half = rotated(qh, cache.key_rotation(0), true);
              std::vector<double> scores, acc(static_cast<size_t>(head_dim), 0.0);
              std::vector<std::vector<double>> vals;
              for (int j = first; j <= t; ++j) {
                const int b = j / block_size;
                const bool copy = (b == 0 || (b <= own && b > own - exact.window_blocks)) && !missing(b);
                const size_t at = static_cast<size_t>(j * kv_dim + h * head_dim);
                const auto kj = copy ? rotated(&k[at], cache.key_rotation(0), true)
                                     : rotated(&k_held[at], cache.key_rotation(0), false);
                const auto& qq = copy ? q_half : q_plain;
                double sc = 0;
                for (int d = 0; d < head_dim; ++d) sc += qq[static_cast<size_t>(d)] * kj[static_cast<size_t>(d)];
                scores.push_back(sc * shape.scale);
                vals.push_back(copy ? rotated(&v[at], cache.value_rotation(0), true)
                                    : rotated(&v_held[at], cache.value_rotation(0), false));
              }
              const double max = *std::max_element(scores.begin(), scores.end());
              double sum = 0;
              for (size_t j = 0; j < scores.size(); ++j) {
                const double p = std::exp(scores[j] - max);
                sum += p;
                for (int d = 0; d < head_dim; ++d) acc[static_cast<size_t>(d)] += p * vals[j][static_cast<size_t>(d)];
              }
              std::vector<float> want(static_cast<size_t>(head_dim));
              for (int d = 0; d < head_dim; ++d) want[static_cast<size_t>(d)] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
              if (cache.value_rotation(0) > 0) kv::hadamard_rotate(want.data(), head_dim, cache.value_rotation(0));
              for (int d = 0; d < head_dim; ++d)
                ASSERT_NEAR(out[static_cast<size_t>(t * q_dim + hq * head_dim + d)], want[static_cast<size_t>(d)], 5e-5)
                    << table->isa << " " << dtype_name(key_type) << "/" << dtype_name(value_type)
                    << " heads " << n_heads << "/" << n_kv_heads << " block " << block_size
                    << " window " << window << " token " << t << " head " << hq << " dim " << d;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace inferd::kernels
