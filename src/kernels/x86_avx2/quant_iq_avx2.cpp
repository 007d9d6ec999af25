// AVX2 kernels of the i-quants (quant_iq_avx2.h): the row dots of decode steps and the prompt
// tile. Row dots, per 32 weights: the 32 codebook magnitudes (4 or 8 table words) as unsigned
// bytes, the activations' signs flipped where a weight is negative (vpsignb), vpmaddubsw into 16
// pairs, then vpmaddwd by each 16 values' scale 2 s + 1 into int32 lanes (IQ1: signed weights in
// units of the shift, |w| times the activations with w's signs). Nothing is rounded until a
// super-block's sum, and the few float steps are the reference's, so the results are its bits.
// Compiled with AVX2 flags and without contraction (src/CMakeLists.txt).
#include "kernels/x86_avx2/quant_iq_avx2.h"

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstring>

#include "tensor/iq_grids.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::avx2 {
namespace {

// F16C, not tensor/half.h's inline helper (an inline function compiled here could become every
// caller's copy).
inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// +1 or -1 in each byte: byte 8g + j is -1 when bit j of sign byte g (of the 4 in `signs`) is set.
inline __m256i sign_bytes(uint32_t signs) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(signs)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(set, _mm256_set1_epi8(1));
}

// The 16-bit scale pairs of 32 values: 2 s + 1 of values 0-15 in the low half, 16-31 high.
inline __m256i scale_pairs(int first, int second) {
  return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(2 * first + 1)),
                           _mm_set1_epi16(static_cast<int16_t>(2 * second + 1)));
}

// acc += the scaled products of 32 magnitudes (unsigned bytes), signs and activations.
inline __m256i add_products(__m256i acc, __m256i magnitudes, uint32_t signs, const int8_t* q8,
                            __m256i scales) {
  const __m256i a =
      _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8)), sign_bytes(signs));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, a), scales));
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i grid8(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(static_cast<long long>(grid[i3]), static_cast<long long>(grid[i2]),
                           static_cast<long long>(grid[i1]), static_cast<long long>(grid[i0]));
}

template <typename Index>
inline __m256i grid4(const uint32_t* grid, const Index* idx) {
  return _mm256_set_epi32(static_cast<int>(grid[idx[7]]), static_cast<int>(grid[idx[6]]),
                          static_cast<int>(grid[idx[5]]), static_cast<int>(grid[idx[4]]),
                          static_cast<int>(grid[idx[3]]), static_cast<int>(grid[idx[2]]),
                          static_cast<int>(grid[idx[1]]), static_cast<int>(grid[idx[0]]));
}

// The four sign bytes of IQ2_XXS / IQ3_XXS groups from their 7-bit fields.
inline uint32_t signs_of_fields(uint32_t word) {
  uint32_t s = 0;
  for (int l = 0; l < 4; ++l)
    s |= static_cast<uint32_t>(kIqSigns[(word >> (7 * l)) & 127]) << (8 * l);
  return s;
}

// The reference's float steps: sum += d_w * d_a * isum per block, times the final factor.
template <typename Block, typename IntSum>
float dot_blocks(int64_t n, const void* w, const void* a, float factor, IntSum int_sum) {
  const auto* wb = static_cast<const Block*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const int32_t isum = int_sum(wb[b], ab[b].qs);
    sum += h2f(wb[b].d) * ab[b].d * static_cast<float>(isum);
  }
  return sum * factor;
}

int32_t iq2_xxs_sum(const BlockIQ2_XXS& b, const int8_t* q8) {
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t indices = load_u32(b.qs + 4 * ib), fields = load_u32(b.qs + 4 * ib + 2);
    const __m256i g = grid8(kIq2XxsGrid, indices & 0xFF, (indices >> 8) & 0xFF,
                            (indices >> 16) & 0xFF, indices >> 24);
    const int s = static_cast<int>(fields >> 28);
    acc = add_products(acc, g, signs_of_fields(fields), q8 + 32 * ib, scale_pairs(s, s));
  }
  return hsum_epi32(acc);
}

