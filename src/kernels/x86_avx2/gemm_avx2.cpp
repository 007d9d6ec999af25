// Compiled with AVX2 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX2 copy of it for every caller.
#include "kernels/x86_avx2/gemm_avx2.h"
#include "kernels/x86_avx2/reduce_avx2.h"

#include <immintrin.h>

#include <cstring>
#include <numeric>
#include <type_traits>

#include "kernels/tile_driver.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::avx2 {
namespace {

inline float round_to_fp16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

inline __m256i broadcast_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  return _mm_cvtsi128_si32(s4);
}

// Ends a token's update of its accumulator here. With the c and t loops fully unrolled, GCC
// otherwise computes all of a sub-block's maddubs before adding any (it regroups the sums of
// integers), which needs more than the 16 ymm registers and spills most of them: the AVX2 Q4_K
// tile multiplied at 70 GMAC/s on the AMD EPYC that way and at 86 with the accumulators pinned
// (inferd_kernels_bench, 2048 x 2048, 512 tokens, 3 alternating runs; Q6_K 62 -> 69, Q8_0 54 ->
// 57, IQ4_XS 53 -> 57; the Q5_K tile, whose fifth bits keep more registers busy, went from 69 to
// 60 pinned and is left alone). The empty asm emits nothing; it only makes the value's
// register the point every later use starts from.
inline void pin(__m256i& v) {
  asm("" : "+x"(v));
}

// Decode streams each weight once from memory: a tile that reads a group first (the one-pass
// tile, H = 2, or the first half's pass of a tile of a few tokens, which touches every cache
// line of the group) asks for the bytes kPrefetchBytes ahead of those it is about to use,
// `bytes` of them from `p` on (a prefetch never faults, so running past the end of the matrix
// is harmless). Later passes find the group in cache. Without it a step of 2-4 rows (a few
// sequences, or one with draft tokens) waited on memory: 2 rows cost 2.2x one.
// A pass of several tokens (NT > 1) computes longer per block and asks for the bytes 16 KiB
// ahead into L2 instead: the 1B-shaped model decoded 5 sequences at 63-81 tok/s (Q6_K) with the
// 3 KiB into L1 and 87-101 with this (inferd bench --parallel 5, INFERD_ISA=avx2, alternating
// runs, AMD EPYC Zen 4; Q4_K_M 65-77 and 83-86).
constexpr int kPrefetchBytes = 3072;  // one token: best of 512-6144 on the AMD EPYC (1B shape)
constexpr int kSeveralTokensPrefetchBytes = 16384;
inline void prefetch_into_l2(const void* p, size_t bytes) {
  const char* base = static_cast<const char*>(p) + kSeveralTokensPrefetchBytes;
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(base + off, _MM_HINT_T1);
}
template <int H, int NT>
inline void prefetch_ahead(int half, const void* p, size_t bytes) {
  if (H == 2 || half == 0) {
    if constexpr (NT > 1) {
      prefetch_into_l2(p, bytes);
    } else {
      const char* base = static_cast<const char*>(p) + kPrefetchBytes;
      for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(base + off, _MM_HINT_T0);
    }
  }
}

// The eighth of a K-quant block (one of its 8 sub-blocks' share of the bytes) that sub-block j
// of `block` is about to use, asked for as far ahead as prefetch_ahead does for NT tokens.
template <int H, int NT, typename Block>
inline void prefetch_sub_block(int half, const Block* block, int j) {
  prefetch_ahead<H, NT>(half,
                        reinterpret_cast<const uint8_t*>(block) + j * sizeof(Block) / kSubBlocks,
                        sizeof(Block) / kSubBlocks);
}

inline __m256 load_fp16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Adds the fifth bit of each 4-bit value: bits 2c and 2c + 1 of the `high` byte at the nibble
// byte's position belong to its low and high nibble's values (PackedQ5KBlock, PackedQ5_1Block).
inline void add_fifth_bits(__m256i high, int c, __m256i& lo, __m256i& hi) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  const __m256i bits = _mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * c));
  lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(bits, 4), bit4));
  hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(bits, 3), bit4));
}

