// AVX2 + FMA + F16C kernels for the 32-wide block formats. Compiled with those flags only
// (see src/CMakeLists.txt) and reached only through the dispatch table after a cpuid check.
#include <immintrin.h>

#include <cstring>

#include "kernels/x86_avx2/quant_avx2.h"
#include "kernels/x86_avx2/reduce_avx2.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::avx2 {
namespace {

// F16C conversions. The shared inline helpers of tensor/half.h are not used here: an inline
// function compiled in this AVX2 file could be the copy the linker keeps for every caller.
inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}
inline uint16_t f2h(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

inline float hmax_abs(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
  for (int j = 8; j < kQK; j += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  return hmax_ps(m);
}

// Rounds 32 floats * inv to int8 (nearest, ties to even, as the reference's nearbyint) and
// stores them; returns the 8 int32 lanes' partial sums for Q8_1's s.
inline __m256i quantize_block(const float* x, float inv, int8_t* out) {
  const __m256 scale = _mm256_set1_ps(inv);
  __m256i q[4];
  for (int j = 0; j < 4; ++j) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), scale);
    q[j] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  // Pack 32-bit -> 16-bit -> 8-bit; the packs interleave 128-bit lanes, so fix the order.
  __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
  __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
  __m256i p = _mm256_packs_epi16(p01, p23);
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), p);
  return sum;
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (values 0..15) then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Sum over 32 lanes of unsigned(a) * signed(b), as 8 int32 partial sums in float.
inline __m256 dot_u8_i8(__m256i a, __m256i b) {
  const __m256i pairs = _mm256_maddubs_epi16(a, b);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

}  // namespace

void quantize_row_q8_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float amax = hmax_abs(x);
    const float d = amax / 127.0f;
    blocks[b].d = f2h(d);
    quantize_block(x, amax != 0 ? 127.0f / amax : 0.0f, blocks[b].qs);
  }
}

void quantize_row_q8_1(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float amax = hmax_abs(x);
    const float d = amax / 127.0f;
    const int sum = hsum_i32(quantize_block(x, amax != 0 ? 127.0f / amax : 0.0f, blocks[b].qs));
    blocks[b].d = f2h(d);
    blocks[b].s = f2h(d * static_cast<float>(sum));
  }
}

// ref::quantize_row_q8_k's bytes: the first value of largest magnitude m (with its sign) gives
// iscale = -127 / m, each q = nearest(iscale * x) (no fused operation), at most 127.
void quantize_row_q8_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ8_K& y = blocks[b];
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8)
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    const float amax = hmax_ps(m);
    if (amax == 0) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    int first = 0;
    for (int j = 0; j < kQKK; j += 8) {
      const __m256 hit = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)),
                                       _mm256_set1_ps(amax), _CMP_EQ_OQ);
      const int mask = _mm256_movemask_ps(hit);
      if (mask != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const __m256 scale = _mm256_set1_ps(iscale), top = _mm256_set1_ps(127.0f);
    for (int j = 0; j < kQKK; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), scale),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_cvtps_epi32(_mm256_min_ps(v, top));
      }
      // Pack 32-bit -> 16-bit -> 8-bit; the packs interleave 128-bit lanes, so fix the order.
      const __m256i p16 =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i bytes =
          _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + j), bytes);
      // The sums of each 16: of q[0], q[1] and of q[2], q[3].
      y.bsums[j / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      y.bsums[j / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
    y.d = 1.0f / iscale;
  }
}

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    // q - 8 is signed; maddubs wants unsigned * signed, so move the sign onto the activations.
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(wb[b].qs), _mm256_set1_epi8(8));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
    const __m256 p = dot_u8_i8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    const float d = h2f(wb[b].d) * h2f(ab[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, acc);
  }
  return hsum_ps(acc);
}

float dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
    const __m256 p = dot_u8_i8(unpack_nibbles(wb[b].qs), y);
    const float d = h2f(wb[b].d) * h2f(ab[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, acc);
    mins += h2f(wb[b].m) * h2f(ab[b].s);
  }
  return hsum_ps(acc) + mins;
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b].qs));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[b].qs));
    const __m256 p = dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    const float d = h2f(wb[b].d) * h2f(ab[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), p, acc);
  }
  return hsum_ps(acc);
}

float dot_f16_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    auto load = [](const uint16_t* p) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    };
    acc0 = _mm256_fmadd_ps(load(x + i), load(y + i), acc0);
    acc1 = _mm256_fmadd_ps(load(x + i + 8), load(y + i + 8), acc1);
  }
  float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += h2f(x[i]) * h2f(y[i]);
  return sum;
}

float dot_f32_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
  }
  float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

float dot_bf16_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto load = [](const uint16_t* p) {
      const __m256i wide =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    };
    acc = _mm256_fmadd_ps(load(x + i), load(y + i), acc);
  }
  float sum = hsum_ps(acc);
  for (; i < n; ++i) {
    const float xf = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(x[i]) << 16)));
    const float yf = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(y[i]) << 16)));
    sum += xf * yf;
  }
  return sum;
}

}  // namespace inferd::kernels::avx2
