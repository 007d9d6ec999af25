// Horizontal sums and max of 8 floats for the AVX2 kernels. Include only from files compiled
// with AVX2 flags; static, so each such file keeps its own copy and none leaks into generic
// code.
#pragma once

#include <immintrin.h>

namespace inferd::kernels::avx2 {

static inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// out[r] = the sum of v[r]'s lanes for r < 8: one transposing tree of horizontal adds (cheaper
// than eight hsum_ps). Always inlined, so that an array of accumulators passed in can stay in
// registers.
__attribute__((always_inline)) static inline void hsum8_ps(const __m256* v, float* out) {
  const __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                                      _mm256_permute2f128_ps(h0123, h4567, 0x31)));
}

static inline float hmax_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

}  // namespace inferd::kernels::avx2