int32_t iq2_xs_sum(const BlockIQ2_XS& b, const int8_t* q8) {
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t* q = b.qs + 4 * ib;
    const __m256i g = grid8(kIq2XsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
    const uint32_t signs = kIqSigns[q[0] >> 9] | (kIqSigns[q[1] >> 9] << 8) |
                           (kIqSigns[q[2] >> 9] << 16) |
                           (static_cast<uint32_t>(kIqSigns[q[3] >> 9]) << 24);
    acc = add_products(acc, g, signs, q8 + 32 * ib,
                       scale_pairs(b.scales[ib] & 0x0F, b.scales[ib] >> 4));
  }
  return hsum_epi32(acc);
}

// Eight 32-bit codebook indices at once: the low 8 bits from 8 bytes of qs, the high bits from
// `high` (one qh value a lane, already shifted left by 8) shifted right by `shift` per lane and
// masked: a few vector instructions instead of four scalar ones an index.
inline void indices8(const uint8_t* qs, __m256i high, __m256i shift, __m256i mask, uint32_t* out) {
  uint64_t low;
  std::memcpy(&low, qs, sizeof(low));
  const __m256i v =
      _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(low))),
                      _mm256_and_si256(_mm256_srlv_epi32(high, shift), mask));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), v);
}

int32_t iq2_s_sum(const BlockIQ2_S& b, const int8_t* q8) {
  // Group l of 32 values ib: qs[4 ib + l] | (2-bit field l of qh[ib]) << 8.
  const __m256i shift = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), mask = _mm256_set1_epi32(0x300);
  alignas(32) uint32_t idx[32];
  for (int ib = 0; ib < 8; ib += 2) {
    const __m256i high =
        _mm256_setr_m128i(_mm_set1_epi32(b.qh[ib] << 8), _mm_set1_epi32(b.qh[ib + 1] << 8));
    indices8(b.qs + 4 * ib, high, shift, mask, idx + 4 * ib);
  }
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t* i = idx + 4 * ib;
    const __m256i g = grid8(kIq2SGrid, i[0], i[1], i[2], i[3]);
    acc = add_products(acc, g, load_u32(b.signs + 4 * ib), q8 + 32 * ib,
                       scale_pairs(b.scales[ib] & 0x0F, b.scales[ib] >> 4));
  }
  return hsum_epi32(acc);
}

int32_t iq3_xxs_sum(const BlockIQ3_XXS& b, const int8_t* q8) {
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const int idx[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
    const uint32_t fields = load_u32(b.qs + kQKK / 4 + 4 * ib);
    const int s = static_cast<int>(fields >> 28);
    acc = add_products(acc, grid4(kIq3XxsGrid, idx), signs_of_fields(fields), q8 + 32 * ib,
                       scale_pairs(s, s));
  }
  return hsum_epi32(acc);
}

int32_t iq3_s_sum(const BlockIQ3_S& b, const int8_t* q8) {
  // Half k of 32 values ib (k = 2 l + h): qs[8 ib + k] | (bit k of qh[ib]) << 8.
  const __m256i shift = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), mask = _mm256_set1_epi32(0x100);
  alignas(32) uint32_t idx[64];
  for (int ib = 0; ib < 8; ++ib)
    indices8(b.qs + 8 * ib, _mm256_set1_epi32(b.qh[ib] << 8), shift, mask, idx + 8 * ib);
  __m256i acc = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
    acc = add_products(acc, grid4(kIq3SGrid, idx + 8 * ib), load_u32(b.signs + 4 * ib),
                       q8 + 32 * ib, scale_pairs(s, s));
  }
  return hsum_epi32(acc);
}

// IQ1: 32 weights in units of kIq1Delta times their scale, 8 x coordinate + shift (-9..9),
// from the four points' coordinates (int8 -1, 0, 1) and `shifts`, +1 or -1 in every byte of
// each group of 8: the coordinates x 8 per byte (a 32-bit shift whose bits crossing into the
// next byte are masked off), plus the shifts.
inline __m256i iq1_weights(uint64_t p0, uint64_t p1, uint64_t p2, uint64_t p3, __m256i shifts) {
  const __m256i points = _mm256_set_epi64x(static_cast<long long>(p3), static_cast<long long>(p2),
                                           static_cast<long long>(p1), static_cast<long long>(p0));
  const __m256i eight =
      _mm256_and_si256(_mm256_slli_epi32(points, 3), _mm256_set1_epi8(static_cast<char>(0xF8)));
  return _mm256_add_epi8(eight, shifts);
}

