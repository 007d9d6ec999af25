// Compiled with AMX-TILE, AMX-BF16 and AVX-512 (BF16) flags (src/CMakeLists.txt). No inline
// function shared with other files is used here.
//
// The bf16 route (the tokens of long prompts): a group's weights are dequantized once per call into
// the tile layout of bf16 pairs and multiplied by the bf16 activations of every token, 32 columns
// per TDPBF16PS, with float sums kept in the tile across the whole row: no per-block scaling,
// which is what bounds the int8 route. It costs a dequantization per group and call, so it pays
// only when many token tiles share it (prefill).
#include "kernels/x86_amx/gemm_amx_bf16.h"

#include "kernels/packed.h"
#include "kernels/x86_amx/tile_config.h"
#include "tensor/quant_blocks.h"

#include <immintrin.h>

#include <cstring>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace inferd::kernels::amx {
namespace {

constexpr int kTileTokens = kBf16TileTokens;
// The activations are tiled (packed.h, bf16_tile_offset): one block of one token tile is 16 x 32
// contiguous values.
constexpr int64_t kTileValues = kTileTokens * kPackCols;
// At most this many tiles of 32 columns dequantized at a time per group (24 KiB; two groups
// fill L1). A row is cut into equal chunks: every chunk ends with a wait for the tile unit to
// finish before the sums are stored, and a short last chunk would pay it for little work.
constexpr int64_t kChunkTiles = 24;
// One block's weights in the tile layout: 16 rows (pairs of columns 2i, 2i+1) x 16 weight rows
// x 2 bf16.
using WeightTile = uint16_t[kPackCols / 2][kPackRows * 2];

inline void memory_barrier() {
  asm volatile("" ::: "memory");
}

inline __m512 load_fp16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Lane l of the result is v[4 * q + l / 4]: the scale of the weight row of lane l when 16 lanes
// hold 4 rows x 4 adjacent columns (rows 4q..4q+3).
inline __m512 rows_of_quarter(__m512 v, int q) {
  const __m512i index = _mm512_add_epi32(
      _mm512_set1_epi32(4 * q), _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
  return _mm512_permutexvar_ps(index, v);
}

// Two float vectors of 4 rows x 4 adjacent columns each (rows 0-7 in lo, 8-15 in hi as bf16
// after the conversion) give two tile rows: columns {0,1} and {2,3} of every weight row.
inline void store_pair_rows(__m512 r0_3, __m512 r4_7, __m512 r8_11, __m512 r12_15, uint16_t* first,
                            uint16_t* second) {
  const __m512i rows0_7 = (__m512i)_mm512_cvtne2ps_pbh(r4_7, r0_3);
  const __m512i rows8_15 = (__m512i)_mm512_cvtne2ps_pbh(r12_15, r8_11);
  // As dwords: (row r, columns {0,1}) is dword 2r, (row r, columns {2,3}) dword 2r + 1.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  _mm512_store_si512(first, _mm512_permutex2var_epi32(rows0_7, even, rows8_15));
  _mm512_store_si512(second, _mm512_permutex2var_epi32(rows0_7, odd, rows8_15));
}

// The 16 rows' scales of one sub-block as floats: d times the rows' scale bytes, exact (an
// 11-bit mantissa times at most 8 bits).
inline __m512 scaled_u8(const __m512 d, const uint8_t* bytes) {
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)))));
}
inline __m512 scaled_i8(const __m512 d, const int8_t* bytes) {
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)))));
}

// Per-row scale and offset, spread for the 4 quarters of rows (rows_of_quarter).
struct RowScales {
  __m512 scale[4], offset[4];
  RowScales(__m512 s, __m512 m) {
    for (int q = 0; q < 4; ++q) {
      scale[q] = rows_of_quarter(s, q);
      offset[q] = rows_of_quarter(m, q);
    }
  }
};

// 16 bytes of a 64-byte qs vector holding rows 4q..4q+3 (4 bytes each), widened to 32 bits.
inline __m512i bytes_of_quarter(const uint8_t* qs, int q) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * q)));
}

