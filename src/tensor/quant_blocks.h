// Block layouts of the quantized GGUF weight formats and of the int8 activation formats
// they are multiplied with. Byte-exact with the files (static_asserts below).
#pragma once

#include <bit>
#include <cstdint>

namespace inferd {

constexpr int kQK = 32;    // values per block of the 32-wide formats
constexpr int kQKK = 256;  // values per super-block of the k-quants

// Q4_0: x = d * (q - 8); q in [0, 15]; value j in the low nibble of qs[j], value j+16 in the high.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q; also the activation format paired with Q4_0 and Q8_0 weights.
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kQK];
};
// Q8_1: Q8_0 plus s = d * sum(q), the activation format paired with Q4_1 (it folds the min).
struct BlockQ8_1 {
  uint16_t d;  // fp16
  uint16_t s;  // fp16
  int8_t qs[kQK];
};

// Q5_0: x = d * (q - 16), q in [0, 31]: the low 4 bits as Q4_0's nibbles, bit j of qh is the
// fifth bit of value j.
struct BlockQ5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q5_1: x = d * q + m, q in [0, 31].
struct BlockQ5_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// IQ4_NL: x = d * kIq4Values[q], q a nibble laid out as Q4_0's.
struct BlockIQ4_NL {
  uint16_t d;  // fp16
  uint8_t qs[kQK / 2];
};
// The 16 levels of the IQ4 formats (a non-uniform grid).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,   38,  53,  69,  89,  113};

// MXFP4 (gpt-oss's expert weights): x = e8m0_to_fp32_half(e) * kMxfp4Values[q], q a nibble laid
// out as Q4_0's. The scale is a power of two (E8M0: a float's exponent byte alone).
struct BlockMXFP4 {
  uint8_t e;  // E8M0
  uint8_t qs[kQK / 2];
};
// The 16 E2M1 (fp4) values, doubled so that they are integers; the block scale is halved to match.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 127) / 2, the MXFP4 block scale that goes with the doubled values. As a float bit pattern:
// exponent field e - 1 for e >= 2; e = 0 and 1 give the subnormals 2^-128 and 2^-127 (mantissa
// bit 21 or 22), which a float holds exactly. e = 255 gives 2^127, not NaN, as ggml reads it.
constexpr float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// The k-quants: super-blocks of 256 values in sub-blocks of 16 or 32, each with its own
// scale (and min) quantized against the super-block's fp16 d (and dmin).
// Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high nibble = min;
// x = d * scale * q - dmin * min, q in [0, 3].
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
};
// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (packed in 12 bytes, offset 32);
// q = 2 low bits from qs, the third from hmask (set means no -4 offset); x = d * scale * q.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;  // fp16
};
// Q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes;
// x = d * scale * q - dmin * min, q in [0, 15].
struct BlockQ4_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// Q5_K: Q4_K with a fifth bit per value in qh; q in [0, 31].
struct BlockQ5_K {
  uint16_t d;     // fp16
  uint16_t dmin;  // fp16
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales; q = 4 low bits (ql) + 2 high bits (qh);
// x = d * scale * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;  // fp16
};
// IQ4_XS: 8 sub-blocks of 32, 6-bit scales (low 4 bits in scales_l, high 2 in scales_h) offset
// by 32; x = d * (scale - 32) * kIq4Values[q].
struct BlockIQ4_XS {
  uint16_t d;  // fp16
  uint16_t scales_h;
  uint8_t scales_l[kQKK / 64];
  uint8_t qs[kQKK / 2];
};
// The i-quants of 2, 3 and 1 bits (codebooks in tensor/iq_grids.h). Every 32 values take one
// scale, and each group of 8 (or 4) values is a codebook point. For 32 values ib:
// IQ2_XXS: qs[4 ib .. 4 ib + 4) as two little-endian words w0, w1: the 4 bytes of w0 index
// kIq2XxsGrid for the 4 groups of 8; bits 7l..7l+6 of w1 are group l's signs (iq_signs_of);
// bits 28..31 are s, and x = d * (2 s + 1) / 8 * point * sign.
struct BlockIQ2_XXS {
  uint16_t d;  // fp16
  uint16_t qs[kQKK / 8];
};
// IQ2_XS: qs[4 ib + l] is group l's 9-bit kIq2XsGrid index and 7 sign bits (above it);
// groups 0-1 take the low nibble s of scales[ib], 2-3 the high: x = d * (2 s + 1) / 8 * ...
struct BlockIQ2_XS {
  uint16_t d;  // fp16
  uint16_t qs[kQKK / 8];
  uint8_t scales[kQKK / 32];
};
// IQ2_S: group l of 32 values ib has the 10-bit kIq2SGrid index qs[4 ib + l] | (2-bit field l
// of qh[ib]) << 8 and its 8 sign bits in signs[4 ib + l] (qs's second half); scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;  // fp16
  uint8_t qs[kQKK / 8];
  uint8_t signs[kQKK / 8];
  uint8_t qh[kQKK / 32];
  uint8_t scales[kQKK / 32];
};
// IQ3_XXS: qs[8 ib + 2l], qs[8 ib + 2l + 1] index kIq3XxsGrid for the two halves (4 values each)
// of group l; the word at qs + 64 + 4 ib holds the groups' 7 sign bits and s in bits 28..31:
// x = d * (2 s + 1) / 4 * point * sign.
struct BlockIQ3_XXS {
  uint16_t d;  // fp16
  uint8_t qs[3 * kQKK / 8];
};
// IQ3_S: the 9-bit kIq3SGrid index of half h of group l: qs[8 ib + 2l + h] | (bit 2l + h of
// qh[ib]) << 8; signs[4 ib + l] the group's 8 sign bits; x = d * (2 s + 1) * point * sign,
// s the low (even ib) or high (odd ib) nibble of scales[ib / 2].
struct BlockIQ3_S {
  uint16_t d;  // fp16
  uint8_t qs[kQKK / 4];
  uint8_t qh[kQKK / 32];
  uint8_t signs[kQKK / 8];
  uint8_t scales[kQKK / 64];
};
// IQ1_S: group l's 11-bit kIq1SGrid index qs[4 ib + l] | (3-bit field l of qh[ib]) << 8; bits
// 12..14 of qh[ib] are s, bit 15 the shift's sign: x = d * (2 s + 1) * (point +- kIq1Delta).
struct BlockIQ1_S {
  uint16_t d;  // fp16
  uint8_t qs[kQKK / 8];
  uint16_t qh[kQKK / 32];
};
// IQ1_M: no separate d. Group l's index is qs[4 ib + l] | (low 3 bits of nibble l % 2 of
// qh[2 ib + l / 2]) << 8, that nibble's bit 3 the shift's sign. The scales are four 16-bit words
// w: groups 0-1 of ib take bits 6 (ib % 2) .. +2 of w[ib / 2], groups 2-3 the next 3 bits; the
// fp16 d is the top nibbles of w[0..3], w[0]'s lowest: x = d * (2 s + 1) * (point +- kIq1Delta).
struct BlockIQ1_M {
  uint8_t qs[kQKK / 8];
  uint8_t qh[kQKK / 16];
  uint8_t scales[kQKK / 32];
};
// Q8_K: the activation format of the k-quants; d is a float, bsums the sums of each 16 values
// (they fold the weights' mins without touching every value).
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

}  // namespace inferd
