// Weights repacked once at load into 16-row interleaved blocks, and the int8 activation blocks
// they are multiplied with. One layout serves every ISA: a 512-bit register holds 16 rows x 4
// columns of int8, so one VNNI instruction does 64 multiply-adds for one token, and the scales
// of 16 rows load as one vector; AVX2 takes the same bytes as two halves of 8 rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "tensor/dtype.h"
#include "util/huge_pages.h"

namespace inferd::kernels {

constexpr int kPackRows = 16;  // rows interleaved in one packed group
constexpr int kPackCols = 32;  // columns per block (the GGUF block size)
// A group kernel may read the activations of up to this many token rows past the last one it
// was given (AMX loads 16 token rows at a time and ignores the extra results): activation
// buffers have that many rows of padding.
constexpr int kActPaddingTokens = 16;

// Int8 activations lie in panels of `panel` tokens: each panel [blocks][panel] (block-major
// within it, the tokens of one 32-column block side by side), panels one after another. With
// one panel wider than every token this is plain block-major (AMX loads 16 tokens of a block
// with one stride); with panels of a few tiles' tokens, the activations a tile reads lie in
// short runs close together, which the hardware prefetcher follows (kernels.h,
// act_panel_tokens). Panels hold at most kMaxActPanelTokens tokens; the last may be part empty.
constexpr int kMaxActPanelTokens = 24;
// The index of block b of token t in a buffer of `blocks` blocks a token.
constexpr int64_t act_block_index(int64_t t, int64_t b, int64_t panel, int64_t blocks) {
  return t / panel * panel * blocks + b * panel + t % panel;
}
// The activation blocks a token has for `blocks` packed blocks of type Block in a row.
template <typename Block>
constexpr int64_t act_blocks_of(int64_t blocks) {
  return blocks * (Block::kColumns / kPackCols);
}

// The bf16 route's activations (kernels.h) are tiled so that one tile multiply reads 1 KiB in
// one piece: tokens in tiles of kBf16TileTokens, each tile [cols / 32][16 tokens][32 values].
// Where value `col` of token t lies, in a matrix `cols` wide.
constexpr int kBf16TileTokens = 16;
constexpr int64_t bf16_tile_offset(int64_t t, int64_t col, int64_t cols) {
  return t / kBf16TileTokens * kBf16TileTokens * cols +
         (col / kPackCols * kBf16TileTokens + t % kBf16TileTokens) * kPackCols + col % kPackCols;
}

// 16 rows x 32 columns of 4-bit weights: w = d * q + m, q in [0, 15]. Q4_1 packs as is; Q4_0
// (w = d * (q - 8)) packs exactly as m = -8 d.
// qs[c] covers columns 8c .. 8c+7: byte j holds row j / 4; its low nibble is column 8c + j % 4,
// its high nibble column 8c + 4 + j % 4.
struct PackedQ4Block {
  static constexpr int64_t kColumns = kPackCols;  // columns a block covers
  uint16_t d[kPackRows];                          // fp16
  uint16_t m[kPackRows];                          // fp16
  uint8_t qs[4][64];
};
static_assert(sizeof(PackedQ4Block) == 320);

// 16 rows x 32 columns of int8 weights: w = d * q, stored as q + 128 so that VNNI (unsigned x
// signed) takes them as they are; kernels subtract 128 * sum(activation) as an integer, which
// keeps the sum exact. qs[c] covers columns 4c .. 4c+3: byte j holds row j / 4, column 4c + j % 4.
struct PackedQ8Block {
  static constexpr int64_t kColumns = kPackCols;  // columns a block covers
  uint16_t d[kPackRows];                          // fp16
  uint8_t qs[8][64];                              // q + 128
};
static_assert(sizeof(PackedQ8Block) == 544);  // not a multiple of 64: kernels load unaligned

// One activation block: x ~= d * q, plus the sum of q scaled two ways to fold a weight offset m.
// For the 32-wide layouts d is rounded to an fp16 value (q is computed with the unrounded d), as
// in llama.cpp's Q8_0 and Q8_1 activations, so both engines round alike. For the 256-wide
// layouts (uses_q8k_activations) the 8 blocks of a super-block share one float d, possibly
// negative, and their q are those of llama.cpp's Q8_K activations (kernels/ref/quant_k_ref.h):
// the k-quant formats are defined against that rounding. Q4_1 weights use `s`, rounded to fp16
// like Q8_1's; Q4_0 weights (m = -8 d) use the exact `d_sum`, which keeps their integer
// offset exact as llama.cpp's Q4_0 x Q8_0 kernel does.
struct ActQ8Block {
  float d;
  float s;      // fp16(d_unrounded * sum(q))
  float d_sum;  // d * sum(q), exact in float (an 11-bit mantissa times |sum| <= 4064)
  // sum(q) over columns 0..15 and 16..31 (Q6_K's sub-blocks are 16 wide); |each| <= 2032.
  int16_t half_sum[2];
  int32_t sum() const { return half_sum[0] + half_sum[1]; }
  // Both half sums as one 32-bit word (half_sum[0] in the low 16 bits), for int16 pair kernels.
  int32_t half_sum_pair() const {
    int32_t v;
    std::memcpy(&v, half_sum, sizeof(v));
    return v;
  }
  // What the int8 kernels start a sum at for weights stored with a bias, so that the tiles
  // broadcast it from memory: -32 * half_sum[p] (Q6_K, q in [0, 63] for q - 32) and
  // -128 * sum(q) (Q8_0 and IQ4_XS, stored as q + 128). Made from q by every quantizer.
  int32_t offset32[2];
  int32_t offset128;
  int32_t unused;  // pads the block to one cache line
  int8_t qs[kPackCols];
};
static_assert(sizeof(ActQ8Block) == 64);

// 16 rows x 32 columns of fp16 weights, column-major: w[k] holds column k of the 16 rows, so
// one 32-byte load converts to the 16 rows' weights for one input value. Multiplied with the
// float activations directly (no conversion of the input).
struct PackedF16Block {
  static constexpr int64_t kColumns = kPackCols;  // columns a block covers
  uint16_t w[kPackCols][kPackRows];
};
static_assert(sizeof(PackedF16Block) == 1024);

// 16 rows x 256 columns of Q4_K weights (one GGUF super-block per row): 8 sub-blocks of 32
// columns, each with a 6-bit scale and min per row, w = d * scale * q - dmin * min, q in
// [0, 15]. The nibbles of sub-block j are laid out as PackedQ4Block's qs, so the Q4 inner loop
// serves; scales and mins are unpacked to bytes [sub-block][row] so one load gives 16 rows'
// (2.8% more bytes than the GGUF blocks, which pack them in 12 bytes a row).
constexpr int kPackSuperCols = 256;
constexpr int kSubBlocks = kPackSuperCols / kPackCols;
struct PackedQ4KBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  uint16_t dmin[kPackRows];                            // fp16
  uint8_t scales[kSubBlocks][kPackRows];
  uint8_t mins[kSubBlocks][kPackRows];
  uint8_t qs[kSubBlocks][4][64];
};
static_assert(sizeof(PackedQ4KBlock) == 2368);  // 37 cache lines

