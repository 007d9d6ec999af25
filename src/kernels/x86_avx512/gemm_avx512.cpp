// Compiled with AVX-512 flags (src/CMakeLists.txt). No inline function shared with other files
// is used here: the linker could keep this file's AVX-512 copy of it for every caller.
#include "kernels/x86_avx512/gemm_avx512.h"

#include "kernels/tile_driver.h"
#include "tensor/quant_blocks.h"

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_ps(), which its own
// -Wmaybe-uninitialized (or, where inlined deeper, -Wuninitialized) then reports at every call
// site; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace inferd::kernels::avx512 {
namespace {

inline float round_to_fp16(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

inline __m512i broadcast_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

inline __m512 load_fp16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Horizontal max / sum by halving (GCC 12's _mm512_reduce_* trip -Wmaybe-uninitialized).
inline float hmax(__m512 v) {
  __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

inline int32_t hsum(__m512i v) {
  __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// Groups of a matrix lie one after another, and a thread multiplies a run of them in order. A
// tile of several tokens computes long enough per block that the hardware prefetcher falls
// behind and each block's loads wait on memory, so such a tile prefetches (past the matrix's
// end this only touches addresses; prefetches never fault). How, the driver says by the entry
// it calls (tile_driver.h):
//  - kNextGroup (run: a group's first tile in a prompt): the same block of the next group, into
//    L1. Only the first tile does: every tile of a prompt fetching the next group into L1 again
//    evicted the lines it was working on, and the 1B-shaped Q6_K model's pp512 went from
//    207-222 to 226-256 tok/s without that (4 alternating pairs).
//  - kAhead (run_small_step: the first tile of a step of 2-16 tokens, a few sequences decoding
//    or one verifying drafts): 16 KiB further on, into L2. With the next group into L1 instead,
//    the 1B-shaped Q4_K_M model decoded 5 sequences at 78-88 tok/s, with this 155-162, and 8
//    at 104 against 170-190 (inferd bench --parallel, AMD EPYC Zen 4); SmolLM2 in F16 verified
//    5 rows a step in 11.6 ms against 20.4 with no prefetch. Into L1, a group or 4 KiB ahead,
//    did not help F16.
//  - kNone (run_cached: the group's later tiles find it in cache).
//  - kStream (run with one token, on Intel only: packed_kernels' argument): the block 1 KiB
//    further on, into L1. See the note below on one-token tiles.
enum class Prefetch { kNone, kNextGroup, kAhead, kStream };
constexpr size_t kPrefetchAheadBytes = 16384;
constexpr size_t kStreamPrefetchBytes = 1024;
template <Prefetch P, int NT, typename Block>
inline void prefetch_for(const Block* block, int64_t blocks) {
  if constexpr (P == Prefetch::kStream) {
    const char* ahead = reinterpret_cast<const char*>(block) + kStreamPrefetchBytes;
    for (size_t line = 0; line < sizeof(Block); line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
  } else if constexpr (NT > 1 && P == Prefetch::kNextGroup) {
    const char* next = reinterpret_cast<const char*>(block + blocks);
    for (size_t line = 0; line < sizeof(Block); line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
  } else if constexpr (NT > 1 && P == Prefetch::kAhead) {
    const char* ahead = reinterpret_cast<const char*>(block) + kPrefetchAheadBytes;
    for (size_t line = 0; line < sizeof(Block); line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
  }
}

// A prompt's tiles of 8 tokens each unpack every block of their group again; a kernel whose
// unpacking costs a good share of its instructions (Q6_K: about 40 of each 136 vector
// instructions per 32 columns of a tile) keeps the first tile's operands instead, and the
// later tiles of the same call load them (UnpackedOnceTiles, from kSmallStepTokens + 1 tokens).
// The operands are the same bits, so every result is too.
enum class Operands { kUnpack, kStore, kLoad };

// This thread's copy of a group's unpacked operands: `vectors` of them, grown as needed (a
// prompt's first group of a wider matrix pays one allocation; decode never comes here).
__m512i* unpacked_operands(size_t vectors) {
  struct alignas(64) Vector {
    uint8_t bytes[64];
  };
  thread_local std::vector<Vector> buffer;
  if (buffer.size() < vectors) buffer.resize(vectors);
  return reinterpret_cast<__m512i*>(buffer.data());
}

// A block's operands (16 rows x 256 columns, a VNNI operand of 4 columns each) in the copy.
constexpr int64_t kUnpackedVectors = kPackSuperCols / 4;

// Block b's part of the copy (none when the kernel only unpacks).
template <Operands O>
inline __m512i* block_copy(__m512i* unpacked, int64_t b) {
  if constexpr (O == Operands::kUnpack) return nullptr;
  return unpacked + b * kUnpackedVectors;
}

// Operand i of a block: `v` as unpacked (kUnpack), `v` kept in the block's copy (kStore), or
// the copy's (kLoad: `v` and the loads it was made from then go unused, and the compiler
// drops them).
template <Operands O>
inline __m512i operand(__m512i* copy, int i, __m512i v) {
  if constexpr (O == Operands::kLoad) return _mm512_load_si512(copy + i);
  if constexpr (O == Operands::kStore) _mm512_store_si512(copy + i, v);
  return v;
}

// One token (decode) reads each group once, straight from memory: every packed block is read
// front to back (packed.h). How far the hardware prefetcher alone gets differs by vendor:
//  - AMD: the one-token k-quant tiles used to prefetch 2 KiB ahead themselves, which Q6_K
//    needed while its high bits lay in a second run of the block; with the runs merged, a loop
//    of one-token tiles over 256 MiB read 28-29 GB/s a thread without those prefetches and
//    22-23 with them, as fast as a plain streaming read (AMD EPYC Zen 4, one thread, Q4_K,
//    Q5_K, Q6_K and IQ4_XS alike). So no prefetch there.
//  - Intel: prefetching each block's lines 1 KiB ahead into L1 (kStream) decoded faster:
//    the 8B-shaped Q4_K_M model 5.31-5.48 against 4.86-5.00 tok/s, the 1B-shaped Q4_K_M 30.1-31.5
//    against 27.3-27.5, Q6_K 23.2-23.8 against 20.8, Q8_0 21.4 against 19.8-20.3 (inferd bench,
//    2 threads, alternating runs; Intel Xeon with AMX, family 6 model 167, 2026-12-01). 512 B
//    to 2 KiB ahead measured alike, 4.5 KiB and more and into L2 no better than none.

// Adds the fifth bit of each 4-bit value: bits 2c and 2c + 1 of the `high` byte at the nibble
// byte's position belong to its low and high nibble's values (PackedQ5KBlock, PackedQ5_1Block).
inline void add_fifth_bits(__m512i high, int c, __m512i& lo, __m512i& hi) {
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  const __m512i bits = _mm512_srl_epi16(high, _mm_cvtsi32_si128(2 * c));
  lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(bits, 4), bit4));
  hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(bits, 3), bit4));
}

// NT tokens x 16 rows of PackedQ4Block (Q4_0, Q4_1) or PackedQ5_1Block, w = d * q + m. Few
// tokens (decode) use two integer accumulators per token so the chain of dependent VNNI
// instructions per block is half as long; many tokens already have NT independent chains and
// need the registers.
template <int NT, float ActQ8Block::*offset_sum, typename Block, Prefetch P = Prefetch::kNextGroup>
void q4_tile(const Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride, float* y,
             int64_t y_stride) {
  constexpr bool kFiveBits = std::is_same_v<Block, PackedQ5_1Block>;
  constexpr int kAcc = NT < 4 ? 2 : 1;
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i isum[NT][kAcc];
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < kAcc; ++i) isum[t][i] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_loadu_si512(w[b].qs[c]);
      __m512i lo = _mm512_and_si512(raw, low_nibble);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble);
      if constexpr (kFiveBits) add_fifth_bits(_mm512_loadu_si512(w[b].qh), c, lo, hi);
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = act[b * act_stride + t].qs + 8 * c;
        isum[t][0] = _mm512_dpbusd_epi32(isum[t][0], lo, broadcast_i32(q));
        isum[t][kAcc - 1] = _mm512_dpbusd_epi32(isum[t][kAcc - 1], hi, broadcast_i32(q + 4));
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    const __m512 m = load_fp16x16(w[b].m);
    for (int t = 0; t < NT; ++t) {
      const ActQ8Block& a = act[b * act_stride + t];
      __m512i s = isum[t][0];
      if constexpr (kAcc == 2) s = _mm512_add_epi32(s, isum[t][1]);
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(a.d)), acc[t]);
      acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.*offset_sum), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

inline __m512 load_u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Q4_K: q4_tile's VNNI loop per 32-column sub-block, with the sub-block's scale and min for
// the 16 rows made from their bytes once and shared by the tile's tokens.
template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void q4k_tile(const PackedQ4KBlock* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  constexpr int kAcc = NT < 4 ? 2 : 1;
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    const __m512 dmin = load_fp16x16(w[b].dmin);
    // The super-block's sub-blocks share each token's activation scale (Q8_K): their scaled
    // sums gather without it, and it multiplies once at the end (the mins fold through d x sum,
    // which holds it already).
    __m512 block_sum[NT];
    for (int t = 0; t < NT; ++t) block_sum[t] = _mm512_setzero_ps();
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      __m512i isum[NT][kAcc];
      for (int t = 0; t < NT; ++t)
        for (int i = 0; i < kAcc; ++i) isum[t][i] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i raw = _mm512_loadu_si512(w[b].qs[j][c]);
        const __m512i lo = operand<O>(copy, 8 * j + 2 * c, _mm512_and_si512(raw, low_nibble));
        const __m512i hi = operand<O>(copy, 8 * j + 2 * c + 1,
                                      _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble));
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = a[t].qs + 8 * c;
          isum[t][0] = _mm512_dpbusd_epi32(isum[t][0], lo, broadcast_i32(q));
          isum[t][kAcc - 1] = _mm512_dpbusd_epi32(isum[t][kAcc - 1], hi, broadcast_i32(q + 4));
        }
      }
      const __m512 scale = load_u8x16(w[b].scales[j]);
      const __m512 min = _mm512_mul_ps(dmin, load_u8x16(w[b].mins[j]));
      for (int t = 0; t < NT; ++t) {
        __m512i s = isum[t][0];
        if constexpr (kAcc == 2) s = _mm512_add_epi32(s, isum[t][1]);
        block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, block_sum[t]);
        acc[t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(a[t].d_sum), acc[t]);
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(block_sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t].d)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

