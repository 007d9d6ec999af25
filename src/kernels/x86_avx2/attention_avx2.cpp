// Compiled with AVX2 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX2 copy of it for every caller.
#include "kernels/x86_avx2/attention_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/ref/attention_ref.h"
#include "kernels/row_groups.h"

#include "kernels/x86_avx2/exp_avx2.h"
#include "kernels/x86_avx2/reduce_avx2.h"

namespace inferd::kernels::avx2 {
namespace {

inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline float to_float(uint16_t h) {
  return _cvtsh_ss(h);
}
inline float to_float(float x) {
  return x;
}

// One block's keys or values as floats. A prompt tile has more rows than one register group
// takes, and each group would convert the whole block again; F16C's conversion is exact, so a
// group reading the floats sums the very same numbers. [head_dim, block_size] keys or
// [n_keys, head_dim] values; 64 KiB holds blocks of 64 keys at head size 256.
constexpr int kStageFloats = 256 * 64;
alignas(32) thread_local float stage[kStageFloats];

const float* stage_halves(const uint16_t* x, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_store_ps(stage + i, load8(x + i));
  for (; i < n; ++i) stage[i] = _cvtsh_ss(x[i]);
  return stage;
}

// NR query rows x NH * 8 keys: one load of 8 keys' dimension d serves every row, one broadcast
// of q serves NH vectors of keys. The dimensions are split over two accumulators per row and
// key vector (even and odd d), so each chain of dependent multiply-adds is half as long; every
// score is summed in that order whatever NR and NH are, so a row's scores do not depend on the
// rows beside it (a token scores the same in decode as in a prompt).
template <int NR, int NH, typename T>
void score_rows(const T* keys_t, int block_size, int head_dim, const float* q, float* s,
                int s_stride, int j0) {
  static_assert(NR * NH <= 6, "two accumulators per row and key vector, in 16 ymm registers");
  constexpr int kSplit = 2;
  __m256 acc[kSplit][NR][NH];
  for (int i = 0; i < kSplit; ++i)
    for (int r = 0; r < NR; ++r)
      for (int h = 0; h < NH; ++h) acc[i][r][h] = _mm256_setzero_ps();
  const auto step = [&](int i, int d) {
    __m256 k[NH];
    for (int h = 0; h < NH; ++h) k[h] = load8(keys_t + d * block_size + j0 + 8 * h);
    for (int r = 0; r < NR; ++r) {
      const __m256 qd = _mm256_broadcast_ss(q + r * head_dim + d);
      for (int h = 0; h < NH; ++h) acc[i][r][h] = _mm256_fmadd_ps(qd, k[h], acc[i][r][h]);
    }
  };
  int d = 0;
  for (; d + kSplit <= head_dim; d += kSplit)
    for (int i = 0; i < kSplit; ++i) step(i, d + i);
  for (; d < head_dim; ++d) step(0, d);
  for (int r = 0; r < NR; ++r) {
    for (int h = 0; h < NH; ++h) {
      __m256 sum = acc[0][r][h];
      for (int i = 1; i < kSplit; ++i) sum = _mm256_add_ps(sum, acc[i][r][h]);
      _mm256_storeu_ps(s + r * s_stride + j0 + 8 * h, sum);
    }
  }
}

// NR query rows x DC chunks of 8 dimensions: one load of value j serves every row, and NR x DC
// independent accumulators keep the multiply-add units busy even for one row. Each output sums
// its keys in order whatever NR and DC are.
template <int NR, int DC, typename T>
void accumulate_rows(const T* values, int n_keys, int head_dim, const float* p, int p_stride,
                     float* acc, int d0) {
  __m256 a[NR][DC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) a[r][c] = _mm256_loadu_ps(acc + r * head_dim + d0 + 8 * c);
  for (int j = 0; j < n_keys; ++j) {
    __m256 v[DC];
    for (int c = 0; c < DC; ++c) v[c] = load8(values + j * head_dim + d0 + 8 * c);
    for (int r = 0; r < NR; ++r) {
      const __m256 pj = _mm256_broadcast_ss(p + r * p_stride + j);
      for (int c = 0; c < DC; ++c) a[r][c] = _mm256_fmadd_ps(pj, v[c], a[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) _mm256_storeu_ps(acc + r * head_dim + d0 + 8 * c, a[r][c]);
}

template <typename T>
void scores_of(const T* keys_t, int block_size, int head_dim, const float* q, int n_rows, float* s,
               int s_stride) {
  int j0 = 0;
  for (; j0 + 16 <= block_size; j0 += 16) {  // 16 keys: a broadcast of q serves two vectors
    for_row_groups<3>(n_rows, [&]<int NR>(int r0) {
      score_rows<NR, 2>(keys_t, block_size, head_dim, q + r0 * head_dim, s + r0 * s_stride,
                        s_stride, j0);
    });
  }
  for (; j0 + 8 <= block_size; j0 += 8) {
    for_row_groups<6>(n_rows, [&]<int NR>(int r0) {
      score_rows<NR, 1>(keys_t, block_size, head_dim, q + r0 * head_dim, s + r0 * s_stride,
                        s_stride, j0);
    });
  }
  for (int r = 0; r < n_rows; ++r) {  // block sizes that are not a multiple of 8
    for (int j = j0; j < block_size; ++j) {
      float acc = 0;
      for (int d = 0; d < head_dim; ++d)
        acc += q[r * head_dim + d] * to_float(keys_t[d * block_size + j]);
      s[r * s_stride + j] = acc;
    }
  }
}

void scores(const uint16_t* keys_t, int block_size, int head_dim, const float* q, int n_rows,
            float* s, int s_stride) {
  // More rows than one group: convert the block once instead of once per group.
  if (n_rows > 3 && head_dim * block_size <= kStageFloats) {
    scores_of(stage_halves(keys_t, head_dim * block_size), block_size, head_dim, q, n_rows, s,
              s_stride);
  } else {
    scores_of(keys_t, block_size, head_dim, q, n_rows, s, s_stride);
  }
}

template <typename T>
void accumulate_of(const T* values, int n_keys, int head_dim, const float* p, int p_stride,
                   int n_rows, float* acc) {
  const int whole = head_dim - head_dim % 8;  // dimensions done in vectors
  // 16 ymm registers: 3 rows x 4 chunks of accumulators, the rest for loads and a broadcast.
  for_row_groups<3>(n_rows, [&]<int NR>(int r0) {
    const float* pr = p + r0 * p_stride;
    float* ar = acc + r0 * head_dim;
    int d0 = 0;
    for (; d0 + 32 <= whole; d0 += 32)
      accumulate_rows<NR, 4>(values, n_keys, head_dim, pr, p_stride, ar, d0);
    for (; d0 < whole; d0 += 8)
      accumulate_rows<NR, 1>(values, n_keys, head_dim, pr, p_stride, ar, d0);
  });
  for (int r = 0; r < n_rows; ++r) {  // head sizes that are not a multiple of 8
    for (int j = 0; j < n_keys; ++j) {
      for (int d = whole; d < head_dim; ++d)
        acc[r * head_dim + d] += p[r * p_stride + j] * to_float(values[j * head_dim + d]);
    }
  }
}

void accumulate(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                int n_rows, float* acc) {
  if (n_rows > 3 && n_keys * head_dim <= kStageFloats) {
    accumulate_of(stage_halves(values, n_keys * head_dim), n_keys, head_dim, p, p_stride, n_rows,
                  acc);
  } else {
    accumulate_of(values, n_keys, head_dim, p, p_stride, n_rows, acc);
  }
}

// Block by block: each block is staged as floats for the row groups (above).
void accumulate_blocks(const uint16_t* const* blocks, int block_size, int n_keys, int head_dim,
                       const float* p, int p_stride, int n_rows, float* acc) {
  for (int i = 0, j0 = 0; j0 < n_keys; ++i, j0 += block_size) {
    accumulate(blocks[i], std::min(block_size, n_keys - j0), head_dim, p + j0, p_stride, n_rows,
               acc);
  }
}

float exp_sum(float* x, int n, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = hsum_ps(sum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    total += x[i];
  }
  return total;
}

float scale_max(float* x, int n, float scale, float max) {
  const __m256 s = _mm256_set1_ps(scale);
  __m256 m = _mm256_set1_ps(max);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
    _mm256_storeu_ps(x + i, v);
    m = _mm256_max_ps(m, v);
  }
  float result = hmax_ps(m);
  for (; i < n; ++i) {
    x[i] *= scale;
    result = std::max(result, x[i]);
  }
  return result;
}

// F16C's conversion rounds to nearest even and saturates to inf like the reference.
void round_to_fp16(float* x, int n) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), kNearest)));
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i], kNearest));
}

