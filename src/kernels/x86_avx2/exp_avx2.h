// Vectorised exp for the AVX2 kernels. Include only from files compiled with AVX2 flags; the
// function is static so each such file keeps its own copy and none can leak into generic code.
#pragma once

#include <immintrin.h>

#include "kernels/tanh_series.h"

namespace inferd::kernels::avx2 {

// exp(x) for 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series to r^7
// (relative error below 2e-7), 2^n put into the exponent. Lanes below -87.3 (where the float
// result would be denormal), -inf included, give 0.
static inline __m256 exp8(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);  // ln2 split in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 poly = _mm256_set1_ps(1.0f / 5040);
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 720));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 120));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 24));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 6));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(0.5f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(poly, _mm256_castsi256_ps(exponent));
  return _mm256_andnot_ps(underflow, result);
}

// tanh(z) for 8 lanes, as the AVX-512 tanh16 (exp_avx512.h): (1 - e) / (1 + e), e = exp(-2|z|),
// where |z| >= 1/4, the odd Taylor series to z^11 below; z's sign put back, NaN passed through.
static inline __m256 tanh8(__m256 z) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign_bit, z);
  const __m256 e = exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));  // 0 past |z| = 43.6
  const __m256 large = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 a2 = _mm256_mul_ps(a, a);
  __m256 poly = _mm256_setzero_ps();
  for (const float c : kTanhSeries) poly = _mm256_fmadd_ps(poly, a2, _mm256_set1_ps(c));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(poly, a2), a, a);
  const __m256 is_small = _mm256_cmp_ps(a, _mm256_set1_ps(kTanhSeriesBelow), _CMP_LT_OQ);
  const __m256 magnitude = _mm256_blendv_ps(large, small, is_small);
  const __m256 t = _mm256_or_ps(magnitude, _mm256_and_ps(z, sign_bit));
  return _mm256_blendv_ps(t, z, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
}

}  // namespace inferd::kernels::avx2