// 16 rows x 256 columns of Q6_K weights: 16 sub-blocks of 16 columns with an int8 scale per
// row, w = d * scale * (q - 32), q in [0, 63]. Per 32 columns j: the low 4 bits of q in
// sub[j].ql, laid out as PackedQ4Block's qs; the top 2 bits in sub[j].qh[c / 2], in the byte
// at the same position as ql[c]'s, its low nibble for even c and high nibble for odd c; within
// the nibble, bits 0-1 belong to the value of ql's low nibble and bits 2-3 to its high one's.
// As dense as the GGUF blocks (6.5625 bits a weight). Each 32 columns' bytes lie together, so a
// kernel reads the block front to back: with all low bits first and all top bits after them,
// one token's tile read 9 GB/s from memory against 24-27 in this order (one thread, AMD EPYC
// Zen 4): the hardware prefetcher does not follow two interleaved runs in one block.
struct PackedQ6KBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  int8_t scales[2 * kSubBlocks][kPackRows];
  struct SubBlock {
    uint8_t ql[4][64];
    uint8_t qh[2][64];
  } sub[kSubBlocks];
};
static_assert(sizeof(PackedQ6KBlock) == 3360);

// 16 rows x 256 columns of Q3_K weights: 16 sub-blocks of 16 columns with a signed 6-bit scale
// per row (stored as an int8, its offset of 32 taken off), w = d * scale * q, q in [-4, 3].
// Stored as v = q + 4 in [0, 7]: its low 2 bits in sub[j].ql, its third bit in sub[j].qh.
// ql[p] covers columns 16p .. 16p + 15 of the 32 columns of sub-block j: byte i holds row i / 4,
// and its bits 2k, 2k + 1 belong to column 16p + 4k + i % 4. qh's byte i holds row i / 4 too,
// its bit g the third bit of column 4g + i % 4. So bits 2k of a ql vector, or bit g of qh, hold
// one VNNI operand (16 rows x 4 columns) each. 3.56 bits a weight against the GGUF blocks' 3.44
// (the scales unpacked to bytes); each 32 columns' bytes lie together (PackedQ6KBlock says why).
struct PackedQ3KBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  int8_t scales[2 * kSubBlocks][kPackRows];
  struct SubBlock {
    uint8_t ql[2][64];
    uint8_t qh[64];
  } sub[kSubBlocks];
};
static_assert(sizeof(PackedQ3KBlock) == 1824);  // not a multiple of 64: kernels load unaligned

