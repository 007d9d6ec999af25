// Compiled with AVX-512 flags (src/CMakeLists.txt); no inline helpers shared with other files.
#include "kernels/x86_avx512/bf16_avx512.h"

#include <immintrin.h>

#include "kernels/x86_avx512/reduce_avx512.h"

// GCC 12's AVX-512 intrinsics start some results from an undefined vector, which its own
// uninitialized-value warnings then report at every call site; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace inferd::kernels::avx512 {

float dot_bf16_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {  // two independent chains of 32 values each
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(x + i),
                            (__m512bh)_mm512_loadu_si512(y + i));
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(x + i + 32),
                            (__m512bh)_mm512_loadu_si512(y + i + 32));
  }
  if (i < n) {  // the tail, zero-padded by a masked load (zero pairs add nothing)
    const __mmask32 first = n - i >= 32 ? ~__mmask32{0} : (__mmask32{1} << (n - i)) - 1;
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_maskz_loadu_epi16(first, x + i),
                            (__m512bh)_mm512_maskz_loadu_epi16(first, y + i));
    if (n - i > 32) {
      const __mmask32 second = (__mmask32{1} << (n - i - 32)) - 1;
      acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_maskz_loadu_epi16(second, x + i + 32),
                              (__m512bh)_mm512_maskz_loadu_epi16(second, y + i + 32));
    }
  }
  return hsum_ps(_mm512_add_ps(acc0, acc1));
}

// Rounds like fp32_to_bf16 (tensor/half.h), 16 values at a time, so the bits match the
// reference: half to even by integer addition, NaN kept quiet. (VCVTNEPS2BF16 would flush
// denormals to zero.)
void quantize_row_bf16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  int64_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 valid =
        n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(valid, x + i);
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i result =
        _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    _mm256_mask_storeu_epi16(y + i, valid, _mm512_cvtepi32_epi16(result));
  }
}

}  // namespace inferd::kernels::avx512