// A tile covers NT tokens and H halves of a packed group (8 rows each, from `half`): with 16
// registers, H = 2 (all 16 rows in one pass over the weights, which decode needs to stream
// them from memory evenly) fits only one token; larger tiles take the halves in turn.
// PackedQ4Block (Q4_0, Q4_1) or PackedQ5_1Block, w = d * q + m. Products of a nibble (<= 15) and
// an int8 (|q| <= 127) sum to at most 3810 per maddubs lane, so the 8 maddubs of a Q4 block
// accumulate in int16 without saturating; with 5-bit q a lane reaches 7874, so the pair of each
// c is widened at once.
template <int NT, int H, float ActQ8Block::*offset_sum, typename Block>
void q4_tile(const Block* w, int64_t blocks, int half, const ActQ8Block* act, int64_t act_stride,
             float* y, int64_t y_stride) {
  constexpr bool kFiveBits = std::is_same_v<Block, PackedQ5_1Block>;
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead<H, NT>(half, w + b, sizeof(Block));
    __m256i sums[NT][H];  // int16 pairs (Q4) or int32 per row (Q5_1)
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) sums[t][h] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < H; ++h) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[c] + 32 * (half + h)));
        __m256i lo = _mm256_and_si256(raw, low_nibble);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble);
        if constexpr (kFiveBits) {
          add_fifth_bits(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * (half + h))), c,
              lo, hi);
        }
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = act[b * act_stride + t].qs + 8 * c;
          const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast_i32(q)),
                                                _mm256_maddubs_epi16(hi, broadcast_i32(q + 4)));
          sums[t][h] = kFiveBits ? _mm256_add_epi32(sums[t][h], _mm256_madd_epi16(pair, ones))
                                 : _mm256_add_epi16(sums[t][h], pair);
          pin(sums[t][h]);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m256 d = load_fp16x8(w[b].d + 8 * (half + h));
      const __m256 m = load_fp16x8(w[b].m + 8 * (half + h));
      for (int t = 0; t < NT; ++t) {
        const ActQ8Block& a = act[b * act_stride + t];
        const __m256 isum =
            _mm256_cvtepi32_ps(kFiveBits ? sums[t][h] : _mm256_madd_epi16(sums[t][h], ones));
        acc[t][h] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d, _mm256_set1_ps(a.d)), acc[t][h]);
        acc[t][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.*offset_sum), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// 8 bytes (one per row) as 8 floats.
inline __m256 load_u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Adds a super-block's integer sums (isum[t][h], rows 8 (half + h) ..) times the rows' d
// (fp16) and the token's activation scale, which a Q8_K super-block's 8 blocks share.
template <int NT, int H>
inline void add_super_block(const __m256i (&isum)[NT][H], const uint16_t* d_fp16, int half,
                            const ActQ8Block* a, __m256 (&acc)[NT][H]) {
  for (int h = 0; h < H; ++h) {
    const __m256 d = load_fp16x8(d_fp16 + 8 * (half + h));
    for (int t = 0; t < NT; ++t) {
      const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(a[t].d));
      acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]), scale, acc[t][h]);
    }
  }
}