// Q8_0 and Q4_0 KV (kv/kv_cache.h): a scale per 32 dimensions of each key or value.
constexpr int kGroup = 32;

inline __m256 load_int8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Q4_0 KV: nibbles standing for nibble - 8, an fp16 scale per 32 dimensions. Eight bytes
// widened to 32-bit lanes; their low and high nibbles, less 8, as floats.
struct Nibbles8 {
  __m256 low, high;
};
inline Nibbles8 load_nibbles8(const uint8_t* p) {
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i eight = _mm256_set1_epi32(8);
  return {
      _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(bytes, _mm256_set1_epi32(0x0F)), eight)),
      _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight))};
}

// How a quantized key format adds group g (32 dimensions) of 8 keys from j0 on, times NR query
// rows, to part[NR]: summed in the order of the dimensions, as the reference does, whatever NR.
struct Q8Keys {  // int8 [head_dim, block_size]: one dimension a load
  template <int NR>
  static void dot_group(const int8_t* keys_t, int block_size, int j0, const float* q, int head_dim,
                        int g, __m256 (&part)[NR]) {
    for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) {
      const __m256 k = load_int8x8(keys_t + d * block_size + j0);
      for (int r = 0; r < NR; ++r)
        part[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * head_dim + d), k, part[r]);
    }
  }
};
struct Q4Keys {  // nibbles [head_dim / 2, block_size]: dimensions d (low) and d + 1 (high) a load
  template <int NR>
  static void dot_group(const uint8_t* keys_t, int block_size, int j0, const float* q, int head_dim,
                        int g, __m256 (&part)[NR]) {
    for (int d = g * kGroup; d < (g + 1) * kGroup; d += 2) {
      const Nibbles8 k = load_nibbles8(keys_t + d / 2 * block_size + j0);
      for (int r = 0; r < NR; ++r) {
        part[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * head_dim + d), k.low, part[r]);
        part[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * head_dim + d + 1), k.high, part[r]);
      }
    }
  }
};

