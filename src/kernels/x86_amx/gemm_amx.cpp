// Compiled with AMX-TILE, AMX-INT8 and AVX-512 flags (src/CMakeLists.txt). No inline function
// shared with other files is used here: the linker could keep this file's copy for every caller.
//
// A packed block is 32 columns with its own scale per weight row and per token, so each tile
// multiply covers one block (K = 32): the int32 result of 16 tokens x 16 rows is stored and
// scaled into float accumulators with AVX-512, in the same order of float operations as the
// VNNI kernels, so the two give the same bits.
#include "kernels/x86_amx/gemm_amx.h"

#include "kernels/x86_amx/tile_config.h"

#include <immintrin.h>

#include <array>
#include <utility>

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_ps(), which its own
// -Wmaybe-uninitialized then reports at every call site; the value is never read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace inferd::kernels::amx {
namespace {

constexpr int kTileTokens = 16;

// The kernels batches of fewer than kMinTokens tokens go to (set once by packed_kernels()).
PackedKernels g_few_tokens;

// GCC's tile intrinsics are asm statements that do not tell the compiler which memory they
// read or write. Tile loads here only read activations (never written while a kernel runs)
// and weight rows unpacked before a barrier; the result stores are our own asm naming the
// buffer they write (finish_multiply), so the float accumulators can stay in registers.
inline void memory_barrier() {
  asm volatile("" ::: "memory");
}

// Starts c = a x w for 16 tokens x 32 columns x 16 rows (activations signed, weights
// unsigned) in tile set `Set`; finish_multiply<Set> stores the int32 result. The next block's
// multiply is started before this one's result is stored, so the tile unit has work queued
// while the previous result is scaled. The intrinsics need literal tile numbers, hence the two
// branches.
using ResultTile = int32_t[kTileTokens * kPackRows];

template <int Set>
inline void start_multiply(const int8_t* a, int64_t a_stride_bytes, const uint8_t* w) {
  if constexpr (Set == 0) {
    _tile_loadd(1, a, a_stride_bytes);
    _tile_loadd(2, w, 64);
    _tile_zero(0);
    _tile_dpbsud(0, 1, 2);
  } else {
    _tile_loadd(4, a, a_stride_bytes);
    _tile_loadd(5, w, 64);
    _tile_zero(3);
    _tile_dpbsud(3, 4, 5);
  }
}

template <int Set>
inline void finish_multiply(ResultTile& c) {
  constexpr int64_t kStride = kPackRows * 4;
  if constexpr (Set == 0) {
    asm volatile("tilestored %%tmm0, (%1,%2,1)" : "=m"(c) : "r"(c), "r"(kStride));
  } else {
    asm volatile("tilestored %%tmm3, (%1,%2,1)" : "=m"(c) : "r"(c), "r"(kStride));
  }
}

inline __m512 load_fp16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Calls f(t) for t = 0..N-1 with t a compile-time constant. The accumulator arrays below are
// only indexed through it: GCC keeps an array in registers only if every index is a constant
// when it splits aggregates, which is before `#pragma GCC unroll` unrolls a loop (the pragma
// left the 16 accumulators on the stack, one load and store per update).
#define INFERD_INLINE __attribute__((always_inline))
template <int N, typename F>
inline INFERD_INLINE void for_each_token(F&& f) {
  [&]<int... T>(std::integer_sequence<int, T...>) INFERD_INLINE {
    (f(std::integral_constant<int, T>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// Asks for the cache lines of block b of the blocks at address `base`. A prefetch never faults,
// so the group after a matrix's last one may be asked for too; the address is an integer so
// that no pointer past the weights is formed.
template <typename Block>
inline INFERD_INLINE void prefetch_block(uintptr_t base, int64_t b) {
  const uintptr_t p = base + static_cast<uintptr_t>(b) * sizeof(Block);
  for (size_t offset = 0; offset < sizeof(Block); offset += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + offset), _MM_HINT_T0);
  if constexpr (sizeof(Block) % 64 != 0)
    _mm_prefetch(reinterpret_cast<const char*>(p + sizeof(Block) - 1), _MM_HINT_T0);
}

// Blocks of K unpacked (or pointed to) at a time: 32 blocks of 8 x 64 bytes are 16 KiB.
constexpr int64_t kChunkBlocks = 32;

// The 8 weight-tile rows of one block: Q4 nibbles split into bytes (qs[c] holds columns
// 8c..8c+3 in its low nibbles and 8c+4..8c+7 in its high ones, each row's four adjacent, which
// is the tile's layout once the halves are split); Q8 blocks are already in that layout.
struct Q4Format {
  using Block = PackedQ4Block;
  static const uint8_t* weight_rows(const Block& block, uint8_t* buffer) {
    const __m512i low_nibble = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_loadu_si512(block.qs[c]);
      _mm512_store_si512(buffer + 128 * c, _mm512_and_si512(raw, low_nibble));
      _mm512_store_si512(buffer + 128 * c + 64,
                         _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibble));
    }
    return buffer;
  }
};
struct Q8Format {
  using Block = PackedQ8Block;
  static const uint8_t* weight_rows(const Block& block, uint8_t*) { return block.qs[0]; }
};

// acc[t] += the scaled result of one block for token t, in the VNNI kernels' order of float
// operations: Q4 adds d * a.d * c + m * a.offset; Q8 (stored as q + 128) first takes
// 128 * sum(activation) off in integers.
template <float ActQ8Block::*offset_sum>
struct Q4Scale {
  template <int NT>
  INFERD_INLINE static void apply(const PackedQ4Block& w, const int32_t* c, const ActQ8Block* act,
                                  __m512 (&acc)[NT]) {
    const __m512 d = load_fp16x16(w.d);
    const __m512 m = load_fp16x16(w.m);
    for_each_token<NT>([&](int t) INFERD_INLINE {
      const ActQ8Block& a = act[t];
      const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c + kPackRows * t));
      acc[t] = _mm512_fmadd_ps(s, _mm512_mul_ps(d, _mm512_set1_ps(a.d)), acc[t]);
      acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.*offset_sum), acc[t]);
    });
  }
};
struct Q8Scale {
  template <int NT>
  INFERD_INLINE static void apply(const PackedQ8Block& w, const int32_t* c, const ActQ8Block* act,
                                  __m512 (&acc)[NT]) {
    const __m512 d = load_fp16x16(w.d);
    for_each_token<NT>([&](int t) INFERD_INLINE {
      const ActQ8Block& a = act[t];
      // The q + 128 storage's offset, ready in the block (a broadcast from memory).
      const __m512i s =
          _mm512_add_epi32(_mm512_load_si512(c + kPackRows * t), _mm512_set1_epi32(a.offset128));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(a.d)), acc[t]);
    });
  }
};