// Q4_K: the Q4 loop per 32-column sub-block. A sub-block's int16 sums (<= 30480) times its
// 6-bit scale widen to int32 in one madd and gather over the super-block in integers (under
// 2^25 a row), so d and the activation's scale (Q8_K: one per super-block) multiply once per
// super-block; the mins (dmin * min, made from the bytes once per sub-block for the 8 rows)
// fold through each sub-block's d * sum(q).
template <int NT, int H>
void q4k_tile(const PackedQ4KBlock* w, int64_t blocks, int half, const ActQ8Block* act,
              int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i isum[NT][H];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      __m256i sum16[NT][H];
      for (int t = 0; t < NT; ++t)
        for (int h = 0; h < H; ++h) sum16[t][h] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < H; ++h) {
          const __m256i raw =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[j][c] + 32 * (half + h)));
          const __m256i lo = _mm256_and_si256(raw, low_nibble);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble);
          for (int t = 0; t < NT; ++t) {
            const int8_t* q = a[t].qs + 8 * c;
            sum16[t][h] = _mm256_add_epi16(sum16[t][h], _mm256_maddubs_epi16(lo, broadcast_i32(q)));
            sum16[t][h] =
                _mm256_add_epi16(sum16[t][h], _mm256_maddubs_epi16(hi, broadcast_i32(q + 4)));
            pin(sum16[t][h]);
          }
        }
      }
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[j] + r));
        const __m256i scale16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s, s));  // [s, s] a row
        const __m256 min = _mm256_mul_ps(load_fp16x8(w[b].dmin + r), load_u8x8(w[b].mins[j] + r));
        for (int t = 0; t < NT; ++t) {
          isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(sum16[t][h], scale16));
          acc[t][h] = _mm256_fnmadd_ps(min, _mm256_set1_ps(a[t].d_sum), acc[t][h]);
        }
      }
    }
    add_super_block<NT, H>(isum, w[b].d, half, act + b * kSubBlocks * act_stride, acc);
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// Q5_K: q4k_tile with each nibble's fifth bit from qh (bits 2c and 2c + 1 of the byte at the
// nibble byte's position). A maddubs of q (<= 31) and an int8 reaches 7874, so the pair of
// each c is widened at once, by a madd with the sub-block's scale as in q4k_tile (a row's sum
// stays under 2^27 over the super-block).
template <int NT, int H>
void q5k_tile(const PackedQ5KBlock* w, int64_t blocks, int half, const ActQ8Block* act,
              int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i isum[NT][H];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[j] + r));
        const __m256i scale16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s, s));  // [s, s] a row
        const __m256i high =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].sub[j].qh + 32 * (half + h)));
        for (int c = 0; c < 4; ++c) {
          const __m256i raw = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(w[b].sub[j].qs[c] + 32 * (half + h)));
          __m256i lo = _mm256_and_si256(raw, low_nibble);
          __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble);
          add_fifth_bits(high, c, lo, hi);
          for (int t = 0; t < NT; ++t) {
            const int8_t* q = a[t].qs + 8 * c;
            const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast_i32(q)),
                                                  _mm256_maddubs_epi16(hi, broadcast_i32(q + 4)));
            isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pair, scale16));
          }
        }
        const __m256 min = _mm256_mul_ps(load_fp16x8(w[b].dmin + r), load_u8x8(w[b].mins[j] + r));
        for (int t = 0; t < NT; ++t)
          acc[t][h] = _mm256_fnmadd_ps(min, _mm256_set1_ps(a[t].d_sum), acc[t][h]);
      }
    }
    add_super_block<NT, H>(isum, w[b].d, half, act + b * kSubBlocks * act_stride, acc);
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// 8 int8 bytes (one per row) as 8 floats.
inline __m256 load_i8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Q6_K: 6-bit q = ql nibble | 2 bits of qh << 4, w = d * scale * (q - 32) with an int8 scale
// per 16 columns. Everything up to d stays in integers for the whole super-block: two maddubs
// of q (<= 63) and an int8 sum to at most 2 * 2 * 63 * 127 = 32004, inside int16; a madd with
// the sub-block's scale (both int16 of a row's pair hold it) widens and scales them at once;
// the -32 offset is one madd of the row's two scales times -32 (|.| <= 4096, an int16) with
// the activation's two half sums. A row's sum over 256 columns stays under 2^28, so d and the
// activation's scale (one per super-block, Q8_K) multiply once per super-block, not once per
// sub-block (Q6_K tile, 512 tokens: 63 -> 76 GMAC/s on the AMD EPYC, inferd_kernels_bench).
template <int NT, int H>
void q6k_tile(const PackedQ6KBlock* w, int64_t blocks, int half, const ActQ8Block* act,
              int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i top_bits = _mm256_set1_epi8(0x30);
  const __m256i minus_32 = _mm256_set1_epi16(-32);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i isum[NT][H];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m128i s0 =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[2 * j] + r));
        const __m128i s1 =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[2 * j + 1] + r));
        // Per row: [scale, scale] for each 16-column half, and -32 [scale0, scale1] for the
        // offset.
        const __m256i scale16[2] = {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s0)),
                                    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s1, s1))};
        const __m256i offset_scales =
            _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1)), minus_32);
        for (int t = 0; t < NT; ++t) {
          const __m256i half_sums = _mm256_set1_epi32(a[t].half_sum_pair());
          isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(offset_scales, half_sums));
        }
        for (int p = 0; p < 2; ++p) {
          const __m256i high =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].sub[j].qh[p] + 4 * r));
          for (int e = 0; e < 2; ++e) {
            const int c = 2 * p + e;
            const __m256i raw =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].sub[j].ql[c] + 4 * r));
            // The top bits of ql's low nibble (bits 4e, 4e + 1 of high) and of its high nibble
            // (bits 4e + 2, 4e + 3), each moved to bits 4 and 5.
            const __m256i lo_top = e == 0 ? _mm256_slli_epi16(high, 4) : high;
            const __m256i hi_top = e == 0 ? _mm256_slli_epi16(high, 2) : _mm256_srli_epi16(high, 2);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, low_nibble),
                                               _mm256_and_si256(lo_top, top_bits));
            const __m256i hi =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble),
                                _mm256_and_si256(hi_top, top_bits));
            for (int t = 0; t < NT; ++t) {
              const int8_t* q = a[t].qs + 8 * c;
              const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast_i32(q)),
                                                    _mm256_maddubs_epi16(hi, broadcast_i32(q + 4)));
              isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pair, scale16[p]));
              pin(isum[t][h]);
            }
          }
        }
      }
    }
    add_super_block<NT, H>(isum, w[b].d, half, act + b * kSubBlocks * act_stride, acc);
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// Shifts each 16-bit lane left by `bits` (right for a negative count).
template <int bits>
inline __m256i shift_bits(__m256i v) {
  if constexpr (bits > 0) return _mm256_slli_epi16(v, bits);
  if constexpr (bits < 0) return _mm256_srli_epi16(v, -bits);
  return v;
}