// NR query rows x 8 keys: per group of 32 dimensions a dot product, then times the keys' scales
// of that group (floats for Q8_0, fp16 for Q4_0).
template <typename Keys, int NR, typename K, typename Scale>
void score_rows_quantized(const K* keys_t, const Scale* scales, int block_size, int head_dim,
                          const float* q, float* s, int s_stride, int j0) {
  __m256 total[NR];
  for (int r = 0; r < NR; ++r) total[r] = _mm256_setzero_ps();
  for (int g = 0; g < head_dim / kGroup; ++g) {
    __m256 part[NR];
    for (int r = 0; r < NR; ++r) part[r] = _mm256_setzero_ps();
    Keys::template dot_group<NR>(keys_t, block_size, j0, q, head_dim, g, part);
    const __m256 scale = load8(scales + g * block_size + j0);
    for (int r = 0; r < NR; ++r) total[r] = _mm256_fmadd_ps(part[r], scale, total[r]);
  }
  for (int r = 0; r < NR; ++r) _mm256_storeu_ps(s + r * s_stride + j0, total[r]);
}

// Up to 4 rows at a time: two accumulators per row in the 16 ymm registers. Block sizes a
// multiple of 8 (scores_q8 and scores_q4 send others to the reference).
template <typename Keys, typename K, typename Scale>
void scores_quantized(const K* keys_t, const Scale* scales, int block_size, int head_dim,
                      const float* q, int n_rows, float* s, int s_stride) {
  for (int j0 = 0; j0 < block_size; j0 += 8) {
    for_row_groups<4>(n_rows, [&]<int NR>(int r0) {
      score_rows_quantized<Keys, NR>(keys_t, scales, block_size, head_dim, q + r0 * head_dim,
                                     s + r0 * s_stride, s_stride, j0);
    });
  }
}

const AttentionKernels& reference() {
  static const AttentionKernels k = ref::attention_kernels();
  return k;
}