// -1 in every byte where `flags` & the 16-bit lane's bit is set, else +1: the shifts of IQ1's
// groups from their sign flags, without scalar work (each group of 8 bytes is 4 int16 lanes).
inline __m256i shifts_of(uint16_t flags, __m256i lane_bits) {
  const __m256i set = _mm256_cmpeq_epi16(
      _mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(flags)), lane_bits), lane_bits);
  return _mm256_or_si256(set, _mm256_set1_epi8(1));
}

// The scaled products of 32 such weights with 32 activations: |w| times a with w's signs.
inline __m256i iq1_products(__m256i w, const int8_t* q8, __m256i scales) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w)),
                           scales);
}

// The prompt tile for 8 rows (half h of the tile) and kTokens tokens. Per run of 16 columns and
// token: 4 vpmaddubsw of the token's activations (q + 128, 4 bytes broadcast) with 8 rows x 4
// columns (pairs of at most 2 x 255 x 62, inside int16), each vpmaddwd'ed with the rows' scale
// repeated in both int16 halves of a lane, so the scale costs no multiply of its own.
template <int kTokens>
void half_tile(const IqTile& tile, int h, __m256i rows, const uint8_t* act, int64_t act_stride,
               float* y, int64_t y_stride) {
  const __m256i start =
      _mm256_sub_epi32(_mm256_setzero_si256(),
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile.bias + 8 * h)));
  __m256i isum[kTokens];
  for (int t = 0; t < kTokens; ++t) isum[t] = start;
  for (int k = 0; k < kIqTileRuns; ++k) {
    __m256i w[4];
    for (int c = 0; c < 4; ++c)
      w[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tile.q[4 * k + c][32 * h]));
    const __m256i s32 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tile.scale[k][8 * h]));
    const __m256i scale = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
    for (int t = 0; t < kTokens; ++t) {
      const uint8_t* a = act + t * act_stride + offsetof(BlockQ8_K, qs) + 16 * k;
      for (int c = 0; c < 4; ++c) {
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_set1_epi32(static_cast<int>(load_u32(a + 4 * c))), w[c]);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, scale));
      }
    }
  }
  const __m256 d = _mm256_loadu_ps(tile.d + 8 * h);
  for (int t = 0; t < kTokens; ++t) {
    float a_d;
    std::memcpy(&a_d, act + t * act_stride + offsetof(BlockQ8_K, d), sizeof(a_d));
    const __m256 term =
        _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a_d)), _mm256_cvtepi32_ps(isum[t]));
    float* out = y + t * y_stride + 8 * h;
    _mm256_maskstore_ps(out, rows, _mm256_add_ps(_mm256_maskload_ps(out, rows), term));
  }
}

}  // namespace

void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* a = reinterpret_cast<const uint8_t*>(act);
  constexpr int kStep = 4;
  for (int h = 0; h < 2 && 8 * h < n_rows; ++h) {
    // Lane r of the mask is set for rows 8 h + r < n_rows.
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows - 8 * h),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t t = 0;
    for (; t + kStep <= n_tokens; t += kStep)
      half_tile<kStep>(tile, h, rows, a + t * act_stride, act_stride, y + t * y_stride, y_stride);
    const uint8_t* a_left = a + t * act_stride;
    float* y_left = y + t * y_stride;
    switch (n_tokens - t) {
      case 3:
        half_tile<3>(tile, h, rows, a_left, act_stride, y_left, y_stride);
        break;
      case 2:
        half_tile<2>(tile, h, rows, a_left, act_stride, y_left, y_stride);
        break;
      case 1:
        half_tile<1>(tile, h, rows, a_left, act_stride, y_left, y_stride);
        break;
      default:
        break;
    }
  }
}

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_blocks<BlockIQ2_XXS>(n, w, a, 0.125f, iq2_xxs_sum);
}
float dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_blocks<BlockIQ2_XS>(n, w, a, 0.125f, iq2_xs_sum);
}
float dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) {
  return dot_blocks<BlockIQ2_S>(n, w, a, 0.125f, iq2_s_sum);
}
float dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_blocks<BlockIQ3_XXS>(n, w, a, 0.25f, iq3_xxs_sum);
}
float dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) {
  return dot_blocks<BlockIQ3_S>(n, w, a, 1.0f, iq3_s_sum);
}

