// Compiled with AVX-512 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX-512 copy of it for every caller.
#include "kernels/x86_avx512/attention_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

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

// NR query rows x DC chunks of 16 dimensions over the values of `blocks` in key order: one
// converted load of value j serves every row, and NR x DC independent accumulators keep the
// multiply-add units busy even for one row. The accumulators stay in registers from the first
// block to the last (kernels.h, accumulate_blocks). A pass over DC chunks reads a line or two
// of each value, 2 * head_dim bytes apart, so the lines of the value kAheadKeys further on are
// asked for into L1 (near a block's end that is the pool's next block, a harmless guess: a
// prefetch never faults; asking for the chunk's next block instead measured no better).
// Measured on the AMD EPYC (Zen 4), 64 query tokens over 4096 keys of 4 kv heads of 256, one
// thread (inferd_kernels_bench Attention/avx512/cached/hd256): 28.9 GMAC/s with the
// accumulators loaded and stored per block of 16 keys, 39.6 kept in registers, 44.6-47.1 with
// the prefetch.
template <int NR, int DC>
void accumulate_rows(const uint16_t* const* blocks, int block_size, int n_keys, int head_dim,
                     const float* p, int p_stride, float* acc, int d0) {
  constexpr int kAheadKeys = 4;
  __m512 a[NR][DC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(acc + r * head_dim + d0 + 16 * c);
  for (int i = 0, j0 = 0; j0 < n_keys; ++i, j0 += block_size) {
    const uint16_t* values = blocks[i] + d0;
    const float* pj = p + j0;
    const int keys = std::min(block_size, n_keys - j0);
    for (int j = 0; j < keys; ++j) {
      // An address, not a pointer into the block: it may lie past the block's end.
      const uintptr_t ahead =
          reinterpret_cast<uintptr_t>(values) + sizeof(uint16_t) * (j + kAheadKeys) * head_dim;
      for (int c = 0; c < DC; c += 2)  // a 64-byte line holds two chunks
        _mm_prefetch(reinterpret_cast<const char*>(ahead + sizeof(uint16_t) * 16 * c),
                     _MM_HINT_T0);
      for (int c = 0; c < DC; ++c) {
        const __m512 v = load_fp16x16(values + j * head_dim + 16 * c);
        for (int r = 0; r < NR; ++r)
          a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(pj[r * p_stride + j]), v, a[r][c]);
      }
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

void accumulate_blocks(const uint16_t* const* blocks, int block_size, int n_keys, int head_dim,
                       const float* p, int p_stride, int n_rows, float* acc) {
  if (head_dim % 16 != 0) {
    return narrower().accumulate_blocks(blocks, block_size, n_keys, head_dim, p, p_stride, n_rows,
                                        acc);
  }
  for_row_groups(n_rows, [&]<int NR>(int r0) {
    for_dim_chunks<NR>(head_dim, [&]<int DC>(int d0) {
      accumulate_rows<NR, DC>(blocks, block_size, n_keys, head_dim, p + r0 * p_stride, p_stride,
                              acc + r0 * head_dim, d0);
    });
  });
}

void accumulate(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                int n_rows, float* acc) {
  accumulate_blocks(&values, std::max(n_keys, 1), n_keys, head_dim, p, p_stride, n_rows, acc);
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

// Q8_0 and Q4_0 KV (kv/kv_cache.h): a scale per 32 dimensions of each key or value.
constexpr int kGroup = 32;

inline __m512 load_int8x16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Q4_0 KV: nibbles standing for nibble - 8, an fp16 scale per 32 dimensions. Sixteen bytes
// widened to 32-bit lanes; their low and high nibbles, less 8, as floats.
struct Nibbles16 {
  __m512 low, high;
};
inline Nibbles16 load_nibbles16(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i eight = _mm512_set1_epi32(8);
  return {
      _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(bytes, _mm512_set1_epi32(0x0F)), eight)),
      _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), eight))};
}

// How a quantized key format adds group g (32 dimensions) of 16 keys from j0 on, times NR query
// rows, to part[NR], in the order of the dimensions whatever NR is.
struct Q8Keys {  // int8 [head_dim, block_size]: one dimension a load
  template <int NR>
  static void dot_group(const int8_t* keys_t, int block_size, int j0, const float* q, int head_dim,
                        int g, __m512 (&part)[NR]) {
    for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) {
      const __m512 k = load_int8x16(keys_t + d * block_size + j0);
      for (int r = 0; r < NR; ++r)
        part[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d]), k, part[r]);
    }
  }
};
struct Q4Keys {  // nibbles [head_dim / 2, block_size]: dimensions d (low) and d + 1 (high) a load
  template <int NR>
  static void dot_group(const uint8_t* keys_t, int block_size, int j0, const float* q, int head_dim,
                        int g, __m512 (&part)[NR]) {
    for (int d = g * kGroup; d < (g + 1) * kGroup; d += 2) {
      const Nibbles16 k = load_nibbles16(keys_t + d / 2 * block_size + j0);
      for (int r = 0; r < NR; ++r) {
        part[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d]), k.low, part[r]);
        part[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * head_dim + d + 1]), k.high, part[r]);
      }
    }
  }
};