inline __m512 load_i8x16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The top two bits of a Q6_K value moved to bits 4 and 5 and added to its low nibble. An add,
// not an or: GCC fuses and-then-or into vpternlogd, which on the AMD EPYC (Zen 4) issues to the
// pipe that VNNI and FMA share (one of them a cycle; adds, ands and broadcast loads go beside
// it, measured with a loop of each next to VNNI), so the unpacking took 4 of the 44 VNNI-pipe
// slots of 16 columns of a tile of 8 tokens.
inline __m512i six_bits(__m512i nibbles, __m512i top_moved) {
  return _mm512_add_epi8(_mm512_and_si512(nibbles, _mm512_set1_epi8(0x0F)),
                         _mm512_and_si512(top_moved, _mm512_set1_epi8(0x30)));
}

// Q6_K: q = ql nibble | 2 bits of qh << 4 as VNNI's unsigned operand; the two 16-wide
// sub-blocks of each 32 columns (c = 0, 1 and c = 2, 3) sum apart for their own scales, and
// the -32 offset comes off in integers: each sum starts at the activation's offset32. Made
// here from its half sum (a shift and a broadcast from a general register, which on Zen 4 takes
// most of a VNNI slot), the offset held the tile at 116 GMAC/s; read ready-made, with the add
// above, 138-140 (inferd_kernels_bench, 2048 x 2048, 512 tokens, one thread).
template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void q6k_tile(const PackedQ6KBlock* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    // The super-block's 16 sub-blocks share each token's activation scale (Q8_K), so their
    // scaled sums gather without it and it multiplies once at the end.
    __m512 block_sum[NT];
    for (int t = 0; t < NT; ++t) block_sum[t] = _mm512_setzero_ps();
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      for (int p = 0; p < 2; ++p) {  // columns 16p .. 16p + 15 of the sub-block
        __m512i isum[NT];
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_set1_epi32(a[t].offset32[p]);
        const __m512i high = _mm512_loadu_si512(w[b].sub[j].qh[p]);
        for (int e = 0; e < 2; ++e) {
          const int c = 2 * p + e;
          const __m512i raw = _mm512_loadu_si512(w[b].sub[j].ql[c]);
          const __m512i top = e == 0 ? high : _mm512_srli_epi16(high, 4);
          const int i = 8 * j + 2 * c;  // the operands' place in the block's copy
          const __m512i lo = operand<O>(copy, i, six_bits(raw, _mm512_slli_epi16(top, 4)));
          const __m512i hi = operand<O>(
              copy, i + 1, six_bits(_mm512_srli_epi16(raw, 4), _mm512_slli_epi16(top, 2)));
          for (int t = 0; t < NT; ++t) {
            const int8_t* q = a[t].qs + 8 * c;
            isum[t] = _mm512_dpbusd_epi32(isum[t], lo, broadcast_i32(q));
            isum[t] = _mm512_dpbusd_epi32(isum[t], hi, broadcast_i32(q + 4));
          }
        }
        const __m512 scale = load_i8x16(w[b].scales[2 * j + p]);
        for (int t = 0; t < NT; ++t) {
          block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scale, block_sum[t]);
        }
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(block_sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t].d)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Shifts each 16-bit lane left by `bits` (right for a negative count): the kernels below move
// a bit field to a fixed place with one shift whose direction depends on the field.
template <int bits>
inline __m512i shift_bits(__m512i v) {
  if constexpr (bits > 0) return _mm512_slli_epi16(v, bits);
  if constexpr (bits < 0) return _mm512_srli_epi16(v, -bits);
  return v;
}