// Q3_K's v = q + 4 (in [0, 7]) of 4-column group g of a sub-block's 32 columns: its low 2 bits
// from field g % 4 of ql, its third from bit g of qh (PackedQ3KBlock).
template <int g>
inline __m256i q3k_values(__m256i ql, __m256i qh) {
  return _mm256_add_epi8(_mm256_and_si256(shift_bits<-2 * (g % 4)>(ql), _mm256_set1_epi8(3)),
                         _mm256_and_si256(shift_bits<2 - g>(qh), _mm256_set1_epi8(4)));
}

// Columns 16p .. 16p + 15 of a Q3_K sub-block, rows 8 (half + h) .., for NT tokens: two pairs
// of maddubs (v <= 7: a pair sums to at most 3556) widen and scale in a madd with the rows'
// scale16 ([scale, scale] a row).
template <int NT, int H, int p>
inline void q3k_half(const PackedQ3KBlock::SubBlock& sub, int r, __m256i qh, __m256i scale16,
                     const ActQ8Block* a, __m256i (&isum)[NT][H], int h) {
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sub.ql[p] + 4 * r));
  const __m256i v[4] = {q3k_values<4 * p>(ql, qh), q3k_values<4 * p + 1>(ql, qh),
                        q3k_values<4 * p + 2>(ql, qh), q3k_values<4 * p + 3>(ql, qh)};
  for (int e = 0; e < 2; ++e) {
    for (int t = 0; t < NT; ++t) {
      const int8_t* q = a[t].qs + 16 * p + 8 * e;
      const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(v[2 * e], broadcast_i32(q)),
                                            _mm256_maddubs_epi16(v[2 * e + 1], broadcast_i32(q + 4)));
      isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pair, scale16));
      pin(isum[t][h]);
    }
  }
}

