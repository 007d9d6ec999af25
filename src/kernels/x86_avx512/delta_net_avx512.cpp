// Compiled with AVX-512 flags (src/CMakeLists.txt): the shared algorithm of delta_net_simd.h
// over 16-lane vectors.
#include "kernels/x86_avx512/delta_net_avx512.h"

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from an undefined vector, which its own uninitialized-value
// warnings then report at every call site; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/delta_net_simd.h"
#include "kernels/x86_avx2/reduce_avx2.h"
#include "kernels/x86_avx2/transpose_avx2.h"
#include "kernels/x86_avx512/exp_avx512.h"
#include "kernels/x86_avx512/reduce_avx512.h"

namespace inferd::kernels::avx512 {
namespace {

struct Avx512 {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static constexpr int kRows = 8;
  // 4 x 4 accumulators, 4 B vectors and a broadcast: 21 of the 32 registers.
  static constexpr int kTileRows = 4, kTileVecs = 4;

  static Mask mask(int n) {
    return n >= 16 ? static_cast<Mask>(0xFFFF) : static_cast<Mask>((1u << n) - 1);
  }
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Vec v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec exp(Vec x) { return exp16(x); }
  static float hsum(Vec v) { return hsum_ps(v); }
  // Each folded to 8 lanes, then AVX2's tree of horizontal adds. Constant indices only (and
  // inlined early): the caller's accumulators then stay in registers.
  __attribute__((always_inline)) static void hsum8(const Vec* v, float* out) {
    const auto fold = [](__m512 x) __attribute__((always_inline)) {
      return _mm256_add_ps(_mm512_castps512_ps256(x),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    };
    const __m256 half[8] = {fold(v[0]), fold(v[1]), fold(v[2]), fold(v[3]),
                            fold(v[4]), fold(v[5]), fold(v[6]), fold(v[7])};
    avx2::hsum8_ps(half, out);
  }
  static void transpose8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    avx2::transpose8x8_ps(src, lds, dst, ldd);
  }
};

}  // namespace

DeltaNetKernels delta_net_kernels() {
  return {delta_net_simd::recurrent<Avx512>, delta_net_simd::chunked<Avx512>,
          delta_net_simd::silu<Avx512>};
}

}  // namespace inferd::kernels::avx512
