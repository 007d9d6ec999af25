// Compiled with AVX-512 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX-512 copy of it for every caller.
#include "kernels/x86_avx512/attention_avx512.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/row_groups.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx512/exp_avx512.h"
#include "kernels/x86_avx512/reduce_avx512.h"

// GCC 12's AVX-512 conversion intrinsics start from an undefined vector, which its own
// uninitialized-value warnings then report at every call site; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace inferd::kernels::avx512 {
namespace {

inline __m512 load_fp16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// NR query rows x 16 keys: one converted load of 16 keys' dimension d serves every row. The
// dimensions are split over two accumulators per row (16 of the 32 zmm registers at 8 rows), so
// each chain of dependent multiply-adds is half as long; every row is summed in that order
// whatever NR is, so a row's scores do not depend on the rows beside it.
template <int NR>
void score_rows(const uint16_t* keys_t, int block_size, int head_dim, const float* q, float* s,
                int s_stride, int j0) {
  constexpr int kSplit = 2;
  __m512 acc[kSplit][NR];
  for (int i = 0; i < kSplit; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm512_setzero_ps();
  int d = 0;
  for (; d + kSplit <= head_dim; d += kSplit) {
    for (int i = 0; i < kSplit; ++i) {
      const __m512 k = load_fp16x16(keys_t + (d + i) * block_size + j0);
      for (int r = 0; r < NR; ++r)
        acc[i][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d + i]), k, acc[i][r]);
    }
  }
  for (; d < head_dim; ++d) {
    const __m512 k = load_fp16x16(keys_t + d * block_size + j0);
    for (int r = 0; r < NR; ++r)
      acc[0][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d]), k, acc[0][r]);
  }
  for (int r = 0; r < NR; ++r) {
    __m512 sum = acc[0][r];
    for (int i = 1; i < kSplit; ++i) sum = _mm512_add_ps(sum, acc[i][r]);
    _mm512_storeu_ps(s + r * s_stride + j0, sum);
  }
}

// NR query rows x DC chunks of 16 dimensions: one converted load of value j serves every row,
// and NR x DC independent accumulators keep the multiply-add units busy even for one row.
template <int NR, int DC>
void accumulate_rows(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                     float* acc, int d0) {
  __m512 a[NR][DC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(acc + r * head_dim + d0 + 16 * c);
  for (int j = 0; j < n_keys; ++j) {
    for (int c = 0; c < DC; ++c) {
      const __m512 v = load_fp16x16(values + j * head_dim + d0 + 16 * c);
      for (int r = 0; r < NR; ++r)
        a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * p_stride + j]), v, a[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) _mm512_storeu_ps(acc + r * head_dim + d0 + 16 * c, a[r][c]);
}

// Calls fn.template operator()<DC>(d0) over the head's dimensions in chunks of DC x 16, DC as
// large as NR rows allow (32 zmm registers: at most 16 accumulators), then single chunks.
template <int NR, typename Fn>
inline void for_dim_chunks(int head_dim, Fn fn) {
  constexpr int DC = NR <= 4 ? 4 : 2;
  int d0 = 0;
  for (; d0 + 16 * DC <= head_dim; d0 += 16 * DC) fn.template operator()<DC>(d0);
  for (; d0 < head_dim; d0 += 16) fn.template operator()<1>(d0);
}

const AttentionKernels& narrower() {
  static const AttentionKernels k = avx2::attention_kernels();
  return k;
}

void scores(const uint16_t* keys_t, int block_size, int head_dim, const float* q, int n_rows,
            float* s, int s_stride) {
  if (block_size % 16 != 0)
    return narrower().scores(keys_t, block_size, head_dim, q, n_rows, s, s_stride);
  for (int j0 = 0; j0 < block_size; j0 += 16) {
    for_row_groups(n_rows, [&]<int NR>(int r0) {
      score_rows<NR>(keys_t, block_size, head_dim, q + r0 * head_dim, s + r0 * s_stride, s_stride,
                     j0);
    });
  }
}

void accumulate(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                int n_rows, float* acc) {
  if (head_dim % 16 != 0)
    return narrower().accumulate(values, n_keys, head_dim, p, p_stride, n_rows, acc);
  for_row_groups(n_rows, [&]<int NR>(int r0) {
    for_dim_chunks<NR>(head_dim, [&]<int DC>(int d0) {
      accumulate_rows<NR, DC>(values, n_keys, head_dim, p + r0 * p_stride, p_stride,
                              acc + r0 * head_dim, d0);
    });
  });
}

float exp_sum(float* x, int n, float max) {
  const __m512 m = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(x + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (i < n) {  // the tail through a mask: lanes past n are neither read nor written
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), m));
    _mm512_mask_storeu_ps(x + i, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  return hsum_ps(sum);
}

float scale_max(float* x, int n, float scale, float max) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 m = _mm512_set1_ps(max);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), s);
    _mm512_storeu_ps(x + i, v);
    m = _mm512_max_ps(m, v);
  }
  if (i < n) {  // the tail through a mask; lanes past n keep `max`
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), s);
    _mm512_mask_storeu_ps(x + i, tail, v);
    m = _mm512_mask_max_ps(m, tail, m, v);
  }
  return hmax_ps(m);
}