// Q3_K: Q6_K's integer scheme with v = q + 4 in place of Q6_K's q: everything up to d in
// integers over the super-block, the -4 offset one madd of the rows' two scales times -4 with
// the activation's two half sums.
template <int NT, int H>
void q3k_tile(const PackedQ3KBlock* w, int64_t blocks, int half, const ActQ8Block* act,
              int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i minus_4 = _mm256_set1_epi16(-4);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i isum[NT][H];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m128i s0 =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[2 * j] + r));
        const __m128i s1 =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[b].scales[2 * j + 1] + r));
        const __m256i offset_scales =
            _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1)), minus_4);
        for (int t = 0; t < NT; ++t) {
          const __m256i half_sums = _mm256_set1_epi32(a[t].half_sum_pair());
          isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(offset_scales, half_sums));
        }
        const __m256i qh =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].sub[j].qh + 4 * r));
        q3k_half<NT, H, 0>(w[b].sub[j], r, qh, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s0)), a,
                           isum, h);
        q3k_half<NT, H, 1>(w[b].sub[j], r, qh, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s1, s1)), a,
                           isum, h);
      }
    }
    add_super_block<NT, H>(isum, w[b].d, half, act + b * kSubBlocks * act_stride, acc);
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// Q2_K: q a 2-bit field (a shift and an and) through maddubs, a pair of them (<= 1524) widened
// and scaled by a madd with the 4-bit scale; the mins one madd a sub-block of the rows' two
// mins with the activation's two half sums. Both sums stay integers over the super-block; d
// and dmin (times the activation's scale) multiply them once.
template <int NT, int H>
void q2k_tile(const PackedQ2KBlock* w, int64_t blocks, int half, const ActQ8Block* act,
              int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i two_bits = _mm256_set1_epi8(3);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  // Byte 2k + p of a row pair's 4 scale bytes, twice: [scale_p, scale_p] a row once widened.
  const __m128i pick[2] = {_mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14),
                           _mm_setr_epi8(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15)};
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i isum[NT][H], min_sum[NT][H];
    for (int t = 0; t < NT; ++t) {
      for (int h = 0; h < H; ++h) {
        isum[t][h] = _mm256_setzero_si256();
        min_sum[t][h] = _mm256_setzero_si256();
      }
    }
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales[j][r]));
        const __m128i scales = _mm_and_si128(bytes, nibble);
        const __m256i scale16[2] = {_mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales, pick[0])),
                                    _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales, pick[1]))};
        const __m256i min_pair =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), nibble));
        for (int t = 0; t < NT; ++t) {
          const __m256i half_sums = _mm256_set1_epi32(a[t].half_sum_pair());
          min_sum[t][h] = _mm256_add_epi32(min_sum[t][h], _mm256_madd_epi16(min_pair, half_sums));
        }
        for (int p = 0; p < 2; ++p) {
          const __m256i ql =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[j][p] + 4 * r));
          for (int e = 0; e < 2; ++e) {
            const __m256i first = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * e), two_bits);
            const __m256i second = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * e + 2), two_bits);
            for (int t = 0; t < NT; ++t) {
              const int8_t* q = a[t].qs + 16 * p + 8 * e;
              const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(first, broadcast_i32(q)),
                                                    _mm256_maddubs_epi16(second, broadcast_i32(q + 4)));
              isum[t][h] = _mm256_add_epi32(isum[t][h], _mm256_madd_epi16(pair, scale16[p]));
              pin(isum[t][h]);
            }
          }
        }
      }
    }
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int h = 0; h < H; ++h) {
      const __m256 d = load_fp16x8(w[b].d + 8 * (half + h));
      const __m256 dmin = load_fp16x8(w[b].dmin + 8 * (half + h));
      for (int t = 0; t < NT; ++t) {
        const __m256 a_d = _mm256_set1_ps(a[t].d);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]), _mm256_mul_ps(d, a_d), acc[t][h]);
        acc[t][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_sum[t][h]), _mm256_mul_ps(dmin, a_d),
                                     acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// IQ4_XS: each nibble becomes its table value by a byte shuffle; the signed weights go through
// maddubs as |w| with the activation taking w's sign (|w| <= 127, so one maddubs stays inside
// int16 and is widened at once).
template <int NT, int H>
void iq4xs_tile(const PackedIQ4XSBlock* w, int64_t blocks, int half, const ActQ8Block* act,
                int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int j = 0; j < kSubBlocks; ++j) {
      prefetch_sub_block<H, NT>(half, w + b, j);
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      __m256i isum[NT][H];
      for (int t = 0; t < NT; ++t)
        for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < H; ++h) {
          const __m256i raw =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[j][c] + 32 * (half + h)));
          const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, low_nibble));
          const __m256i hi =
              _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble));
          const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);
          for (int t = 0; t < NT; ++t) {
            const int8_t* q = a[t].qs + 8 * c;
            const __m256i p0 = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(broadcast_i32(q), lo));
            const __m256i p1 =
                _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(broadcast_i32(q + 4), hi));
            isum[t][h] = _mm256_add_epi32(
                isum[t][h],
                _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
            pin(isum[t][h]);
          }
        }
      }
      for (int h = 0; h < H; ++h) {
        const int r = 8 * (half + h);
        const __m256 scale = _mm256_mul_ps(load_fp16x8(w[b].d + r), load_i8x8(w[b].scales[j] + r));
        for (int t = 0; t < NT; ++t) {
          acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]),
                                      _mm256_mul_ps(scale, _mm256_set1_ps(a[t].d)), acc[t][h]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// The E8M0 "half" scales of 8 rows, 2^(e - 128), as floats built from their bits: exponent
// field e - 1, or for e < 2 the subnormals 2^-128 and 2^-127 (0x00200000 << e).
inline __m256 e8m0_half_x8(const uint8_t* e) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
  const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
  const __m256i is_tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, is_tiny));
}