// NT tokens (the tile computes 16; rows past NT are ignored) x 16 rows over `count` blocks
// whose weight-tile rows are rows[0..count): accumulators stay in registers, and y holds the
// sums of the chunks before (first == false). `prefetch`, unless 0, is the address of `count`
// blocks to fetch meanwhile, one per block computed.
template <typename Format, typename Scale, int NT>
void token_tile(const typename Format::Block* w, const uint8_t* const* rows, int64_t count,
                const ActQ8Block* act, int64_t act_stride, bool first, float* y, int64_t y_stride,
                uintptr_t prefetch) {
  __m512 acc[NT];
  for_each_token<NT>([&](int t) INFERD_INLINE {
    acc[t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * y_stride);
  });
  // Block b of the tile's tokens: 16 ActQ8Blocks side by side (block-major activations).
  const auto tokens = [&](int64_t b) { return act + b * act_stride; };
  constexpr int64_t kTokenBytes = sizeof(ActQ8Block);
  alignas(64) ResultTile c[2];
  const auto scale = [&](int64_t b, const ResultTile& result) INFERD_INLINE {
    if (prefetch != 0) prefetch_block<typename Format::Block>(prefetch, b);
    Scale::apply(w[b], result, tokens(b), acc);
  };
  start_multiply<0>(tokens(0)->qs, kTokenBytes, rows[0]);
  for (int64_t b = 0; b < count; b += 2) {
    const bool odd = b + 1 < count;
    if (odd) start_multiply<1>(tokens(b + 1)->qs, kTokenBytes, rows[b + 1]);
    finish_multiply<0>(c[0]);
    scale(b, c[0]);
    if (b + 2 < count) start_multiply<0>(tokens(b + 2)->qs, kTokenBytes, rows[b + 2]);
    if (odd) {
      finish_multiply<1>(c[1]);
      scale(b + 1, c[1]);
    }
  }
  for_each_token<NT>([&](int t) INFERD_INLINE { _mm512_storeu_ps(y + t * y_stride, acc[t]); });
}