// 32 columns laid out as PackedQ4Block's qs: w = scale * v + offset per row, with v the integer
// values values(c, q, low) gives for the nibbles of qs[c]'s quarter q (low: the low nibbles,
// columns 8c..8c+3; else the high ones, 8c+4..8c+7), and the rows' scales halves[c / 2] (the
// same for both halves but in Q6_K, whose 16 columns have a scale each).
template <typename Values>
inline void dequantize_nibbles(const RowScales (&halves)[2], WeightTile& out, Values&& values) {
  for (int c = 0; c < 4; ++c) {
    const RowScales& rows = halves[c / 2];
    __m512 lo[4], hi[4];
    for (int q = 0; q < 4; ++q) {
      lo[q] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(values(c, q, true)), rows.scale[q], rows.offset[q]);
      hi[q] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(values(c, q, false)), rows.scale[q], rows.offset[q]);
    }
    store_pair_rows(lo[0], lo[1], lo[2], lo[3], out[4 * c], out[4 * c + 1]);
    store_pair_rows(hi[0], hi[1], hi[2], hi[3], out[4 * c + 2], out[4 * c + 3]);
  }
}
template <typename Values>
inline void dequantize_nibbles(const RowScales& rows, WeightTile& out, Values&& values) {
  const RowScales halves[2] = {rows, rows};
  dequantize_nibbles(halves, out, values);
}

inline __m512i nibble(__m512i bytes, bool low) {
  return low ? _mm512_and_si512(bytes, _mm512_set1_epi32(15)) : _mm512_srli_epi32(bytes, 4);
}
inline auto plain_nibbles(const uint8_t (&qs)[4][64]) {
  return [&qs](int c, int q, bool low) { return nibble(bytes_of_quarter(qs[c], q), low); };
}

// 32 columns in 4-column groups of 2-bit fields (PackedQ3KBlock's ql): w = scale_p * v +
// offset_p per row, p = g / 4 the 16-column half, v = values(g, q) for group g's quarter q.
template <typename Values>
inline void dequantize_groups(const RowScales (&rows)[2], WeightTile& out, Values&& values) {
  for (int g = 0; g < 8; ++g) {
    const RowScales& r = rows[g / 4];
    __m512 w[4];
    for (int q = 0; q < 4; ++q)
      w[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(values(g, q)), r.scale[q], r.offset[q]);
    store_pair_rows(w[0], w[1], w[2], w[3], out[2 * g], out[2 * g + 1]);
  }
}
inline __m512i two_bits(__m512i bytes, int g) {
  return _mm512_and_si512(_mm512_srl_epi32(bytes, _mm_cvtsi32_si128(2 * (g % 4))),
                          _mm512_set1_epi32(3));
}

// The offset of formats without one: v * scale + (-0) is v * scale exactly, the sign of a zero
// product included (+0 would turn a -0 product into +0).
inline __m512 no_offset() {
  return _mm512_set1_ps(-0.0f);
}

// The dequantizers: 32 columns (sub-block j of the block) into the tile layout. Each computes
// the reference's value (ref/gemm_ref.cpp) with the same roundings: products of d and a scale
// are exact, and so is scale * v but for Q6_K's, rounded there by both.

// Q4 (Q4_0 as Q4_1 with m = -8 d): w = d * q + m.
void dequantize_q4(const PackedQ4Block& block, int, WeightTile& out) {
  dequantize_nibbles(RowScales(load_fp16x16(block.d), load_fp16x16(block.m)), out,
                     plain_nibbles(block.qs));
}

// Q8_0 stored as q + 128: w = d * (u - 128) = d * u - 128 d. qs[c] holds columns 4c..4c+3.
void dequantize_q8(const PackedQ8Block& block, int, WeightTile& out) {
  const __m512 d = load_fp16x16(block.d);
  const RowScales rows(d, _mm512_mul_ps(d, _mm512_set1_ps(-128.0f)));
  for (int c = 0; c < 8; ++c) {
    __m512 w[4];
    for (int q = 0; q < 4; ++q)
      w[q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(bytes_of_quarter(block.qs[c], q)), rows.scale[q],
                             rows.offset[q]);
    store_pair_rows(w[0], w[1], w[2], w[3], out[2 * c], out[2 * c + 1]);
  }
}