// MXFP4: IQ4_XS's byte shuffle and sign trick per 32 columns, with the E2M1 table. |w| <= 12, so
// a maddubs lane is at most 2 * 12 * 127 = 3048 and a block's 8 of them add up in int16
// (<= 24384) before one widening, as the Q4 tile does.
template <int NT, int H>
void mxfp4_tile(const PackedMXFP4Block* w, int64_t blocks, int half, const ActQ8Block* act,
                int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead<H, NT>(half, w + b, sizeof(PackedMXFP4Block));
    __m256i sums[NT][H];  // int16 pairs
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) sums[t][h] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < H; ++h) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[c] + 32 * (half + h)));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, low_nibble));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_nibble));
        const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = act[b * act_stride + t].qs + 8 * c;
          const __m256i p0 = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(broadcast_i32(q), lo));
          const __m256i p1 =
              _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(broadcast_i32(q + 4), hi));
          sums[t][h] = _mm256_add_epi16(sums[t][h], _mm256_add_epi16(p0, p1));
          pin(sums[t][h]);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m256 scale = e8m0_half_x8(w[b].e + 8 * (half + h));
      for (int t = 0; t < NT; ++t) {
        const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(sums[t][h], ones));
        const __m256 d = _mm256_mul_ps(scale, _mm256_set1_ps(act[b * act_stride + t].d));
        acc[t][h] = _mm256_fmadd_ps(isum, d, acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// Signed weights: maddubs takes |w| and the activation with w's sign; one maddubs can reach
// 2 * 127 * 127, so each is widened to int32 at once.
template <int NT, int H>
void q8_tile(const PackedQ8Block* w, int64_t blocks, int half, const ActQ8Block* act,
             int64_t act_stride, float* y, int64_t y_stride) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT][H];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) acc[t][h] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead<H, NT>(half, w + b, sizeof(PackedQ8Block));
    __m256i isum[NT][H];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < H; ++h) isum[t][h] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      for (int h = 0; h < H; ++h) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs[c] + 32 * (half + h)));
        const __m256i signed_w = _mm256_xor_si256(raw, _mm256_set1_epi8(-128));  // back to q
        const __m256i magnitude = _mm256_abs_epi8(signed_w);
        for (int t = 0; t < NT; ++t) {
          const __m256i q =
              _mm256_sign_epi8(broadcast_i32(act[b * act_stride + t].qs + 4 * c), signed_w);
          isum[t][h] = _mm256_add_epi32(
              isum[t][h], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, q), ones));
          pin(isum[t][h]);
        }
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m256 d = load_fp16x8(w[b].d + 8 * (half + h));
      for (int t = 0; t < NT; ++t) {
        const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(act[b * act_stride + t].d));
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][h]), scale, acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), acc[t][h]);
}