void scores_q8(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  if (block_size % 8 != 0)
    return reference().scores_q8(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
  scores_quantized<Q8Keys>(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
}

void scores_q4(const uint8_t* keys_t, const uint16_t* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  if (block_size % 8 != 0)
    return reference().scores_q4(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
  scores_quantized<Q4Keys>(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
}

// NR query rows x DC chunks of 8 dimensions (within one group of 32): value j's chunk is
// converted once and serves every row, weighted by p times the value's scale.
template <int NR, int DC>
void accumulate_rows_q8(const int8_t* values, const float* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, float* acc, int d0) {
  const int groups = head_dim / kGroup;
  __m256 a[NR][DC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) a[r][c] = _mm256_loadu_ps(acc + r * head_dim + d0 + 8 * c);
  for (int j = 0; j < n_keys; ++j) {
    const float scale = scales[j * groups + d0 / kGroup];
    for (int c = 0; c < DC; ++c) {
      const __m256 v = load_int8x8(values + j * head_dim + d0 + 8 * c);
      for (int r = 0; r < NR; ++r)
        a[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * p_stride + j] * scale), v, a[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) _mm256_storeu_ps(acc + r * head_dim + d0 + 8 * c, a[r][c]);
}

void accumulate_q8(const int8_t* values, const float* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  for_row_groups<4>(n_rows, [&]<int NR>(int r0) {
    constexpr int DC = NR <= 2 ? 4 : 2;  // 8 dimensions x DC stay inside a group of 32
    for (int d0 = 0; d0 < head_dim; d0 += 8 * DC) {
      accumulate_rows_q8<NR, DC>(values, scales, n_keys, head_dim, p + r0 * p_stride, p_stride,
                                 acc + r0 * head_dim, d0);
    }
  });
}

// NR query rows x the dimensions that bytes [b0, b0 + 8 * NB) of one group's 16 hold: each 8
// bytes give 8 dimensions in their low nibbles (group dimensions b0 + 8i on) and 8 in their high
// (16 + b0 + 8i on). Value j's bytes are converted once and serve every row, weighted by p times
// the value's scale; each output sums its values in order whatever NR and NB are.
template <int NR, int NB>
void accumulate_rows_q4(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, float* acc, int g, int b0) {
  const int groups = head_dim / kGroup;
  const auto dim = [&](int c) {  // the first dimension of chunk c: 2i low, 2i + 1 high
    return g * kGroup + b0 + 8 * (c / 2) + (c % 2) * (kGroup / 2);
  };
  __m256 a[NR][2 * NB];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < 2 * NB; ++c) a[r][c] = _mm256_loadu_ps(acc + r * head_dim + dim(c));
  for (int j = 0; j < n_keys; ++j) {
    const float scale = _cvtsh_ss(scales[j * groups + g]);
    const uint8_t* qs = values + j * head_dim / 2 + g * (kGroup / 2) + b0;
    for (int i = 0; i < NB; ++i) {
      const Nibbles8 v = load_nibbles8(qs + 8 * i);
      for (int r = 0; r < NR; ++r) {
        const __m256 w = _mm256_set1_ps(p[r * p_stride + j] * scale);
        a[r][2 * i] = _mm256_fmadd_ps(w, v.low, a[r][2 * i]);
        a[r][2 * i + 1] = _mm256_fmadd_ps(w, v.high, a[r][2 * i + 1]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < 2 * NB; ++c) _mm256_storeu_ps(acc + r * head_dim + dim(c), a[r][c]);
}

void accumulate_q4(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  // 16 ymm registers: up to 2 rows take a whole group (8 accumulators), 3 or 4 half of one.
  for_row_groups<4>(n_rows, [&]<int NR>(int r0) {
    for (int g = 0; g < head_dim / kGroup; ++g) {
      const float* pr = p + r0 * p_stride;
      float* ar = acc + r0 * head_dim;
      if constexpr (NR <= 2) {
        accumulate_rows_q4<NR, 2>(values, scales, n_keys, head_dim, pr, p_stride, ar, g, 0);
      } else {
        for (int b0 = 0; b0 < kGroup / 2; b0 += 8)
          accumulate_rows_q4<NR, 1>(values, scales, n_keys, head_dim, pr, p_stride, ar, g, b0);
      }
    }
  });
}

}  // namespace

AttentionKernels attention_kernels() {
  return {scores,    accumulate,    exp_sum,   scale_max,     round_to_fp16,
          scores_q8, accumulate_q8, scores_q4, accumulate_q4, accumulate_blocks};
}

}  // namespace inferd::kernels::avx2