// Q3_K: each VNNI operand is 8 v = 8 (q + 4), its low 2 bits from ql moved to bits 3-4 and its
// third from qh to bit 5 (a shift and an and each, then an add: packed.h's order of fields
// makes every move one shift). Times 8, the -4 offset per 16 columns is -32 x the activation's
// half sum: the ready-made offset32 the Q6_K tile starts its sums at; the 8 comes off with d.
// The operand of 4-column group g of the 32 columns (field g % 4 of ql[g / 4], bit g of qh).
template <int g>
inline __m512i q3k_operand(__m512i ql, __m512i qh) {
  return _mm512_add_epi8(
      _mm512_and_si512(shift_bits<3 - 2 * (g % 4)>(ql), _mm512_set1_epi8(0x18)),
      _mm512_and_si512(shift_bits<5 - g>(qh), _mm512_set1_epi8(0x20)));
}

// Columns 16p .. 16p + 15 of sub-block j of a Q3_K block for NT tokens, added to block_sum
// times the rows' scales; `copy` is the block's (block_copy).
template <int NT, int p, Operands O>
inline void q3k_half(const PackedQ3KBlock::SubBlock& sub, int j, __m512i qh, const int8_t* scales,
                     const ActQ8Block* a, __m512 (&block_sum)[NT], __m512i* copy) {
  __m512i isum[NT];
  for (int t = 0; t < NT; ++t) isum[t] = _mm512_set1_epi32(a[t].offset32[p]);
  const __m512i ql = _mm512_loadu_si512(sub.ql[p]);
  const int i = 8 * j + 4 * p;  // the operands' place in the block's copy
  const __m512i v8[4] = {operand<O>(copy, i, q3k_operand<4 * p>(ql, qh)),
                         operand<O>(copy, i + 1, q3k_operand<4 * p + 1>(ql, qh)),
                         operand<O>(copy, i + 2, q3k_operand<4 * p + 2>(ql, qh)),
                         operand<O>(copy, i + 3, q3k_operand<4 * p + 3>(ql, qh))};
  for (int i = 0; i < 4; ++i) {
    for (int t = 0; t < NT; ++t)
      isum[t] = _mm512_dpbusd_epi32(isum[t], v8[i], broadcast_i32(a[t].qs + 16 * p + 4 * i));
  }
  const __m512 scale = load_i8x16(scales);
  for (int t = 0; t < NT; ++t)
    block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scale, block_sum[t]);
}