// 16 rows x 256 columns of Q2_K weights: 16 sub-blocks of 16 columns with a 4-bit scale and a
// 4-bit min per row, w = d * scale * q - dmin * min, q in [0, 3]. q as PackedQ3KBlock's low 2
// bits (qs[j][p] for columns 16p .. 16p + 15 of sub-block j). The GGUF byte of each 16 columns
// (scale in its low nibble, min in its high) as it is, the two of a row's 32 columns side by
// side: scales[j][r][p] for half p of sub-block j, so that widened to int16 they are one 32-bit
// word a row, the pair of mins an int16 multiply-add takes with the activation's two half sums.
// As dense as the GGUF blocks (2.625 bits a weight).
struct PackedQ2KBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  uint16_t dmin[kPackRows];                            // fp16
  uint8_t scales[kSubBlocks][kPackRows][2];
  uint8_t qs[kSubBlocks][2][64];
};
static_assert(sizeof(PackedQ2KBlock) == 1344);  // 21 cache lines

// 16 rows x 256 columns of Q5_K weights: PackedQ4KBlock plus the fifth bit of each q in qh:
// sub[j].qh has a byte at each position of sub[j].qs[c]'s bytes; its bit 2c is the fifth bit of
// the value in that qs byte's low nibble, bit 2c + 1 of the one in its high nibble.
struct PackedQ5KBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  uint16_t dmin[kPackRows];                            // fp16
  uint8_t scales[kSubBlocks][kPackRows];
  uint8_t mins[kSubBlocks][kPackRows];
  struct SubBlock {  // together for the reason PackedQ6KBlock's are
    uint8_t qs[4][64];
    uint8_t qh[64];
  } sub[kSubBlocks];
};
static_assert(sizeof(PackedQ5KBlock) == 2880);  // 45 cache lines

// 16 rows x 256 columns of IQ4_XS weights: w = d * scale * kIq4Values[q] with a signed 6-bit
// scale per 32 columns (stored with its offset of 32 taken off), nibbles as PackedQ4Block's.
struct PackedIQ4XSBlock {
  static constexpr int64_t kColumns = kPackSuperCols;  // columns a block covers
  uint16_t d[kPackRows];                               // fp16
  int8_t scales[kSubBlocks][kPackRows];
  uint8_t qs[kSubBlocks][4][64];
};
static_assert(sizeof(PackedIQ4XSBlock) == 2208);

// 16 rows x 32 columns of Q5_1 weights: w = d * q + m, q in [0, 31]. The low four bits of q
// as PackedQ4Block's qs; the fifth bits in qh, a byte at each position of a qs[c] byte: its bit
// 2c belongs to the value in that byte's low nibble, bit 2c + 1 to the one in its high nibble
// (PackedQ5KBlock's qh for one sub-block). As dense as the GGUF blocks (6 bits a weight).
struct PackedQ5_1Block {
  static constexpr int64_t kColumns = kPackCols;  // columns a block covers
  uint16_t d[kPackRows];                          // fp16
  uint16_t m[kPackRows];                          // fp16
  uint8_t qs[4][64];
  uint8_t qh[64];
};
static_assert(sizeof(PackedQ5_1Block) == 384);

// 16 rows x 32 columns of MXFP4 weights: w = e8m0_to_fp32_half(e) * kMxfp4Values[q]. The rows'
// E8M0 bytes as they are (the kernels make 16 float scales from one 16-byte load); the nibbles
// as PackedQ4Block's qs, so the Q4 unpacking serves and a byte shuffle looks up the values.
// As dense as the GGUF blocks (4.25 bits a weight); 272 bytes, so kernels load unaligned.
struct PackedMXFP4Block {
  static constexpr int64_t kColumns = kPackCols;  // columns a block covers
  uint8_t e[kPackRows];                           // E8M0
  uint8_t qs[4][64];
};
static_assert(sizeof(PackedMXFP4Block) == 272);

