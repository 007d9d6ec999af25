// Horizontal sum and max of 16 floats for the AVX-512 kernels. Include only from files compiled
// with AVX-512 flags; static, so each such file keeps its own copy and none leaks into generic
// code.
#pragma once

#include <immintrin.h>

namespace inferd::kernels::avx512 {

static inline float hsum_ps(__m512 v) {
  const __m256 half = _mm256_add_ps(
      _mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float hmax_ps(__m512 v) {
  const __m256 half = _mm256_max_ps(
      _mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace inferd::kernels::avx512