template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void q3k_tile(const PackedQ3KBlock* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    __m512 block_sum[NT];
    for (int t = 0; t < NT; ++t) block_sum[t] = _mm512_setzero_ps();
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      const __m512i qh = _mm512_loadu_si512(w[b].sub[j].qh);
      q3k_half<NT, 0, O>(w[b].sub[j], j, qh, w[b].scales[2 * j], a, block_sum, copy);
      q3k_half<NT, 1, O>(w[b].sub[j], j, qh, w[b].scales[2 * j + 1], a, block_sum, copy);
    }
    const __m512 d = _mm512_mul_ps(load_fp16x16(w[b].d), _mm512_set1_ps(0.125f));  // exact
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(block_sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t].d)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q2_K: q is a 2-bit field as VNNI's unsigned operand (a shift and an and). A 16-column sum
// times its 4-bit scale gathers in floats (exact: under 2^21 a row over the super-block); the
// mins gather in integers, one int16 multiply-add a sub-block taking a row's two mins (the
// scale bytes widened to int16, packed.h) with the activation's two half sums.
template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void q2k_tile(const PackedQ2KBlock* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  const __m512i two_bits = _mm512_set1_epi8(0x03), nibble = _mm512_set1_epi32(0x0F);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    __m512 block_sum[NT];
    __m512i min_sum[NT];
    for (int t = 0; t < NT; ++t) {
      block_sum[t] = _mm512_setzero_ps();
      min_sum[t] = _mm512_setzero_si512();
    }
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      // A row's two scale bytes as int16s in one 32-bit lane: the mins are their high nibbles.
      const __m512i bytes16 = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].scales[j])));
      const __m512i min_pair = _mm512_srli_epi16(bytes16, 4);
      const __m512 scale[2] = {
          _mm512_cvtepi32_ps(_mm512_and_si512(bytes16, nibble)),
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(bytes16, 16), nibble))};
      for (int t = 0; t < NT; ++t)
        min_sum[t] = _mm512_dpwssd_epi32(min_sum[t], min_pair, _mm512_set1_epi32(a[t].half_sum_pair()));
      for (int p = 0; p < 2; ++p) {  // columns 16p .. 16p + 15 of the sub-block
        __m512i isum[NT];
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
        const __m512i raw = _mm512_loadu_si512(w[b].qs[j][p]);
        for (int i = 0; i < 4; ++i) {
          const __m512i q = operand<O>(copy, 8 * j + 4 * p + i,
                                       _mm512_and_si512(_mm512_srli_epi16(raw, 2 * i), two_bits));
          for (int t = 0; t < NT; ++t)
            isum[t] = _mm512_dpbusd_epi32(isum[t], q, broadcast_i32(a[t].qs + 16 * p + 4 * i));
        }
        for (int t = 0; t < NT; ++t)
          block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scale[p], block_sum[t]);
      }
    }
    const __m512 d = load_fp16x16(w[b].d), dmin = load_fp16x16(w[b].dmin);
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t) {
      const __m512 sum = _mm512_fmsub_ps(d, block_sum[t],
                                         _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_sum[t])));
      acc[t] = _mm512_fmadd_ps(sum, _mm512_set1_ps(a[t].d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Q5_K: q4k_tile with each nibble's fifth bit from qh (bits 2c and 2c + 1 of the byte at the
// nibble byte's position).
template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void q5k_tile(const PackedQ5KBlock* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  constexpr int kAcc = NT < 4 ? 2 : 1;
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    const __m512 dmin = load_fp16x16(w[b].dmin);
    // The super-block's sub-blocks share each token's activation scale (Q8_K): their scaled
    // sums gather without it, and it multiplies once at the end (the mins fold through d x sum,
    // which holds it already).
    __m512 block_sum[NT];
    for (int t = 0; t < NT; ++t) block_sum[t] = _mm512_setzero_ps();
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      const __m512i high = _mm512_loadu_si512(w[b].sub[j].qh);
      __m512i isum[NT][kAcc];
      for (int t = 0; t < NT; ++t)
        for (int i = 0; i < kAcc; ++i) isum[t][i] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i raw = _mm512_loadu_si512(w[b].sub[j].qs[c]);
        __m512i lo = _mm512_and_si512(raw, low_nibble);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble);
        add_fifth_bits(high, c, lo, hi);
        lo = operand<O>(copy, 8 * j + 2 * c, lo);
        hi = operand<O>(copy, 8 * j + 2 * c + 1, hi);
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = a[t].qs + 8 * c;
          isum[t][0] = _mm512_dpbusd_epi32(isum[t][0], lo, broadcast_i32(q));
          isum[t][kAcc - 1] = _mm512_dpbusd_epi32(isum[t][kAcc - 1], hi, broadcast_i32(q + 4));
        }
      }
      const __m512 scale = load_u8x16(w[b].scales[j]);
      const __m512 min = _mm512_mul_ps(dmin, load_u8x16(w[b].mins[j]));
      for (int t = 0; t < NT; ++t) {
        __m512i s = isum[t][0];
        if constexpr (kAcc == 2) s = _mm512_add_epi32(s, isum[t][1]);
        block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, block_sum[t]);
        acc[t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(a[t].d_sum), acc[t]);
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(block_sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t].d)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// IQ4_XS: each nibble becomes its table value + 128 by a byte shuffle (VNNI's unsigned
// operand); the offset comes off as 128 * sum(activation) per 32 columns, in integers.
template <int NT, Prefetch P = Prefetch::kNextGroup, Operands O = Operands::kUnpack>
void iq4xs_tile(const PackedIQ4XSBlock* w, int64_t blocks, const ActQ8Block* act,
                int64_t act_stride, float* y, int64_t y_stride, __m512i* unpacked = nullptr) {
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  // The 16 table entries in each 128-bit lane (the shuffle looks up within lanes).
  alignas(64) uint8_t shifted[64];
  for (int i = 0; i < 64; ++i) shifted[i] = static_cast<uint8_t>(kIq4Values[i % 16] + 128);
  const __m512i table = _mm512_load_si512(shifted);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i* copy = block_copy<O>(unpacked, b);
    // The super-block's sub-blocks share each token's activation scale (Q8_K): their scaled
    // sums gather without it, and it multiplies once at the end.
    __m512 block_sum[NT];
    for (int t = 0; t < NT; ++t) block_sum[t] = _mm512_setzero_ps();
    for (int j = 0; j < kSubBlocks; ++j) {
      const ActQ8Block* a = act + (b * kSubBlocks + j) * act_stride;
      __m512i isum[NT];
      for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i raw = _mm512_loadu_si512(w[b].qs[j][c]);
        const __m512i lo = operand<O>(
            copy, 8 * j + 2 * c, _mm512_shuffle_epi8(table, _mm512_and_si512(raw, low_nibble)));
        const __m512i hi = operand<O>(
            copy, 8 * j + 2 * c + 1,
            _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble)));
        for (int t = 0; t < NT; ++t) {
          const int8_t* q = a[t].qs + 8 * c;
          isum[t] = _mm512_dpbusd_epi32(isum[t], lo, broadcast_i32(q));
          isum[t] = _mm512_dpbusd_epi32(isum[t], hi, broadcast_i32(q + 4));
        }
      }
      const __m512 scale = load_i8x16(w[b].scales[j]);
      for (int t = 0; t < NT; ++t) {
        const __m512i s = _mm512_add_epi32(isum[t], _mm512_set1_epi32(a[t].offset128));
        block_sum[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, block_sum[t]);
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    const ActQ8Block* a = act + b * kSubBlocks * act_stride;
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(block_sum[t], _mm512_mul_ps(d, _mm512_set1_ps(a[t].d)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// The E8M0 "half" scales of 16 rows, 2^(e - 128), as floats built from their bits: exponent
// field e - 1, or for e < 2 the subnormals 2^-128 and 2^-127 (0x00200000 << e).
inline __m512 e8m0_half_x16(const uint8_t* e) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
  const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
  const __mmask16 is_tiny = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_tiny, normal, tiny));
}