// Q4_K: w = (d * scale) * q - dmin * min.
void dequantize_q4k(const PackedQ4KBlock& block, int j, WeightTile& out) {
  const RowScales rows(scaled_u8(load_fp16x16(block.d), block.scales[j]),
                       -scaled_u8(load_fp16x16(block.dmin), block.mins[j]));
  dequantize_nibbles(rows, out, plain_nibbles(block.qs[j]));
}

// Q5_K: Q4_K with the fifth bit of each q, bit 2c (low nibble) or 2c + 1 of the qh byte.
void dequantize_q5k(const PackedQ5KBlock& block, int j, WeightTile& out) {
  const RowScales rows(scaled_u8(load_fp16x16(block.d), block.scales[j]),
                       -scaled_u8(load_fp16x16(block.dmin), block.mins[j]));
  const auto& sub = block.sub[j];
  dequantize_nibbles(rows, out, [&sub](int c, int q, bool low) {
    const __m512i fifth = _mm512_and_si512(
        _mm512_srl_epi32(bytes_of_quarter(sub.qh, q), _mm_cvtsi32_si128(2 * c + (low ? 0 : 1))),
        _mm512_set1_epi32(1));
    return _mm512_or_si512(nibble(bytes_of_quarter(sub.qs[c], q), low),
                           _mm512_slli_epi32(fifth, 4));
  });
}

// Q6_K: w = (d * scale) * (q - 32), the top two bits of q in the qh nibble at ql's byte
// (bits 0-1 for the low nibble's value, 2-3 for the high one's); the two 16-column halves have
// scales of their own.
void dequantize_q6k(const PackedQ6KBlock& block, int j, WeightTile& out) {
  const __m512 d = load_fp16x16(block.d), none = no_offset();
  const RowScales halves[2] = {RowScales(scaled_i8(d, block.scales[2 * j]), none),
                               RowScales(scaled_i8(d, block.scales[2 * j + 1]), none)};
  const auto& sub = block.sub[j];
  dequantize_nibbles(halves, out, [&sub](int c, int q, bool low) {
    const __m512i top = _mm512_srl_epi32(bytes_of_quarter(sub.qh[c / 2], q),
                                         _mm_cvtsi32_si128(4 * (c % 2) + (low ? 0 : 2)));
    const __m512i v =
        _mm512_or_si512(nibble(bytes_of_quarter(sub.ql[c], q), low),
                        _mm512_slli_epi32(_mm512_and_si512(top, _mm512_set1_epi32(3)), 4));
    return _mm512_sub_epi32(v, _mm512_set1_epi32(32));
  });
}

// IQ4_XS: w = (d * scale) * kIq4Values[q], looked up in 32-bit lanes.
void dequantize_iq4xs(const PackedIQ4XSBlock& block, int j, WeightTile& out) {
  const __m512i table =
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
  const RowScales rows(scaled_i8(load_fp16x16(block.d), block.scales[j]), no_offset());
  const auto& qs = block.qs[j];
  dequantize_nibbles(rows, out, [&qs, table](int c, int q, bool low) {
    return _mm512_permutexvar_epi32(nibble(bytes_of_quarter(qs[c], q), low), table);
  });
}

// Q3_K: w = (d * scale) * (v - 4), v's low 2 bits from ql and its third from qh (bit g).
void dequantize_q3k(const PackedQ3KBlock& block, int j, WeightTile& out) {
  const __m512 d = load_fp16x16(block.d), none = no_offset();
  const RowScales halves[2] = {RowScales(scaled_i8(d, block.scales[2 * j]), none),
                               RowScales(scaled_i8(d, block.scales[2 * j + 1]), none)};
  const auto& sub = block.sub[j];
  dequantize_groups(halves, out, [&sub](int g, int q) {
    const __m512i third = _mm512_and_si512(
        _mm512_srl_epi32(bytes_of_quarter(sub.qh, q), _mm_cvtsi32_si128(g)), _mm512_set1_epi32(1));
    const __m512i v = _mm512_or_si512(two_bits(bytes_of_quarter(sub.ql[g / 4], q), g),
                                      _mm512_slli_epi32(third, 2));
    return _mm512_sub_epi32(v, _mm512_set1_epi32(4));
  });
}

