// The i-quant prompt tile on AVX-512 VNNI (iq_tile_avx512.h). Per run of 16 (or 32) columns and
// token: 4 (or 8) vpdpbusd of the token's activations (q + 128, broadcast 4 bytes at a time)
// with the tile's 16 rows x 4 columns, one vpmulld by the rows' scales; the row sums start at
// -bias, so they are the exact sums of q x a. 8 tokens at a time keep 8 independent chains of
// vpdpbusd in flight. The float steps are the reference's (no contraction: src/CMakeLists.txt).
#include "kernels/x86_avx512/iq_tile_avx512.h"

#include <immintrin.h>

#include <cstring>

// GCC 12's _mm512_cvtepi32_ps starts from _mm512_undefined_ps(), which its own
// -Wmaybe-uninitialized / -Wuninitialized then report at every call site (as in gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace inferd::kernels::avx512 {
namespace {

inline __m512i broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// kRunColumns: the columns each scale covers (16, or 32 where the tile's scales come in equal
// pairs), so one vpmulld serves 4 or 8 vpdpbusd.
template <int kTokens, int kRunColumns>
void tokens_tile(const IqTile& tile, __mmask16 rows, const uint8_t* act, int64_t act_stride,
                 float* y, int64_t y_stride) {
  constexpr int kOperands = kRunColumns / 4;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i start = _mm512_sub_epi32(zero, _mm512_load_si512(tile.bias));
  __m512i isum[kTokens];
  for (int t = 0; t < kTokens; ++t) isum[t] = start;
  for (int k = 0; k < kQKK / kRunColumns; ++k) {
    __m512i w[kOperands];
    for (int c = 0; c < kOperands; ++c) w[c] = _mm512_load_si512(tile.q[kOperands * k + c]);
    const __m512i scale = _mm512_load_si512(tile.scale[k * kRunColumns / 16]);
    for (int t = 0; t < kTokens; ++t) {
      const uint8_t* a = act + t * act_stride + offsetof(BlockQ8_K, qs) + kRunColumns * k;
      __m512i run = _mm512_dpbusd_epi32(zero, broadcast4(a), w[0]);
      for (int c = 1; c < kOperands; ++c)
        run = _mm512_dpbusd_epi32(run, broadcast4(a + 4 * c), w[c]);
      isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(run, scale));
    }
  }
  const __m512 d = _mm512_load_ps(tile.d);
  for (int t = 0; t < kTokens; ++t) {
    float a_d;
    std::memcpy(&a_d, act + t * act_stride + offsetof(BlockQ8_K, d), sizeof(a_d));
    const __m512 term =
        _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(a_d)), _mm512_cvtepi32_ps(isum[t]));
    float* out = y + t * y_stride;
    _mm512_mask_storeu_ps(out, rows, _mm512_add_ps(_mm512_maskz_loadu_ps(rows, out), term));
  }
}

template <int kRunColumns>
void all_tokens(const IqTile& tile, __mmask16 rows, const uint8_t* a, int64_t act_stride,
                int64_t n_tokens, float* y, int64_t y_stride) {
  int64_t t = 0;
  for (; t + 8 <= n_tokens; t += 8)
    tokens_tile<8, kRunColumns>(tile, rows, a + t * act_stride, act_stride, y + t * y_stride,
                                y_stride);
  a += t * act_stride;
  y += t * y_stride;
  switch (n_tokens - t) {
    case 7:
      return tokens_tile<7, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 6:
      return tokens_tile<6, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 5:
      return tokens_tile<5, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 4:
      return tokens_tile<4, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 3:
      return tokens_tile<3, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 2:
      return tokens_tile<2, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    case 1:
      return tokens_tile<1, kRunColumns>(tile, rows, a, act_stride, y, y_stride);
    default:
      return;
  }
}

}  // namespace

void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride) {
  const auto rows = static_cast<__mmask16>((1u << n_rows) - 1);
  const auto* a = reinterpret_cast<const uint8_t*>(act);
  if (tile.scale_per_32) return all_tokens<32>(tile, rows, a, act_stride, n_tokens, y, y_stride);
  all_tokens<16>(tile, rows, a, act_stride, n_tokens, y, y_stride);
}

}  // namespace inferd::kernels::avx512