// F16: one converted load gives 8 rows' weights for one input column; each token adds it times
// that column's value. Two accumulators per token shorten the FMA chains; their number does
// not depend on the tile's token count, so a row's sum is added in the same order however many
// tokens share the step (greedy text must not change when speculation adds rows).
template <int NT, int H>
void f16_tile(const PackedF16Block* w, int64_t blocks, int half, const float* x, int64_t x_stride,
              float* y, int64_t y_stride) {
  constexpr int kAcc = 2;
  __m256 acc[NT][H][kAcc];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < kAcc; ++i) acc[t][h][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    // A tile of several tokens computes too long per block for the hardware prefetcher; the
    // pass that reads a group first asks for the weights 16 KiB ahead, into L2 (as the AVX-512
    // tile does, which says why). One token is left to the hardware prefetcher.
    if ((H == 2 && NT > 1) || (H == 1 && half == 0))
      prefetch_into_l2(w + b, sizeof(PackedF16Block));
    // Accumulator i takes columns k + i: a constant index in a short loop keeps acc in
    // registers (k % kAcc over all 32 columns left it on the stack, a load and store per FMA).
    for (int k = 0; k < kPackCols; k += kAcc) {
      for (int i = 0; i < kAcc; ++i) {
        for (int h = 0; h < H; ++h) {
          const __m256 wk = load_fp16x8(w[b].w[k + i] + 8 * (half + h));
          for (int t = 0; t < NT; ++t) {
            const __m256 xv = _mm256_broadcast_ss(x + t * x_stride + b * kPackCols + k + i);
            acc[t][h][i] = _mm256_fmadd_ps(wk, xv, acc[t][h][i]);
          }
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int h = 0; h < H; ++h) {
      __m256 sum = acc[t][h][0];
      if constexpr (kAcc == 2) sum = _mm256_add_ps(sum, acc[t][h][1]);
      _mm256_storeu_ps(y + t * y_stride + 8 * (half + h), sum);
    }
  }
}

// The driver's tiles go up to 8 tokens. One token takes all 16 rows in one pass (H = 2); more
// take the two halves in turn, in tiles of at most 4 tokens.
template <int NT, int kPassTokens = 4, typename Block, typename Act, typename Kernel>
void split_tile(const Block* w, int64_t blocks, const Act* act, int64_t act_stride, float* y,
                int64_t y_stride, Kernel kernel) {
  if constexpr (NT <= 2) {
    kernel.template operator()<NT, 2>(w, blocks, 0, act, act_stride, y, y_stride);
  } else {
    constexpr int kFirst = NT > kPassTokens ? kPassTokens : NT;
    for (int half = 0; half < 2; ++half) {
      kernel.template operator()<kFirst, 1>(w, blocks, half, act, act_stride, y, y_stride);
      if constexpr (NT > kPassTokens) {
        kernel.template operator()<NT - kPassTokens, 1>(
            w, blocks, half, tokens_on(act, kPassTokens, act_stride, act_blocks_of<Block>(blocks)),
            act_stride, y + kPassTokens * y_stride, y_stride);
      }
    }
  }
}

// Q4_0 and Q4_1 differ only in which activation sum their offset m multiplies.
template <float ActQ8Block::*offset_sum, typename Block = PackedQ4Block>
struct Q4Tiles {
  template <int NT>
  struct Tile {
    static void run(const Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    float* y, int64_t y_stride) {
      split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                     []<int N, int H>(auto... args) { q4_tile<N, H, offset_sum>(args...); });
    }
  };
};
template <int NT>
struct Q4KTile {
  static void run(const PackedQ4KBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { q4k_tile<N, H>(args...); });
  }
};
template <int NT>
struct Q5KTile {
  static void run(const PackedQ5KBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { q5k_tile<N, H>(args...); });
  }
};
template <int NT>
struct IQ4XSTile {
  static void run(const PackedIQ4XSBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { iq4xs_tile<N, H>(args...); });
  }
};
template <int NT>
struct MXFP4Tile {
  static void run(const PackedMXFP4Block* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { mxfp4_tile<N, H>(args...); });
  }
};
// Q6_K's unpacking (about 9 instructions a vector of weights) is shared by the tokens of a
// pass: 6 of them, tiles of up to 12, where the other formats take 4 and 8.
constexpr int kQ6KPassTokens = 6;
// Q3_K unpacks at about Q6_K's cost (5 instructions a vector of weights), so its passes take as
// many tokens.
constexpr int kQ3KPassTokens = kQ6KPassTokens;
template <int NT>
struct Q6KTile {
  static void run(const PackedQ6KBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT, kQ6KPassTokens>(w, blocks, act, act_stride, y, y_stride,
                                   []<int N, int H>(auto... args) { q6k_tile<N, H>(args...); });
  }
};
template <int NT>
struct Q3KTile {
  static void run(const PackedQ3KBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT, kQ3KPassTokens>(w, blocks, act, act_stride, y, y_stride,
                                   []<int N, int H>(auto... args) { q3k_tile<N, H>(args...); });
  }
};
template <int NT>
struct Q2KTile {
  static void run(const PackedQ2KBlock* w, int64_t blocks, const ActQ8Block* act,
                  int64_t act_stride, float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { q2k_tile<N, H>(args...); });
  }
};
template <int NT>
struct Q8Tile {
  static void run(const PackedQ8Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                  float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, act, act_stride, y, y_stride,
                   []<int N, int H>(auto... args) { q8_tile<N, H>(args...); });
  }
};

template <int NT>
struct F16Tile {
  static void run(const PackedF16Block* w, int64_t blocks, const float* x, int64_t x_stride,
                  float* y, int64_t y_stride) {
    split_tile<NT>(w, blocks, x, x_stride, y, y_stride,
                   []<int N, int H>(auto... args) { f16_tile<N, H>(args...); });
  }
};