// Q2_K: w = (d * scale) * q - dmin * min, scale and min the nibbles of scales[j][r][p].
void dequantize_q2k(const PackedQ2KBlock& block, int j, WeightTile& out) {
  const __m512 d = load_fp16x16(block.d), dmin = load_fp16x16(block.dmin);
  // Row r's two bytes as one 16-bit lane: half 0's in bits 0-7, half 1's in bits 8-15.
  const __m512i pairs =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.scales[j])));
  const auto field = [&pairs](int shift) {
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srl_epi32(pairs, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(15)));
  };
  const RowScales halves[2] = {
      RowScales(_mm512_mul_ps(d, field(0)), -_mm512_mul_ps(dmin, field(4))),
      RowScales(_mm512_mul_ps(d, field(8)), -_mm512_mul_ps(dmin, field(12)))};
  const auto& qs = block.qs[j];
  dequantize_groups(halves, out,
                    [&qs](int g, int q) { return two_bits(bytes_of_quarter(qs[g / 4], q), g); });
}

// Where a token tile's 16 result rows are loaded from and stored to: a local buffer (in L1,
// rows 64 bytes apart), copied from and to the n real rows of y. A tile always moves 16 rows;
// staging every tile this way, not only partial ones, measured the same or a few percent faster
// for prompts of 128 tokens than tile stores straight into y, whose rows are a whole output row
// apart.
class ResultRows {
 public:
  ResultRows(float* y, int64_t y_stride, int n) : y_(y), y_stride_(y_stride), n_(n) {}
  float* base() { return local_; }
  static constexpr int64_t stride_bytes() { return sizeof(float) * kPackRows; }
  // Before a tile load of the sums so far.
  void stage_in() {
    for (int t = 0; t < n_; ++t) std::memcpy(local_ + t * kPackRows, y_ + t * y_stride_, 64);
    memory_barrier();
  }
  // After a tile store.
  void stage_out() {
    memory_barrier();
    for (int t = 0; t < n_; ++t) std::memcpy(y_ + t * y_stride_, local_ + t * kPackRows, 64);
  }

 private:
  float* y_;
  int64_t y_stride_;
  int n_;
  alignas(64) float local_[kTileTokens * kPackRows];
};

// Tile numbers (kBf16 shapes, tile_config.h): the sums of token tile `tt` and group `g` in
// tile 2 tt + g, activations of token tile tt in 4 + tt, weights of group g in 6 + g. Each
// activation tile serves both groups and each weight tile both token tiles: the activations
// come from L2 (a prompt's are larger than L1), and loading them once per multiply would
// leave the tile unit waiting on them.
template <int TT, int G>
constexpr int kSumTile = 2 * TT + G;
template <int TT>
constexpr int kActivationTile = 4 + TT;
template <int G>
constexpr int kWeightTile = 6 + G;

// GCC's tile intrinsics paste their tile argument into the instruction text, so they take
// literal numbers only; these take a template constant ("%c" prints it bare). Their memory
// effects are ordered by memory_barrier() where it matters, as for the intrinsics.
template <int T>
inline void tile_zero() {
  asm volatile("tilezero %%tmm%c0" ::"i"(T));
}
template <int T>
inline void tile_load(const void* base, int64_t stride) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T));
}
template <int T>
inline void tile_store(void* base, int64_t stride) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
}
template <int C, int A, int B>
inline void tile_dpbf16ps() {
  asm volatile("tdpbf16ps %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(B), "i"(A), "i"(C));
}

template <int TT, int G>
inline void load_sums(ResultRows& r, bool first) {
  if (first) {
    tile_zero<kSumTile<TT, G>>();
  } else {
    r.stage_in();
    tile_load<kSumTile<TT, G>>(r.base(), r.stride_bytes());
  }
}
template <int TT, int G>
inline void store_sums(ResultRows& r) {
  tile_store<kSumTile<TT, G>>(r.base(), r.stride_bytes());
  r.stage_out();
}
template <int TT, int NG>
inline void multiply_tokens(const uint16_t* x) {
  constexpr int64_t kRowBytes = kPackCols * sizeof(uint16_t);
  tile_load<kActivationTile<TT>>(x, kRowBytes);
  tile_dpbf16ps<kSumTile<TT, 0>, kActivationTile<TT>, kWeightTile<0>>();
  if constexpr (NG > 1) tile_dpbf16ps<kSumTile<TT, 1>, kActivationTile<TT>, kWeightTile<1>>();
}

// Asks for the cache lines of `bytes` at address p (an integer: it may lie past the weights,
// and a prefetch never faults).
inline void prefetch_bytes(uintptr_t p, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + offset), _MM_HINT_T1);
}