// MXFP4: as IQ4_XS per 32 columns, the byte shuffle looking the nibbles up in the table of
// E2M1 values + 128 (VNNI's unsigned operand); each sum starts at the activation's offset128,
// which takes the bias off exactly. The block's sum is scaled by the row's E8M0 scale times d.
template <int NT, Prefetch P = Prefetch::kNextGroup>
void mxfp4_tile(const PackedMXFP4Block* w, int64_t blocks, const ActQ8Block* act,
                int64_t act_stride, float* y, int64_t y_stride) {
  constexpr int kAcc = NT < 4 ? 2 : 1;
  const __m512i low_nibble = _mm512_set1_epi8(0x0F);
  // The 16 table entries in each 128-bit lane (the shuffle looks up within lanes).
  alignas(64) uint8_t shifted[64];
  for (int i = 0; i < 64; ++i) shifted[i] = static_cast<uint8_t>(kMxfp4Values[i % 16] + 128);
  const __m512i table = _mm512_load_si512(shifted);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i isum[NT][kAcc];
    for (int t = 0; t < NT; ++t) {
      isum[t][0] = _mm512_set1_epi32(act[b * act_stride + t].offset128);
      if constexpr (kAcc == 2) isum[t][1] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_loadu_si512(w[b].qs[c]);
      const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, low_nibble));
      const __m512i hi =
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble));
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = act[b * act_stride + t].qs + 8 * c;
        isum[t][0] = _mm512_dpbusd_epi32(isum[t][0], lo, broadcast_i32(q));
        isum[t][kAcc - 1] = _mm512_dpbusd_epi32(isum[t][kAcc - 1], hi, broadcast_i32(q + 4));
      }
    }
    const __m512 scale = e8m0_half_x16(w[b].e);
    for (int t = 0; t < NT; ++t) {
      __m512i s = isum[t][0];
      if constexpr (kAcc == 2) s = _mm512_add_epi32(s, isum[t][1]);
      const __m512 d = _mm512_mul_ps(scale, _mm512_set1_ps(act[b * act_stride + t].d));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// Weights stored as q + 128 are VNNI's unsigned operand as they are; the offset comes off as
// 128 * sum(activation) per block, in integers.
template <int NT, Prefetch P = Prefetch::kNextGroup>
void q8_tile(const PackedQ8Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
             float* y, int64_t y_stride) {
  constexpr int kAcc = NT < 4 ? 2 : 1;
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    __m512i isum[NT][kAcc];
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < kAcc; ++i) isum[t][i] = _mm512_setzero_si512();
    for (int c0 = 0; c0 < 8; c0 += kAcc) {  // constant accumulator indices, as in f16_tile
      for (int i = 0; i < kAcc; ++i) {
        const int c = c0 + i;
        const __m512i raw = _mm512_loadu_si512(w[b].qs[c]);
        for (int t = 0; t < NT; ++t) {
          const __m512i q = broadcast_i32(act[b * act_stride + t].qs + 4 * c);
          isum[t][i] = _mm512_dpbusd_epi32(isum[t][i], raw, q);
        }
      }
    }
    const __m512 d = load_fp16x16(w[b].d);
    for (int t = 0; t < NT; ++t) {
      __m512i s = isum[t][0];
      if constexpr (kAcc == 2) s = _mm512_add_epi32(s, isum[t][1]);
      s = _mm512_add_epi32(s, _mm512_set1_epi32(act[b * act_stride + t].offset128));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                               _mm512_mul_ps(d, _mm512_set1_ps(act[b * act_stride + t].d)), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

// F16: one converted load gives 16 rows' weights for one input column; each token adds it
// times that column's value. Two accumulators per token shorten the FMA chains; their number
// does not depend on the tile's token count, so a row's sum is added in the same order however
// many tokens share the step (greedy text must not change when speculation adds rows). Its
// first tile streams ahead into L2 in prompts too (F16 prompts measured the same with it,
// 1B-shaped pp256), so it needs no run_small_step.
template <int NT, Prefetch P = Prefetch::kAhead>
void f16_tile(const PackedF16Block* w, int64_t blocks, const float* x, int64_t x_stride, float* y,
              int64_t y_stride) {
  constexpr int kAcc = 2;
  __m512 acc[NT][kAcc];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < kAcc; ++i) acc[t][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_for<P, NT>(w + b, blocks);
    // Accumulator i takes columns k + i: a constant index in a short loop keeps acc in
    // registers (k % kAcc over all 32 columns left it on the stack, a load and store per FMA).
    for (int k = 0; k < kPackCols; k += kAcc) {
      for (int i = 0; i < kAcc; ++i) {
        const __m512 wk = load_fp16x16(w[b].w[k + i]);
        for (int t = 0; t < NT; ++t) {
          const __m512 xv = _mm512_set1_ps(x[t * x_stride + b * kPackCols + k + i]);
          acc[t][i] = _mm512_fmadd_ps(wk, xv, acc[t][i]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m512 sum = acc[t][0];
    for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[t][i]);
    _mm512_storeu_ps(y + t * y_stride, sum);
  }
}

template <int NT>
struct F16Tile {
  static void run(const PackedF16Block* w, int64_t blocks, const float* x, int64_t x_stride,
                  float* y, int64_t y_stride) {
    f16_tile<NT>(w, blocks, x, x_stride, y, y_stride);
  }
  static void run_cached(const PackedF16Block* w, int64_t blocks, const float* x, int64_t x_stride,
                         float* y, int64_t y_stride) {
    f16_tile<NT, Prefetch::kNone>(w, blocks, x, x_stride, y, y_stride);
  }
};

// A tile kernel's three entries for run_group_tiles (Prefetch above says which does what);
// Kernel is a generic lambda's type, Kernel{}.operator()<NT, P> runs it.
// kStreamOneToken: a tile of one token streams its weights with kStream.
template <typename Block, typename Kernel, bool kStreamOneToken>
struct PrefetchTiles {
  template <int NT>
  struct Tile {
    static void run(const Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    float* y, int64_t y_stride) {
      constexpr Prefetch kRun =
          NT == 1 && kStreamOneToken ? Prefetch::kStream : Prefetch::kNextGroup;
      Kernel{}.template operator()<NT, kRun>(w, blocks, act, act_stride, y, y_stride);
    }
    static void run_cached(const Block* w, int64_t blocks, const ActQ8Block* act,
                           int64_t act_stride, float* y, int64_t y_stride) {
      Kernel{}.template operator()<NT, Prefetch::kNone>(w, blocks, act, act_stride, y, y_stride);
    }
    static void run_small_step(const Block* w, int64_t blocks, const ActQ8Block* act,
                               int64_t act_stride, float* y, int64_t y_stride) {
      Kernel{}.template operator()<NT, Prefetch::kAhead>(w, blocks, act, act_stride, y, y_stride);
    }
  };
};
// PrefetchTiles plus the two entries run_group_tiles calls in a prompt of more than
// kSmallStepTokens tokens: the first tile unpacks and keeps the operands (as `run` streams the
// weights), the later ones load them. Kernel{}.operator()<NT, P, O> runs it.
template <typename Block, typename Kernel, bool kStreamOneToken>
struct UnpackedOnceTiles {
  template <int NT>
  struct Tile : PrefetchTiles<Block, Kernel, kStreamOneToken>::template Tile<NT> {
    static void run_store(const Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                          float* y, int64_t y_stride) {
      Kernel{}.template operator()<NT, Prefetch::kNextGroup, Operands::kStore>(
          w, blocks, act, act_stride, y, y_stride,
          unpacked_operands(static_cast<size_t>(blocks * kUnpackedVectors)));
    }
    static void run_load(const Block* w, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                         float* y, int64_t y_stride) {
      Kernel{}.template operator()<NT, Prefetch::kNone, Operands::kLoad>(
          w, blocks, act, act_stride, y, y_stride,
          unpacked_operands(static_cast<size_t>(blocks * kUnpackedVectors)));
    }
  };
};

// The tile kernels, each as the generic lambda PrefetchTiles calls. Q4_0 and Q4_1 differ only
// in which activation sum their offset m multiplies.
template <float ActQ8Block::*offset_sum, typename Block = PackedQ4Block>
constexpr auto kQ4Kernel = []<int NT, Prefetch P>(auto... args) {
  q4_tile<NT, offset_sum, Block, P>(args...);
};
constexpr auto kQ4KKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  q4k_tile<NT, P, O>(args...);
};
constexpr auto kQ5KKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  q5k_tile<NT, P, O>(args...);
};
constexpr auto kQ6KKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  q6k_tile<NT, P, O>(args...);
};
constexpr auto kQ3KKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  q3k_tile<NT, P, O>(args...);
};
constexpr auto kQ2KKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  q2k_tile<NT, P, O>(args...);
};
constexpr auto kIQ4XSKernel = []<int NT, Prefetch P, Operands O = Operands::kUnpack>(auto... args) {
  iq4xs_tile<NT, P, O>(args...);
};
constexpr auto kMXFP4Kernel = []<int NT, Prefetch P>(auto... args) { mxfp4_tile<NT, P>(args...); };
constexpr auto kQ8Kernel = []<int NT, Prefetch P>(auto... args) { q8_tile<NT, P>(args...); };
// The tiles run_group_tiles takes for Block's kernel.
template <typename Block, const auto& kernel, bool kStreamOneToken>
using TilesOf = PrefetchTiles<Block, std::remove_cvref_t<decltype(kernel)>, kStreamOneToken>;
// The same with the operands unpacked once per prompt (the 256-column formats).
template <typename Block, const auto& kernel, bool kStreamOneToken>
using OnceTilesOf =
    UnpackedOnceTiles<Block, std::remove_cvref_t<decltype(kernel)>, kStreamOneToken>;