template <typename Format, typename Scale>
using TokenTileFn = void (*)(const typename Format::Block*, const uint8_t* const*, int64_t,
                             const ActQ8Block*, int64_t, bool, float*, int64_t, uintptr_t);

template <typename Format, typename Scale, int... NT>
constexpr auto make_token_tiles(std::integer_sequence<int, NT...>) {
  return std::array<TokenTileFn<Format, Scale>, sizeof...(NT)>{
      token_tile<Format, Scale, NT + 1>...};
}

// One 16-row group by all tokens: K in chunks whose weight-tile rows are made once and serve
// every 16-token tile.
template <typename Format, typename Scale>
void group_gemm(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                int64_t n_tokens, float* y, int64_t y_stride) {
  static constexpr auto tiles =
      make_token_tiles<Format, Scale>(std::make_integer_sequence<int, kTileTokens>{});
  use_tile_shapes(TileShapes::kInt8);
  using Block = typename Format::Block;
  const auto* w = reinterpret_cast<const Block*>(group);
  // The next group (the next 16 rows, usually this thread's next call) is fetched while this
  // one computes: with few tokens the compute is short and the weights would otherwise arrive
  // from memory only when the unpacking or tile loads ask for them.
  const uintptr_t next_group =
      reinterpret_cast<uintptr_t>(group) + static_cast<uintptr_t>(blocks) * sizeof(Block);
  alignas(64) uint8_t unpacked[kChunkBlocks][8 * 64];
  const uint8_t* rows[kChunkBlocks];
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t count = blocks - b0 < kChunkBlocks ? blocks - b0 : kChunkBlocks;
    for (int64_t i = 0; i < count; ++i) rows[i] = Format::weight_rows(w[b0 + i], unpacked[i]);
    memory_barrier();  // the unpacked rows are in memory before any tile load reads them
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const int64_t nt = n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens;
      tiles[nt - 1](w + b0, rows, count, act + b0 * act_stride + t0, act_stride, b0 == 0,
                    y + t0 * y_stride, y_stride,
                    t0 == 0 ? next_group + static_cast<uintptr_t>(b0) * sizeof(Block) : 0);
    }
  }
}

template <float ActQ8Block::*offset_sum>
void q4_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
              int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < kMinTokens) {
    const GroupGemmFn few = offset_sum == &ActQ8Block::s ? g_few_tokens.q4_1 : g_few_tokens.q4_0;
    few(group, blocks, act, act_stride, n_tokens, y, y_stride);
    return;
  }
  group_gemm<Q4Format, Q4Scale<offset_sum>>(group, blocks, act, act_stride, n_tokens, y, y_stride);
}

void q8_0_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < kMinTokens) {
    g_few_tokens.q8_0(group, blocks, act, act_stride, n_tokens, y, y_stride);
    return;
  }
  group_gemm<Q8Format, Q8Scale>(group, blocks, act, act_stride, n_tokens, y, y_stride);
}

}  // namespace

PackedKernels packed_kernels(const PackedKernels& few_tokens) {
  g_few_tokens = few_tokens;
  PackedKernels k = few_tokens;
  k.act_panel_tokens = 0;  // the tiles load 16 tokens of a block with one stride
  k.q4_0 = q4_group<&ActQ8Block::d_sum>;
  k.q4_1 = q4_group<&ActQ8Block::s>;
  k.q8_0 = q8_0_group;
  return k;
}

}  // namespace inferd::kernels::amx