// NT (1 or 2) token tiles x NG (1 or 2) groups of 16 rows over `count` tiles of dequantized
// weights (w[g] for group g); x points at the first token's first column of the chunk. r[tt][g]
// holds the sums, which start at zero (first chunk) or at y. before_block(i) runs before tile
// i's loads, so that vector work it does overlaps the tile multiplies of tile i - 1.
template <int NT, int NG, typename BeforeBlock>
void multiply_chunk(const WeightTile* const* w, int64_t count, const uint16_t* x, int64_t x_stride,
                    bool first, ResultRows (&r)[2][2], BeforeBlock&& before_block) {
  const uint16_t* x1 = x + kTileTokens * x_stride;
  load_sums<0, 0>(r[0][0], first);
  if constexpr (NG > 1) load_sums<0, 1>(r[0][1], first);
  if constexpr (NT > 1) load_sums<1, 0>(r[1][0], first);
  if constexpr (NT > 1 && NG > 1) load_sums<1, 1>(r[1][1], first);
  for (int64_t i = 0; i < count; ++i) {
    before_block(i);
    tile_load<kWeightTile<0>>(w[0][i], 64);
    if constexpr (NG > 1) tile_load<kWeightTile<1>>(w[1][i], 64);
    multiply_tokens<0, NG>(x + i * kTileValues);
    if constexpr (NT > 1) multiply_tokens<1, NG>(x1 + i * kTileValues);
  }
  store_sums<0, 0>(r[0][0]);
  if constexpr (NG > 1) store_sums<0, 1>(r[0][1]);
  if constexpr (NT > 1) store_sums<1, 0>(r[1][0]);
  if constexpr (NT > 1 && NG > 1) store_sums<1, 1>(r[1][1]);
}