// Q8_0 KV (kv/kv_cache.h): a scale per 32 dimensions of each key or value.
constexpr int kGroup = 32;

inline __m512 load_int8x16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// NR query rows x 16 keys: per group of 32 dimensions a dot product, then times the keys'
// scales of that group.
template <int NR>
void score_rows_q8(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
                   const float* q, float* s, int s_stride, int j0) {
  __m512 total[NR];
  for (int r = 0; r < NR; ++r) total[r] = _mm512_setzero_ps();
  for (int g = 0; g < head_dim / kGroup; ++g) {
    __m512 part[NR];
    for (int r = 0; r < NR; ++r) part[r] = _mm512_setzero_ps();
    for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) {
      const __m512 k = load_int8x16(keys_t + d * block_size + j0);
      for (int r = 0; r < NR; ++r)
        part[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d]), k, part[r]);
    }
    const __m512 scale = _mm512_loadu_ps(scales + g * block_size + j0);
    for (int r = 0; r < NR; ++r) total[r] = _mm512_fmadd_ps(part[r], scale, total[r]);
  }
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(s + r * s_stride + j0, total[r]);
}

void scores_q8(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  if (block_size % 16 != 0)
    return narrower().scores_q8(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
  for (int j0 = 0; j0 < block_size; j0 += 16) {
    for_row_groups(n_rows, [&]<int NR>(int r0) {
      score_rows_q8<NR>(keys_t, scales, block_size, head_dim, q + r0 * head_dim, s + r0 * s_stride,
                        s_stride, j0);
    });
  }
}

// NR query rows x DC chunks of 16 dimensions (DC <= 2 stay inside a group of 32; 4 span two):
// value j's chunk is converted once and serves every row, weighted by p times its scale.
template <int NR, int DC>
void accumulate_rows_q8(const int8_t* values, const float* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, float* acc, int d0) {
  const int groups = head_dim / kGroup;
  __m512 a[NR][DC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(acc + r * head_dim + d0 + 16 * c);
  for (int j = 0; j < n_keys; ++j) {
    __m512 pj[NR], w[NR];
    for (int r = 0; r < NR; ++r) pj[r] = _mm512_set1_ps(p[r * p_stride + j]);
    for (int c = 0; c < DC; ++c) {
      if (c % 2 == 0) {  // a new group of 32 (d0 is a multiple of 32 when DC > 1)
        const __m512 scale = _mm512_set1_ps(scales[j * groups + (d0 + 16 * c) / kGroup]);
        for (int r = 0; r < NR; ++r) w[r] = _mm512_mul_ps(pj[r], scale);
      }
      const __m512 v = load_int8x16(values + j * head_dim + d0 + 16 * c);
      for (int r = 0; r < NR; ++r) a[r][c] = _mm512_fmadd_ps(w[r], v, a[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) _mm512_storeu_ps(acc + r * head_dim + d0 + 16 * c, a[r][c]);
}

void accumulate_q8(const int8_t* values, const float* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  for_row_groups(n_rows, [&]<int NR>(int r0) {
    for_dim_chunks<NR>(head_dim, [&]<int DC>(int d0) {
      accumulate_rows_q8<NR, DC>(values, scales, n_keys, head_dim, p + r0 * p_stride, p_stride,
                                 acc + r0 * head_dim, d0);
    });
  });
}

}  // namespace

AttentionKernels attention_kernels() {
  // Rounding queries is a few hundred values a tile: the AVX2 version serves.
  return {scores,    accumulate,   exp_sum, scale_max, narrower().round_to_fp16,
          scores_q8, accumulate_q8};
}

}  // namespace inferd::kernels::avx512
