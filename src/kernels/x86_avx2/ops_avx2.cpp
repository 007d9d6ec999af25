// Compiled with AVX2 flags (src/CMakeLists.txt); see exp_avx2.h for the shared exp.
#include "kernels/x86_avx2/ops_avx2.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/x86_avx2/exp_avx2.h"

namespace inferd::kernels::avx2 {

void silu_mul(float* a, const float* b, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    // x / (1 + exp(-x)); exp8 gives 0 for -x below -87, where the true value is below 1e-38.
    const __m256 e = exp8(_mm256_xor_ps(x, sign));
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
    _mm256_storeu_ps(a + i, _mm256_mul_ps(silu, _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

}  // namespace inferd::kernels::avx2
