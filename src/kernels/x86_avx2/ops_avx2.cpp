// Compiled with AVX2 flags (src/CMakeLists.txt); see exp_avx2.h for the shared exp.
#include "kernels/x86_avx2/ops_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ref/quant_ref.h"
#include "kernels/x86_avx2/exp_avx2.h"
#include "kernels/x86_avx2/reduce_avx2.h"

namespace inferd::kernels::avx2 {

namespace {

// One tile of lora_up: `rows` (<= kRows) rows x kVectors * 8 outputs from o, in registers.
template <int64_t kVectors>
void lora_up_tile(int64_t rows, int64_t rank, int64_t ldb, int64_t o, const float* low,
                  const float* bt, float* const* y) {
  constexpr int64_t kRows = 2;
  __m256 acc[kRows][kVectors];
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t v = 0; v < kVectors; ++v) acc[i][v] = _mm256_loadu_ps(y[i] + o + 8 * v);
  for (int64_t j = 0; j < rank; ++j) {
    __m256 b[kVectors];
    for (int64_t v = 0; v < kVectors; ++v) b[v] = _mm256_loadu_ps(bt + j * ldb + o + 8 * v);
    for (int64_t i = 0; i < rows; ++i) {
      const __m256 l = _mm256_set1_ps(low[i * rank + j]);
      for (int64_t v = 0; v < kVectors; ++v) acc[i][v] = _mm256_fmadd_ps(l, b[v], acc[i][v]);
    }
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t v = 0; v < kVectors; ++v) _mm256_storeu_ps(y[i] + o + 8 * v, acc[i][v]);
}

}  // namespace

void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y) {
  // Tiles of up to 2 rows x 32 outputs in 8 registers: per j, 128 contiguous bytes of B's
  // column j for both rows; then 8 outputs at a time, then one at a time as the reference.
  constexpr int64_t kRows = 2;
  for (int64_t t0 = 0; t0 < n; t0 += kRows) {
    const int64_t rows = std::min(kRows, n - t0);
    const float* tile_low = low + t0 * rank;
    float* const* tile_y = y + t0;
    int64_t o = 0;
    for (; o + 32 <= out; o += 32) lora_up_tile<4>(rows, rank, ldb, o, tile_low, bt, tile_y);
    for (; o + 8 <= out; o += 8) lora_up_tile<1>(rows, rank, ldb, o, tile_low, bt, tile_y);
    for (; o < out; ++o) {
      for (int64_t i = 0; i < rows; ++i) {
        float v = tile_y[i][o];
        for (int64_t j = 0; j < rank; ++j) v = std::fma(tile_low[i * rank + j], bt[j * ldb + o], v);
        tile_y[i][o] = v;
      }
    }
  }
}

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
  ref::silu_mul(a + i, b + i, n - i);  // the last n % 8
}

void gelu_mul(float* a, const float* b, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  constexpr float kMinus2C = -2.0f * 0.7978845608028654f;  // -2 sqrt(2/pi)
  constexpr float kMinus2CK = kMinus2C * 0.044715f;
  const __m256 minus_2c = _mm256_set1_ps(kMinus2C), minus_2ck = _mm256_set1_ps(kMinus2CK);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    // x / (1 + exp(-2u)); exp8 clamps its argument at 88.7, where x / (1 + e) is below 1e-36.
    const __m256 minus_2u =
        _mm256_mul_ps(x, _mm256_fmadd_ps(minus_2ck, _mm256_mul_ps(x, x), minus_2c));
    const __m256 gelu = _mm256_div_ps(x, _mm256_add_ps(one, exp8(minus_2u)));
    _mm256_storeu_ps(a + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(b + i)));
  }
  ref::gelu_mul(a + i, b + i, n - i);  // the last n % 8
}

void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit) {
  const __m256 one = _mm256_set1_ps(1.0f), minus_alpha = _mm256_set1_ps(-alpha);
  const __m256 high = _mm256_set1_ps(limit), low = _mm256_set1_ps(-limit);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // min/max return their second operand when either is NaN: NaN passes, as in the reference.
    const __m256 x = _mm256_min_ps(high, _mm256_loadu_ps(g + i));
    const __m256 y = _mm256_max_ps(low, _mm256_min_ps(high, _mm256_loadu_ps(u + i)));
    const __m256 e = exp8(_mm256_mul_ps(minus_alpha, x));  // clamped at 88.7: x / e below 1e-36
    _mm256_storeu_ps(g + i,
                     _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_add_ps(y, one)));
  }
  ref::swiglu_oai(g + i, u + i, n - i, alpha, limit);  // the last n % 8
}

void softcap(float* x, int64_t n, float in_scale, float cap) {
  const __m256 scale = _mm256_set1_ps(in_scale), out_scale = _mm256_set1_ps(cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i,
                     _mm256_mul_ps(tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), scale)), out_scale));
  for (; i < n; ++i) x[i] = cap * std::tanh(x[i] * in_scale);
}

int64_t argmax(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float best = hmax_ps(m);
  for (int64_t j = i; j < n; ++j) best = x[j] > best ? x[j] : best;  // no std:: inline here
  const __m256 target = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
    if (hit != 0) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i)
    if (x[i] == best) return i;
  return 0;
}

void mask_logits(const uint32_t* allowed, float* x, int64_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const int64_t words = n / 32;
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == ~0u) continue;  // all allowed: nothing to read or write
    float* const p = x + w * 32;
    if (bits == 0) {  // all forbidden: stores only
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(p + 8 * k, neg_inf);
      continue;
    }
    for (int k = 0; k < 4; ++k) {
      // Lane j keeps its value where bit 8k + j is set.
      const __m256i byte = _mm256_set1_epi32(static_cast<int>((bits >> (8 * k)) & 0xFFu));
      const __m256 keep =
          _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit));
      _mm256_storeu_ps(p + 8 * k, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(p + 8 * k), keep));
    }
  }
  for (int64_t i = words * 32; i < n; ++i) {
    if (((allowed[i / 32] >> (i % 32)) & 1u) == 0) x[i] = -std::numeric_limits<float>::infinity();
  }
}

void quantize_row_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), kNearest));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], kNearest);
}

}  // namespace inferd::kernels::avx2
