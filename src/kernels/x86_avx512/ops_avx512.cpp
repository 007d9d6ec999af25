// Compiled with AVX-512 flags (src/CMakeLists.txt).
#include "kernels/x86_avx512/ops_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/x86_avx512/exp_avx512.h"
#include "kernels/x86_avx512/reduce_avx512.h"

// GCC 12's AVX-512 intrinsics start from an undefined vector, which its own uninitialized-value
// warnings then report at every call site; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace inferd::kernels::avx512 {

void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y) {
  // Tiles of up to 4 rows x 64 outputs in 16 registers: per j, 256 contiguous bytes of B's
  // column j for all 4 rows. The tail's vectors through masks.
  constexpr int64_t kRows = 4, kVectors = 4;
  for (int64_t t0 = 0; t0 < n; t0 += kRows) {
    const int64_t rows = std::min(kRows, n - t0);
    for (int64_t o0 = 0; o0 < out; o0 += 16 * kVectors) {
      __mmask16 lanes[kVectors];
      for (int64_t v = 0; v < kVectors; ++v) {
        const int64_t left = out - o0 - 16 * v;
        lanes[v] = left >= 16  ? static_cast<__mmask16>(0xFFFF)
                   : left <= 0 ? static_cast<__mmask16>(0)
                               : static_cast<__mmask16>((1u << left) - 1);
      }
      __m512 acc[kRows][kVectors];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t v = 0; v < kVectors; ++v)
          acc[i][v] = _mm512_maskz_loadu_ps(lanes[v], y[t0 + i] + o0 + 16 * v);
      for (int64_t j = 0; j < rank; ++j) {
        __m512 b[kVectors];
        for (int64_t v = 0; v < kVectors; ++v)
          b[v] = _mm512_maskz_loadu_ps(lanes[v], bt + j * ldb + o0 + 16 * v);
        for (int64_t i = 0; i < rows; ++i) {
          const __m512 l = _mm512_set1_ps(low[(t0 + i) * rank + j]);
          for (int64_t v = 0; v < kVectors; ++v) acc[i][v] = _mm512_fmadd_ps(l, b[v], acc[i][v]);
        }
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t v = 0; v < kVectors; ++v)
          _mm512_mask_storeu_ps(y[t0 + i] + o0 + 16 * v, lanes[v], acc[i][v]);
    }
  }
}

void silu_mul(float* a, const float* b, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i < n; i += 16) {
    // The tail through a mask: lanes past n are neither read nor written.
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(lanes, a + i);
    // x / (1 + exp(-x)); exp16 gives 0 for -x below -87, where the true value is below 1e-38.
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(a + i, lanes, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(lanes, b + i)));
  }
}

void gelu_mul(float* a, const float* b, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 minus_2c = _mm512_set1_ps(-2.0f * 0.7978845608028654f);  // -2 sqrt(2/pi)
  const __m512 minus_2ck = _mm512_set1_ps(-2.0f * 0.7978845608028654f * 0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(lanes, a + i);
    // x / (1 + exp(-2u)); exp16 clamps its argument at 88.7, where x / (1 + e) is below 1e-36.
    const __m512 minus_2u =
        _mm512_mul_ps(x, _mm512_fmadd_ps(minus_2ck, _mm512_mul_ps(x, x), minus_2c));
    const __m512 gelu = _mm512_div_ps(x, _mm512_add_ps(one, exp16(minus_2u)));
    _mm512_mask_storeu_ps(a + i, lanes, _mm512_mul_ps(gelu, _mm512_maskz_loadu_ps(lanes, b + i)));
  }
}

void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit) {
  const __m512 one = _mm512_set1_ps(1.0f), minus_alpha = _mm512_set1_ps(-alpha);
  const __m512 high = _mm512_set1_ps(limit), low = _mm512_set1_ps(-limit);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    // min/max return their second operand when either is NaN: NaN passes, as std::min and
    // std::clamp pass it in the reference.
    const __m512 x = _mm512_min_ps(high, _mm512_maskz_loadu_ps(lanes, g + i));
    const __m512 y = _mm512_max_ps(low, _mm512_min_ps(high, _mm512_maskz_loadu_ps(lanes, u + i)));
    const __m512 e = exp16(_mm512_mul_ps(minus_alpha, x));  // clamped at 88.7: x / e below 1e-36
    const __m512 out =
        _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_add_ps(y, one));
    _mm512_mask_storeu_ps(g + i, lanes, out);
  }
}

void softcap(float* x, int64_t n, float in_scale, float cap) {
  const __m512 scale = _mm512_set1_ps(in_scale), out_scale = _mm512_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + i), scale);
    _mm512_mask_storeu_ps(x + i, lanes, _mm512_mul_ps(tanh16(v), out_scale));
  }
}

int64_t argmax(const float* x, int64_t n) {
  const auto lanes_at = [n](int64_t i) {
    return n - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                       : static_cast<__mmask16>((1u << (n - i)) - 1);
  };
  __m512 m = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < n; i += 16)  // lanes past n keep m
    m = _mm512_mask_max_ps(m, lanes_at(i), m, _mm512_maskz_loadu_ps(lanes_at(i), x + i));
  const __m512 best = _mm512_set1_ps(hmax_ps(m));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(
        lanes_at(i), _mm512_maskz_loadu_ps(lanes_at(i), x + i), best, _CMP_EQ_OQ);
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  return 0;
}

void mask_logits(const uint32_t* allowed, float* x, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const int64_t words = (n + 31) / 32;
  for (int64_t w = 0; w < words; ++w) {
    uint32_t forbidden = ~allowed[w];
    const int64_t lanes = n - w * 32;  // < 32 only in the last word
    if (lanes < 32) forbidden &= (1u << lanes) - 1;
    if (forbidden == 0) continue;
    float* const p = x + w * 32;
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(forbidden & 0xFFFFu), neg_inf);
    _mm512_mask_storeu_ps(p + 16, static_cast<__mmask16>(forbidden >> 16), neg_inf);
  }
}

}  // namespace inferd::kernels::avx512