inline __m512 load_scales16(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_scales16(const uint16_t* p) {
  return load_fp16x16(p);
}

// NR query rows x 16 keys: per group of 32 dimensions a dot product, then times the keys'
// scales of that group (floats for Q8_0, fp16 for Q4_0).
template <typename Keys, int NR, typename K, typename Scale>
void score_rows_quantized(const K* keys_t, const Scale* scales, int block_size, int head_dim,
                          const float* q, float* s, int s_stride, int j0) {
  __m512 total[NR];
  for (int r = 0; r < NR; ++r) total[r] = _mm512_setzero_ps();
  for (int g = 0; g < head_dim / kGroup; ++g) {
    __m512 part[NR];
    for (int r = 0; r < NR; ++r) part[r] = _mm512_setzero_ps();
    Keys::template dot_group<NR>(keys_t, block_size, j0, q, head_dim, g, part);
    const __m512 scale = load_scales16(scales + g * block_size + j0);
    for (int r = 0; r < NR; ++r) total[r] = _mm512_fmadd_ps(part[r], scale, total[r]);
  }
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(s + r * s_stride + j0, total[r]);
}

// Block sizes a multiple of 16 (scores_q8 and scores_q4 send others to the AVX2 version).
template <typename Keys, typename K, typename Scale>
void scores_quantized(const K* keys_t, const Scale* scales, int block_size, int head_dim,
                      const float* q, int n_rows, float* s, int s_stride) {
  for (int j0 = 0; j0 < block_size; j0 += 16) {
    for_row_groups(n_rows, [&]<int NR>(int r0) {
      score_rows_quantized<Keys, NR>(keys_t, scales, block_size, head_dim, q + r0 * head_dim,
                                     s + r0 * s_stride, s_stride, j0);
    });
  }
}

void scores_q8(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  if (block_size % 16 != 0)
    return narrower().scores_q8(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
  scores_quantized<Q8Keys>(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
}

void scores_q4(const uint8_t* keys_t, const uint16_t* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  if (block_size % 16 != 0)
    return narrower().scores_q4(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
  scores_quantized<Q4Keys>(keys_t, scales, block_size, head_dim, q, n_rows, s, s_stride);
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

// NR query rows x GC groups of 32 dimensions from group g on: value j's 16 bytes of a group give
// its first 16 dimensions (low nibbles) and its last 16 (high), converted once for every row and
// weighted by p times the group's scale. Each output sums its values in order whatever NR and
// GC are.
template <int NR, int GC>
void accumulate_rows_q4(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, float* acc, int g) {
  const int groups = head_dim / kGroup;
  __m512 a[NR][2 * GC];  // chunk c: dimensions g * 32 + 16 * c on
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < 2 * GC; ++c)
      a[r][c] = _mm512_loadu_ps(acc + r * head_dim + g * kGroup + 16 * c);
  for (int j = 0; j < n_keys; ++j) {
    for (int i = 0; i < GC; ++i) {
      const float scale = _cvtsh_ss(scales[j * groups + g + i]);
      const Nibbles16 v = load_nibbles16(values + j * head_dim / 2 + (g + i) * (kGroup / 2));
      for (int r = 0; r < NR; ++r) {
        const __m512 w = _mm512_set1_ps(p[r * p_stride + j] * scale);
        a[r][2 * i] = _mm512_fmadd_ps(w, v.low, a[r][2 * i]);
        a[r][2 * i + 1] = _mm512_fmadd_ps(w, v.high, a[r][2 * i + 1]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < 2 * GC; ++c)
      _mm512_storeu_ps(acc + r * head_dim + g * kGroup + 16 * c, a[r][c]);
}

void accumulate_q4(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  const int groups = head_dim / kGroup;
  for_row_groups(n_rows, [&]<int NR>(int r0) {
    // At most 16 accumulators of the 32 zmm registers: two groups for up to 4 rows, one for more.
    constexpr int GC = NR <= 4 ? 2 : 1;
    const float* pr = p + r0 * p_stride;
    float* ar = acc + r0 * head_dim;
    int g = 0;
    for (; g + GC <= groups; g += GC)
      accumulate_rows_q4<NR, GC>(values, scales, n_keys, head_dim, pr, p_stride, ar, g);
    for (; g < groups; ++g)
      accumulate_rows_q4<NR, 1>(values, scales, n_keys, head_dim, pr, p_stride, ar, g);
  });
}

}  // namespace

AttentionKernels attention_kernels() {
  // Rounding queries is a few hundred values a tile: the AVX2 version serves.
  return {scores,    accumulate,    exp_sum,   scale_max,     narrower().round_to_fp16,
          scores_q8, accumulate_q8, scores_q4, accumulate_q4, accumulate_blocks};
}

}  // namespace inferd::kernels::avx512