// Fills an activation block from its 32 values q (8 per vector, in column order, each within
// int8), the scale the kernels multiply by (`d`) and the one q was computed with (`exact_d`).
inline void write_act_block(ActQ8Block& block, const __m256i (&q)[4], float d, float exact_d) {
  const int32_t sum0 = hsum_i32(_mm256_add_epi32(q[0], q[1]));  // columns 0..15
  const int32_t sum1 = hsum_i32(_mm256_add_epi32(q[2], q[3]));  // columns 16..31
  // The packs interleave 128-bit lanes; the permute restores column order.
  __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(block.qs), packed);
  const auto sum = static_cast<float>(sum0 + sum1);
  block.d = d;
  block.s = round_to_fp16(exact_d * sum);
  block.d_sum = d * sum;
  block.half_sum[0] = static_cast<int16_t>(sum0);
  block.half_sum[1] = static_cast<int16_t>(sum1);
  block.offset32[0] = -32 * sum0;
  block.offset32[1] = -32 * sum1;
  block.offset128 = -128 * (sum0 + sum1);
  block.unused = 0;
}

void quantize_act_q8(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t b = 0; b < n / kPackCols; ++b) {
    ActQ8Block& block = out[b * out_stride];
    const float* xb = x + b * kPackCols;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    const float d = hmax_ps(amax) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], inv), kNearest));
    write_act_block(block, q, round_to_fp16(d), d);
  }
}

// Q8_K rounding (kernels/ref/quant_k_ref.h) spread over the 8 blocks of each 256 values.
void quantize_act_q8k(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  constexpr int kVectors = kPackSuperCols / 8;
  for (int64_t sb = 0; sb < n / kPackSuperCols; ++sb) {
    const float* xs = x + sb * kPackSuperCols;
    ActQ8Block* blocks = out + sb * kSubBlocks * out_stride;
    __m256 amax_v = _mm256_setzero_ps();
    for (int i = 0; i < kVectors; ++i)
      amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign, _mm256_loadu_ps(xs + 8 * i)));
    const float amax = hmax_ps(amax_v);
    if (amax == 0) {
      for (int j = 0; j < kSubBlocks; ++j)
        std::memset(&blocks[j * out_stride], 0, sizeof(ActQ8Block));
      continue;
    }
    float max = amax;  // the first value of largest magnitude, with its sign
    const __m256 amax_b = _mm256_set1_ps(amax);
    for (int i = 0; i < kVectors; ++i) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xs + 8 * i)), amax_b, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xs[8 * i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max, d = 1.0f / iscale;
    const __m256 scale = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < kSubBlocks; ++j) {
      ActQ8Block& block = blocks[j * out_stride];
      const float* xb = xs + j * kPackCols;
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(
                                    _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), scale), kNearest)),
                                top);
      }
      write_act_block(block, q, d, d);
    }
  }
}

}  // namespace

PackedKernels packed_kernels() {
  PackedKernels k{
      quantize_act_q8, run_group_tiles<PackedQ4Block, Q4Tiles<&ActQ8Block::d_sum>::Tile>,
      run_group_tiles<PackedQ4Block, Q4Tiles<&ActQ8Block::s>::Tile>,
      run_group_tiles<PackedQ8Block, Q8Tile>, run_group_tiles<PackedF16Block, F16Tile, float>};
  k.quantize_act_k = quantize_act_q8k;
  k.q5_1 = run_group_tiles<PackedQ5_1Block, Q4Tiles<&ActQ8Block::s, PackedQ5_1Block>::Tile>;
  k.q4_k = run_group_tiles<PackedQ4KBlock, Q4KTile>;
  k.q5_k = run_group_tiles<PackedQ5KBlock, Q5KTile>;
  k.q6_k = run_group_tiles<PackedQ6KBlock, Q6KTile, ActQ8Block, 2 * kQ6KPassTokens>;
  k.q3_k = run_group_tiles<PackedQ3KBlock, Q3KTile, ActQ8Block, 2 * kQ3KPassTokens>;
  k.q2_k = run_group_tiles<PackedQ2KBlock, Q2KTile>;
  // Panels that hold whole tiles of both sizes (the Q6_K tiles' 12 tokens, the others' 8).
  k.act_panel_tokens = std::lcm(kMaxTileTokens, 2 * kQ6KPassTokens);
  k.iq4_xs = run_group_tiles<PackedIQ4XSBlock, IQ4XSTile>;
  k.mxfp4 = run_group_tiles<PackedMXFP4Block, MXFP4Tile>;
  return k;
}

}  // namespace inferd::kernels::avx2