// Fills an activation block from its 32 values (columns 0..15 in q0, 16..31 in q1, each within
// int8), the scale the kernels multiply by (`d`) and the one q was computed with (`exact_d`).
inline void write_act_block(ActQ8Block& block, __m512i q0, __m512i q1, float d, float exact_d) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs + 16), _mm512_cvtsepi32_epi8(q1));
  const int32_t sum0 = hsum(q0), sum1 = hsum(q1);
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
  for (int64_t b = 0; b < n / kPackCols; ++b) {
    ActQ8Block& block = out[b * out_stride];
    const __m512 x0 = _mm512_loadu_ps(x + b * kPackCols);
    const __m512 x1 = _mm512_loadu_ps(x + b * kPackCols + 16);
    const __m512 amax = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
    const float d = hmax(amax) / 127.0f;
    const __m512 inv = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x0, inv), kNearest);
    const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x1, inv), kNearest);
    write_act_block(block, q0, q1, round_to_fp16(d), d);
  }
}

// Q8_K rounding (kernels/ref/quant_k_ref.h) spread over the 8 blocks of each 256 values.
void quantize_act_q8k(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  constexpr int kVectors = kPackSuperCols / 16;
  for (int64_t sb = 0; sb < n / kPackSuperCols; ++sb) {
    const float* xs = x + sb * kPackSuperCols;
    ActQ8Block* blocks = out + sb * kSubBlocks * out_stride;
    __m512 amax_v = _mm512_setzero_ps();
    for (int i = 0; i < kVectors; ++i)
      amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(_mm512_loadu_ps(xs + 16 * i)));
    const float amax = hmax(amax_v);
    if (amax == 0) {
      for (int j = 0; j < kSubBlocks; ++j)
        std::memset(&blocks[j * out_stride], 0, sizeof(ActQ8Block));
      continue;
    }
    float max = amax;  // the first value of largest magnitude, with its sign
    const __m512 amax_b = _mm512_set1_ps(amax);
    for (int i = 0; i < kVectors; ++i) {
      const __mmask16 hit =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xs + 16 * i)), amax_b, _CMP_EQ_OQ);
      if (hit != 0) {
        max = xs[16 * i + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max, d = 1.0f / iscale;
    const __m512 scale = _mm512_set1_ps(iscale);
    const __m512i top = _mm512_set1_epi32(127);
    for (int j = 0; j < kSubBlocks; ++j) {
      ActQ8Block& block = blocks[j * out_stride];
      const float* xb = xs + j * kPackCols;
      const __m512i q0 = _mm512_min_epi32(
          _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), scale), kNearest), top);
      const __m512i q1 = _mm512_min_epi32(
          _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), scale), kNearest), top);
      write_act_block(block, q0, q1, d, d);
    }
  }
}

