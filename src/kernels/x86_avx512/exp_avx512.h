// Vectorised exp for the AVX-512 kernels. Include only from files compiled with AVX-512 flags;
// the function is static so each such file keeps its own copy and none can leak into generic
// code.
#pragma once

#include <immintrin.h>

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

}  // namespace inferd::kernels::avx512