// Which layout a packed matrix has: Q4_0 and Q4_1 share PackedQ4Block; Q8_0 also holds Q5_0
// and IQ4_NL weights, whose values are small integers times an fp16 d (exactly). MXFP4's
// power-of-two scales reach past fp16's range, so it has a layout of its own.
enum class PackedFormat {
  Q4_0,
  Q4_1,
  Q8_0,
  F16,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_XS,
  Q5_1,
  MXFP4,
  Q3_K,
  Q2_K
};

// The 256-wide layouts take activations rounded as Q8_K (one scale per 256 values, the
// PackedKernels' quantize_act_k); the others one scale per 32 (quantize_act).
constexpr bool uses_q8k_activations(PackedFormat format) {
  return format == PackedFormat::Q4_K || format == PackedFormat::Q5_K ||
         format == PackedFormat::Q6_K || format == PackedFormat::IQ4_XS ||
         format == PackedFormat::Q3_K || format == PackedFormat::Q2_K;
}

// A whole weight matrix in packed form: groups of 16 rows (the last padded with zero rows),
// each group `blocks_per_row` packed blocks in column order.
class PackedWeights {
 public:
  PackedFormat format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t groups() const { return groups_; }
  int64_t blocks_per_row() const { return blocks_per_row_; }
  size_t block_bytes() const {
    switch (format_) {
      case PackedFormat::Q8_0:
        return sizeof(PackedQ8Block);
      case PackedFormat::F16:
        return sizeof(PackedF16Block);
      case PackedFormat::Q4_K:
        return sizeof(PackedQ4KBlock);
      case PackedFormat::Q5_K:
        return sizeof(PackedQ5KBlock);
      case PackedFormat::Q6_K:
        return sizeof(PackedQ6KBlock);
      case PackedFormat::Q3_K:
        return sizeof(PackedQ3KBlock);
      case PackedFormat::Q2_K:
        return sizeof(PackedQ2KBlock);
      case PackedFormat::IQ4_XS:
        return sizeof(PackedIQ4XSBlock);
      case PackedFormat::Q5_1:
        return sizeof(PackedQ5_1Block);
      case PackedFormat::MXFP4:
        return sizeof(PackedMXFP4Block);
      default:
        return sizeof(PackedQ4Block);
    }
  }
  // The blocks of group g: [blocks_per_row] packed blocks.
  const uint8_t* group(int64_t g) const {
    return data_ + static_cast<size_t>(g * blocks_per_row_) * block_bytes();
  }

  // True when a matrix of this type and width is multiplied through the packed path.
  static bool supports(DType type, int64_t cols);
  // Columns one packed block covers: 256 for the k-quant layouts, 32 for the others (MXFP4
  // included).
  int64_t block_cols() const {
    switch (format_) {
      case PackedFormat::Q4_K:
      case PackedFormat::Q5_K:
      case PackedFormat::Q6_K:
      case PackedFormat::IQ4_XS:
      case PackedFormat::Q3_K:
      case PackedFormat::Q2_K:
        return kPackSuperCols;
      default:
        return kPackCols;
    }
  }
  // Whether the bf16 route (kernels.h) has kernels for this layout.
  bool has_bf16_route() const {
    return block_cols() == kPackSuperCols || format_ == PackedFormat::Q4_0 ||
           format_ == PackedFormat::Q4_1 || format_ == PackedFormat::Q8_0;
  }

  // Repacks rows x cols weights stored as GGUF rows of `type` (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1,
  // IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4 or F16), into
  // memory from `arena` when given (a model's matrices share one, in huge pages), which the
  // packed matrix keeps alive.
  static std::shared_ptr<const PackedWeights> pack(DType type, const uint8_t* data, int64_t rows,
                                                   int64_t cols, size_t row_bytes,
                                                   std::shared_ptr<HugePageArena> arena = nullptr);

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  PackedFormat format_ = PackedFormat::Q4_1;
  int64_t rows_ = 0, groups_ = 0, blocks_per_row_ = 0;
  uint8_t* data_ = nullptr;  // in owned_ or in arena_
  std::unique_ptr<uint8_t, FreeDeleter> owned_;
  std::shared_ptr<HugePageArena> arena_;
};

}  // namespace inferd::kernels