// A block of 32 columns is one tile of weights; a k-quant super-block of 256 is 8, dequantized
// one at a time (dequantize(block, j, tile) for its 32 columns j) so that the first token pair
// spreads the work evenly over its multiplies.
template <int NG, typename Block, void (*dequantize)(const Block&, int, WeightTile&)>
void groups_gemm_bf16(const uint8_t* group, int64_t blocks, const uint16_t* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr int64_t kTilesPerBlock = Block::kColumns / kPackCols;
  static_assert(kChunkTiles % kTilesPerBlock == 0);
  constexpr int64_t kChunkBlocks = kChunkTiles / kTilesPerBlock;
  use_tile_shapes(TileShapes::kBf16);
  const Block* w[NG];
  for (int g = 0; g < NG; ++g) w[g] = reinterpret_cast<const Block*>(group) + g * blocks;
  alignas(64) WeightTile tiles[NG][kChunkTiles];
  const WeightTile* chunk[NG];
  for (int g = 0; g < NG; ++g) chunk[g] = tiles[g];
  const int64_t n_chunks = (blocks + kChunkBlocks - 1) / kChunkBlocks;
  const int64_t chunk_blocks = (blocks + n_chunks - 1) / n_chunks;
  // Block b of the groups after this call's (usually the same thread's next call), fetched into
  // L2 while the tile unit works, so that their dequantization does not wait on memory: a
  // block's share of its lines at each of its tiles.
  const uintptr_t group_bytes = static_cast<uintptr_t>(blocks) * sizeof(Block);
  const uintptr_t next_groups = reinterpret_cast<uintptr_t>(group) + NG * group_bytes;
  constexpr size_t kFetchBytes = (sizeof(Block) + kTilesPerBlock - 1) / kTilesPerBlock;
  const auto fetch_next = [&](int64_t tile) {
    const uintptr_t offset = static_cast<uintptr_t>(tile) * kFetchBytes;
    for (int g = 0; g < NG; ++g)
      prefetch_bytes(next_groups + g * group_bytes + offset, kFetchBytes);
  };
  for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
    const int64_t count =
        (blocks - b0 < chunk_blocks ? blocks - b0 : chunk_blocks) * kTilesPerBlock;
    const int64_t tile0 = b0 * kTilesPerBlock;
    const auto dequantize_tile = [&](int64_t i) {
      for (int g = 0; g < NG; ++g)
        dequantize(w[g][b0 + i / kTilesPerBlock], static_cast<int>(i % kTilesPerBlock),
                   tiles[g][i]);
    };
    // The first token pair dequantizes the chunk as it goes: tile i + 1 while the tile unit
    // multiplies tile i (the tile unit and the vector units work side by side), and asks for
    // the next groups' blocks; the other pairs find the chunk's tiles made.
    const auto first_pair = [&](int64_t i) {
      if (i + 1 < count) dequantize_tile(i + 1);
      fetch_next(tile0 + i);
      memory_barrier();  // tile i + 1 is in memory before any tile load reads it
    };
    const auto later_pairs = [](int64_t) {};
    dequantize_tile(0);
    memory_barrier();
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 2 * kTileTokens) {
      const int64_t left = n_tokens - t0;
      const int n0 = static_cast<int>(left < 16 ? left : 16);
      const int n1 = static_cast<int>(left <= 16 ? 0 : left < 32 ? left - 16 : 16);
      float* y0 = y + t0 * y_stride;
      float* y1 = y + (t0 + 16) * y_stride;
      ResultRows r[2][2] = {{{y0, y_stride, n0}, {y0 + kPackRows, y_stride, n0}},
                            {{y1, y_stride, n1}, {y1 + kPackRows, y_stride, n1}}};
      const uint16_t* xt = x + t0 * x_stride + tile0 * kTileValues;
      const auto multiply = [&](const auto& before_tile) {
        if (left > kTileTokens) {
          multiply_chunk<2, NG>(chunk, count, xt, x_stride, b0 == 0, r, before_tile);
        } else {
          multiply_chunk<1, NG>(chunk, count, xt, x_stride, b0 == 0, r, before_tile);
        }
      };
      if (t0 == 0) {
        multiply(first_pair);
      } else {
        multiply(later_pairs);
      }
    }
  }
  memory_barrier();
}

template <typename Block, void (*dequantize)(const Block&, int, WeightTile&)>
void group_gemm_bf16(const uint8_t* group, int64_t n_groups, int64_t blocks, const uint16_t* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_groups == 2) {
    groups_gemm_bf16<2, Block, dequantize>(group, blocks, x, x_stride, n_tokens, y, y_stride);
  } else {
    groups_gemm_bf16<1, Block, dequantize>(group, blocks, x, x_stride, n_tokens, y, y_stride);
  }
}
}  // namespace

void set_bf16_group_kernels(PackedKernels& k) {
  k.q4_bf16 = group_gemm_bf16<PackedQ4Block, dequantize_q4>;
  k.q8_0_bf16 = group_gemm_bf16<PackedQ8Block, dequantize_q8>;
  k.q4_k_bf16 = group_gemm_bf16<PackedQ4KBlock, dequantize_q4k>;
  k.q5_k_bf16 = group_gemm_bf16<PackedQ5KBlock, dequantize_q5k>;
  k.q6_k_bf16 = group_gemm_bf16<PackedQ6KBlock, dequantize_q6k>;
  k.iq4_xs_bf16 = group_gemm_bf16<PackedIQ4XSBlock, dequantize_iq4xs>;
  k.q3_k_bf16 = group_gemm_bf16<PackedQ3KBlock, dequantize_q3k>;
  k.q2_k_bf16 = group_gemm_bf16<PackedQ2KBlock, dequantize_q2k>;
}

}  // namespace inferd::kernels::amx
