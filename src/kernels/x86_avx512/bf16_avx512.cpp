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

}  // namespace inferd::kernels::avx512