// The block's sum in those units is 8 x the reference's isum plus its shift sum, so kIq1Delta
// x it is the reference's block float exactly (an integer below 2^24 over 8).
float dot_iq1_s_q8_k(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ1_S*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m256i shift = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9), mask = _mm256_set1_epi32(0x700);
  // qh's bit 15: the sign of every group's shift.
  const __m256i sign_bit = _mm256_set1_epi16(static_cast<int16_t>(0x8000));
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ1_S& x = wb[b];
    // Group l of 32 values ib: qs[4 ib + l] | (3-bit field l of qh[ib]) << 8.
    alignas(32) uint32_t idx[32];
    for (int ib = 0; ib < 8; ib += 2) {
      const __m256i high =
          _mm256_setr_m128i(_mm_set1_epi32(x.qh[ib] << 8), _mm_set1_epi32(x.qh[ib + 1] << 8));
      indices8(x.qs + 4 * ib, high, shift, mask, idx + 4 * ib);
    }
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const int h = x.qh[ib], s = (h >> 12) & 7;
      const uint32_t* i = idx + 4 * ib;
      const __m256i wv =
          iq1_weights(kIq1SGrid[i[0]], kIq1SGrid[i[1]], kIq1SGrid[i[2]], kIq1SGrid[i[3]],
                      shifts_of(static_cast<uint16_t>(h), sign_bit));
      acc = _mm256_add_epi32(acc, iq1_products(wv, ab[b].qs + 32 * ib, scale_pairs(s, s)));
    }
    const float block = kIq1Delta * static_cast<float>(hsum_epi32(acc));
    sum += h2f(x.d) * ab[b].d * block;
  }
  return sum;
}

float dot_iq1_m_q8_k(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ1_M*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m256i shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4), mask = _mm256_set1_epi32(0x700);
  // Group g's shift sign, bit 4 g + 3 of its two qh bytes, in the 4 int16 lanes of its 8 bytes.
  const __m256i group_bits = _mm256_setr_epi16(
      0x0008, 0x0008, 0x0008, 0x0008, 0x0080, 0x0080, 0x0080, 0x0080, 0x0800, 0x0800, 0x0800,
      0x0800, static_cast<int16_t>(0x8000), static_cast<int16_t>(0x8000),
      static_cast<int16_t>(0x8000), static_cast<int16_t>(0x8000));
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ1_M& x = wb[b];
    uint16_t sc[4];
    std::memcpy(sc, x.scales, sizeof(sc));
    const auto d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                              ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    // Group l of 32 values ib: qs[4 ib + l] | (low 3 bits of nibble l % 2 of qh[2 ib + l / 2])
    // << 8.
    alignas(32) uint32_t idx[32];
    for (int ib = 0; ib < 8; ib += 2) {
      const uint8_t* h = x.qh + 2 * ib;
      const __m256i high = _mm256_setr_epi32(h[0] << 8, h[0] << 8, h[1] << 8, h[1] << 8, h[2] << 8,
                                             h[2] << 8, h[3] << 8, h[3] << 8);
      indices8(x.qs + 4 * ib, high, shift, mask, idx + 4 * ib);
    }
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t* i = idx + 4 * ib;
      uint16_t flags;  // qh[2 ib] and qh[2 ib + 1]: group g's shift sign is bit 4 g + 3
      std::memcpy(&flags, x.qh + 2 * ib, sizeof(flags));
      const __m256i wv = iq1_weights(kIq1SGrid[i[0]], kIq1SGrid[i[1]], kIq1SGrid[i[2]],
                                     kIq1SGrid[i[3]], shifts_of(flags, group_bits));
      const __m256i scales =
          scale_pairs((sc[ib / 2] >> (6 * (ib % 2))) & 7, (sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7);
      acc = _mm256_add_epi32(acc, iq1_products(wv, ab[b].qs + 32 * ib, scales));
    }
    const float block = kIq1Delta * static_cast<float>(hsum_epi32(acc));
    sum += h2f(d_bits) * ab[b].d * block;
  }
  return sum;
}

}  // namespace inferd::kernels::avx2
