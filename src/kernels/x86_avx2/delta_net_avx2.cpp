// Compiled with AVX2 flags (src/CMakeLists.txt): the shared algorithm of delta_net_simd.h over
// 8-lane vectors.
#include "kernels/x86_avx2/delta_net_avx2.h"

#include <immintrin.h>

#include "kernels/delta_net_simd.h"
#include "kernels/x86_avx2/exp_avx2.h"
#include "kernels/x86_avx2/reduce_avx2.h"
#include "kernels/x86_avx2/transpose_avx2.h"

namespace inferd::kernels::avx2 {
namespace {

struct Avx2 {
  using Vec = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8;
  static constexpr int kRows = 4;
  // 6 x 2 accumulators, 2 B vectors and a broadcast: 15 of the 16 registers.
  static constexpr int kTileRows = 6, kTileVecs = 2;

  static Mask mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Vec v, Mask m) { _mm256_maskstore_ps(p, m, v); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec exp(Vec x) { return exp8(x); }
  static float hsum(Vec v) { return hsum_ps(v); }
  __attribute__((always_inline)) static void hsum8(const Vec* v, float* out) { hsum8_ps(v, out); }
  static void transpose8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    transpose8x8_ps(src, lds, dst, ldd);
  }
};

}  // namespace

DeltaNetKernels delta_net_kernels() {
  return {delta_net_simd::recurrent<Avx2>, delta_net_simd::chunked<Avx2>,
          delta_net_simd::silu<Avx2>};
}

}  // namespace inferd::kernels::avx2