// The table with one-token tiles that prefetch (kStream) or not.
template <bool kStream>
PackedKernels packed_kernels_with() {
  PackedKernels k{
      quantize_act_q8,
      run_group_tiles<PackedQ4Block, TilesOf<PackedQ4Block, kQ4Kernel<&ActQ8Block::d_sum>,
                                             kStream>::template Tile>,
      run_group_tiles<PackedQ4Block,
                      TilesOf<PackedQ4Block, kQ4Kernel<&ActQ8Block::s>, kStream>::template Tile>,
      run_group_tiles<PackedQ8Block, TilesOf<PackedQ8Block, kQ8Kernel, kStream>::template Tile>,
      run_group_tiles<PackedF16Block, F16Tile, float>};
  k.quantize_act_k = quantize_act_q8k;
  k.act_panel_tokens = kMaxTileTokens;  // every tile here takes up to kMaxTileTokens
  k.q5_1 = run_group_tiles<
      PackedQ5_1Block,
      TilesOf<PackedQ5_1Block, kQ4Kernel<&ActQ8Block::s, PackedQ5_1Block>, kStream>::template Tile>;
  k.q4_k = run_group_tiles<PackedQ4KBlock,
                           OnceTilesOf<PackedQ4KBlock, kQ4KKernel, kStream>::template Tile>;
  k.q5_k = run_group_tiles<PackedQ5KBlock,
                           OnceTilesOf<PackedQ5KBlock, kQ5KKernel, kStream>::template Tile>;
  k.q6_k = run_group_tiles<PackedQ6KBlock,
                           OnceTilesOf<PackedQ6KBlock, kQ6KKernel, kStream>::template Tile>;
  k.q3_k = run_group_tiles<PackedQ3KBlock,
                           OnceTilesOf<PackedQ3KBlock, kQ3KKernel, kStream>::template Tile>;
  k.q2_k = run_group_tiles<PackedQ2KBlock,
                           OnceTilesOf<PackedQ2KBlock, kQ2KKernel, kStream>::template Tile>;
  k.iq4_xs = run_group_tiles<PackedIQ4XSBlock,
                             OnceTilesOf<PackedIQ4XSBlock, kIQ4XSKernel, kStream>::template Tile>;
  k.mxfp4 = run_group_tiles<PackedMXFP4Block,
                            TilesOf<PackedMXFP4Block, kMXFP4Kernel, kStream>::template Tile>;
  return k;
}

}  // namespace

PackedKernels packed_kernels(bool stream_one_token) {
  return stream_one_token ? packed_kernels_with<true>() : packed_kernels_with<false>();
}

}  // namespace inferd::kernels::avx512
