// Vectorised exp for the AVX-512 kernels. Include only from files compiled with AVX-512 flags;
// the function is static so each such file keeps its own copy and none can leak into generic
// code.
#pragma once

#include <immintrin.h>

#include "kernels/tanh_series.h"

namespace inferd::kernels::avx512 {

// exp(x) for 16 lanes, the same method and constants as the AVX2 version (exp_avx2.h):
// x = n ln2 + r, Taylor series of exp(r) to r^7, 2^n into the exponent; below -87.3 gives 0.
static inline __m512 exp16(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 poly = _mm512_set1_ps(1.0f / 5040);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 720));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 120));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 24));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f / 6));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(0.5f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.0f));
  const __m512i exponent =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  const __m512 result = _mm512_mul_ps(poly, _mm512_castsi512_ps(exponent));
  return _mm512_mask_mov_ps(result, underflow, _mm512_setzero_ps());
}

// tanh(z) for 16 lanes, within a few ulps: (1 - e) / (1 + e) with e = exp(-2|z|) where |z| >= 1/4
// (e <= 0.61 there, so 1 - e cancels little), the odd Taylor series to z^11 below
// (the next term is under 6e-11 of the value); z's sign put back, NaN passed through.
static inline __m512 tanh16(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 a = _mm512_abs_ps(z);
  const __m512 e = exp16(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));  // 0 past |z| = 43.6
  const __m512 large = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512 a2 = _mm512_mul_ps(a, a);
  __m512 poly = _mm512_setzero_ps();
  for (const float c : kTanhSeries) poly = _mm512_fmadd_ps(poly, a2, _mm512_set1_ps(c));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(poly, a2), a, a);
  const __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kTanhSeriesBelow), _CMP_LT_OQ);
  const __m512i magnitude = _mm512_castps_si512(_mm512_mask_blend_ps(is_small, large, small));
  const __m512i sign =
      _mm512_and_si512(_mm512_castps_si512(z), _mm512_castps_si512(_mm512_set1_ps(-0.0f)));
  const __m512 t = _mm512_castsi512_ps(_mm512_or_si512(magnitude, sign));
  return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q), z);
}

}  // namespace inferd::kernels::avx512
