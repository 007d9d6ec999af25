// Compiled with AVX2 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX2 copy of it for every caller.
#include "kernels/x86_avx2/attention_avx2.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/row_groups.h"

#include "kernels/x86_avx2/exp_avx2.h"

namespace inferd::kernels::avx2 {
namespace {

inline __m256 load_fp16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// NR query rows x 8 keys: one converted load of 8 keys' dimension d serves every row.
template <int NR>
void score_rows(const uint16_t* keys_t, int block_size, int head_dim, const float* q, float* s,
                int j0) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int d = 0; d < head_dim; ++d) {
    const __m256 k = load_fp16x8(keys_t + d * block_size + j0);
    for (int r = 0; r < NR; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * head_dim + d), k, acc[r]);
  }
  for (int r = 0; r < NR; ++r) _mm256_storeu_ps(s + r * block_size + j0, acc[r]);
}

// NR query rows x 8 dimensions: one converted load of value j serves every row.
template <int NR>
void accumulate_rows(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                     float* acc, int d0) {
  __m256 a[NR];
  for (int r = 0; r < NR; ++r) a[r] = _mm256_loadu_ps(acc + r * head_dim + d0);
  for (int j = 0; j < n_keys; ++j) {
    const __m256 v = load_fp16x8(values + j * head_dim + d0);
    for (int r = 0; r < NR; ++r)
      a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * p_stride + j), v, a[r]);
  }
  for (int r = 0; r < NR; ++r) _mm256_storeu_ps(acc + r * head_dim + d0, a[r]);
}

void scores(const uint16_t* keys_t, int block_size, int head_dim, const float* q, int n_rows,
            float* s) {
  int j0 = 0;
  for (; j0 + 8 <= block_size; j0 += 8) {
    for_row_groups(n_rows, [&]<int NR>(int r0) {
      score_rows<NR>(keys_t, block_size, head_dim, q + r0 * head_dim, s + r0 * block_size, j0);
    });
  }
  for (int r = 0; r < n_rows; ++r) {  // block sizes that are not a multiple of 8
    for (int j = j0; j < block_size; ++j) {
      float acc = 0;
      for (int d = 0; d < head_dim; ++d)
        acc += q[r * head_dim + d] * _cvtsh_ss(keys_t[d * block_size + j]);
      s[r * block_size + j] = acc;
    }
  }
}

void accumulate(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                int n_rows, float* acc) {
  int d0 = 0;
  for (; d0 + 8 <= head_dim; d0 += 8) {
    for_row_groups(n_rows, [&]<int NR>(int r0) {
      accumulate_rows<NR>(values, n_keys, head_dim, p + r0 * p_stride, p_stride,
                          acc + r0 * head_dim, d0);
    });
  }
  for (int r = 0; r < n_rows; ++r) {  // head sizes that are not a multiple of 8
    for (int j = 0; j < n_keys; ++j) {
      for (int d = d0; d < head_dim; ++d)
        acc[r * head_dim + d] += p[r * p_stride + j] * _cvtsh_ss(values[j * head_dim + d]);
    }
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
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  float total = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    total += x[i];
  }
  return total;
}

}  // namespace

AttentionKernels attention_kernels() {
  return {scores, accumulate, exp_sum};
}

}  // namespace inferd::kernels::avx2
