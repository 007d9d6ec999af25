#include "kernels/packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace inferd::kernels {
namespace {

// The 4-bit value of column `col` (0..31) of a GGUF Q4 block: low nibbles hold 0..15.
inline uint8_t q4_value(const uint8_t* qs, int col) {
  return col < 16 ? qs[col] & 0x0F : qs[col - 16] >> 4;
}

// A packed Q4 nibble array (PackedQ4Block) holds, for row r, the 4 bytes qs[c][4r .. 4r+3]: byte
// k has column 8c + k in its low nibble and column 8c + 4 + k in its high one. Where a row's
// columns lie in the nibbles of consecutive bytes, each such run of 4 bytes is one 32-bit word
// built from two loaded words (a byte at a time, packing ran at a third of this speed).
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t low_nibbles(uint32_t v) {
  return v & 0x0F0F0F0Fu;
}
inline uint32_t high_nibbles(uint32_t v) {
  return v >> 4 & 0x0F0F0F0Fu;
}
inline void store_row_word(uint8_t (&qs)[4][64], int c, int r, uint32_t v) {
  std::memcpy(&qs[c][r * 4], &v, sizeof(v));
}

// Row r's 32 values from the nibbles of 32 bytes, column i in byte i, its low nibble (shift 0:
// a Q4_K/Q5_K sub-block of even index) or its high one (shift 4: odd).
void interleave_nibble_run(uint8_t (&qs)[4][64], int r, const uint8_t* bytes, int shift) {
  for (int c = 0; c < 4; ++c) {
    const uint32_t first = load_u32(bytes + 8 * c), second = load_u32(bytes + 8 * c + 4);
    const uint32_t lo = shift == 0 ? low_nibbles(first) : high_nibbles(first);
    const uint32_t hi = shift == 0 ? low_nibbles(second) : high_nibbles(second);
    store_row_word(qs, c, r, lo | hi << 4);
  }
}

// Row r's word of fifth bits (PackedQ5KBlock's and PackedQ5_1Block's qh): byte k holds the
// fifth bits of columns 8c + k at bit 2c and 8c + 4 + k at bit 2c + 1, found as bit `bit` of
// byte i of `bytes` for column i (32 bytes).
uint32_t fifth_bit_word(const uint8_t* bytes, int bit) {
  uint32_t word = 0;
  for (int c = 0; c < 4; ++c) {
    word |= (load_u32(bytes + 8 * c) >> bit & 0x01010101u) << (2 * c);
    word |= (load_u32(bytes + 8 * c + 4) >> bit & 0x01010101u) << (2 * c + 1);
  }
  return word;
}

// Row r's 32 values from a GGUF Q4 block's 16 bytes (q4_value's order: columns 0..15 in the
// low nibbles, 16..31 in the high ones).
void interleave_q4_block(uint8_t (&qs)[4][64], int r, const uint8_t* gguf_qs) {
  for (int c = 0; c < 4; ++c) {
    const int at = 8 * (c % 2);
    const uint32_t first = load_u32(gguf_qs + at), second = load_u32(gguf_qs + at + 4);
    const uint32_t lo = c < 2 ? low_nibbles(first) : high_nibbles(first);
    const uint32_t hi = c < 2 ? low_nibbles(second) : high_nibbles(second);
    store_row_word(qs, c, r, lo | hi << 4);
  }
}

void pack_q4_block(DType type, const uint8_t* const rows[kPackRows], int64_t b,
                   PackedQ4Block& out) {
  for (int r = 0; r < kPackRows; ++r) {
    const uint8_t* qs = nullptr;
    if (rows[r] == nullptr) {  // padding row past the end of the matrix
      out.d[r] = out.m[r] = 0;
      continue;
    }
    if (type == DType::Q4_1) {
      const auto& blk = reinterpret_cast<const BlockQ4_1*>(rows[r])[b];
      out.d[r] = blk.d;
      out.m[r] = blk.m;
      qs = blk.qs;
    } else {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(rows[r])[b];
      out.d[r] = blk.d;
      // d * (q - 8) = d * q + (-8 d); scaling an fp16 by 8 is exact unless it overflows.
      out.m[r] = fp32_to_fp16(-8.0f * fp16_to_fp32(blk.d));
      qs = blk.qs;
    }
    interleave_q4_block(out.qs, r, qs);
  }
  // Padding rows: zero scales make them contribute nothing; their nibbles are zero too.
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] != nullptr) continue;
    for (int c = 0; c < 4; ++c) std::memset(&out.qs[c][r * 4], 0, 4);
  }
}

// Block b of a GGUF row whose values are d * q with small integers q: Q8_0 as is, Q5_0 as
// q - 16 (q in [0, 31]), IQ4_NL through its table. Returns d; q[32] in column order.
uint16_t int8_values(DType type, const uint8_t* row, int64_t b, int8_t q[kPackCols]) {
  switch (type) {
    case DType::Q5_0: {
      const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
      uint32_t high;
      std::memcpy(&high, blk.qh, sizeof(high));
      for (int j = 0; j < kPackCols; ++j) {
        const int fifth = static_cast<int>((high >> j) & 1) << 4;
        q[j] = static_cast<int8_t>((q4_value(blk.qs, j) | fifth) - 16);
      }
      return blk.d;
    }
    case DType::IQ4_NL: {
      const auto& blk = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
      for (int j = 0; j < kPackCols; ++j) q[j] = kIq4Values[q4_value(blk.qs, j)];
      return blk.d;
    }
    default: {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      std::memcpy(q, blk.qs, kPackCols);
      return blk.d;
    }
  }
}

void pack_q8_block(DType type, const uint8_t* const rows[kPackRows], int64_t b,
                   PackedQ8Block& out) {
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) {
      out.d[r] = 0;
      for (int c = 0; c < 8; ++c) std::memset(&out.qs[c][r * 4], 128, 4);  // q = 0
      continue;
    }
    int8_t q[kPackCols];
    out.d[r] = int8_values(type, rows[r], b, q);
    for (int c = 0; c < 8; ++c) {
      for (int k = 0; k < 4; ++k) out.qs[c][r * 4 + k] = static_cast<uint8_t>(q[4 * c + k] + 128);
    }
  }
}

// The 6-bit scale and min of sub-block j from a Q4_K/Q5_K super-block's 12 scale bytes: the
// first four pairs are the low 6 bits of bytes j and j + 4; the last four take their low 4
// bits from byte j + 4 and their top 2 bits from the spare top bits of bytes j - 4 and j.
void k_scale_min(const uint8_t s[12], int j, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The nibbles of sub-block j: Q5_K keeps them beside the sub-block's fifth bits.
uint8_t (&nibbles_of(PackedQ4KBlock& block, int j))[4][64] {
  return block.qs[j];
}
uint8_t (&nibbles_of(PackedQ5KBlock& block, int j))[4][64] {
  return block.sub[j].qs;
}

// The parts Q4_K and Q5_K share, for row r: d, dmin, the unpacked scales and mins, and the
// low 4 bits of q. In a GGUF block the 128 qs bytes are 4 chunks of 32: chunk c holds the
// values of sub-block 2c in its low nibbles and of sub-block 2c + 1 in its high nibbles.
template <typename GgufBlock, typename Packed>
void pack_k4_parts(const GgufBlock& blk, int r, Packed& out) {
  out.d[r] = blk.d;
  out.dmin[r] = blk.dmin;
  for (int j = 0; j < kSubBlocks; ++j) {
    k_scale_min(blk.scales, j, out.scales[j][r], out.mins[j][r]);
    const uint8_t* chunk = blk.qs + 32 * (j / 2);
    const int shift = j % 2 == 0 ? 0 : 4;
    interleave_nibble_run(nibbles_of(out, j), r, chunk, shift);
  }
}

// Super-block b of 16 Q4_K rows.
void pack_q4k_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ4KBlock& out) {
  std::memset(&out, 0, sizeof(out));  // padding rows: zero scales and nibbles
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] != nullptr) pack_k4_parts(reinterpret_cast<const BlockQ4_K*>(rows[r])[b], r, out);
  }
}

void pack_f16_block(const uint8_t* const rows[kPackRows], int64_t b, PackedF16Block& out) {
  for (int r = 0; r < kPackRows; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(rows[r]);
    for (int k = 0; k < kPackCols; ++k) {
      out.w[k][r] = row != nullptr ? row[b * kPackCols + k] : uint16_t{0};
    }
  }
}

// Q5_K: Q4_K's nibbles, scales and mins, and the fifth bits: bit j of qh[i] belongs to value
// i of sub-block j.
void pack_q5k_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ5KBlock& out) {
  std::memset(&out, 0, sizeof(out));
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockQ5_K*>(rows[r])[b];
    pack_k4_parts(blk, r, out);
    // Bit j of qh[i] is the fifth bit of value i of sub-block j.
    for (int j = 0; j < kSubBlocks; ++j) {
      const uint32_t word = fifth_bit_word(blk.qh, j);
      std::memcpy(&out.sub[j].qh[r * 4], &word, sizeof(word));
    }
  }
}

// Q5_1: d and m as they are; nibbles as Q4_1's, the fifth bit of value i is bit i of qh.
void pack_q5_1_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ5_1Block& out) {
  std::memset(&out, 0, sizeof(out));  // padding rows: zero d, m and values
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockQ5_1*>(rows[r])[b];
    out.d[r] = blk.d;
    out.m[r] = blk.m;
    interleave_q4_block(out.qs, r, blk.qs);
    uint32_t qh;
    std::memcpy(&qh, blk.qh, sizeof(qh));
    uint8_t fifth[kPackCols];  // column i's fifth bit, bit i of qh, as a byte
    for (int i = 0; i < kPackCols; ++i) fifth[i] = static_cast<uint8_t>(qh >> i & 1u);
    const uint32_t word = fifth_bit_word(fifth, 0);
    std::memcpy(&out.qh[r * 4], &word, sizeof(word));
  }
}

// IQ4_XS: sub-block j's 6-bit scale is the low nibble of scales_l[j / 2] (high nibble for odd
// j) and bits 2j, 2j + 1 of scales_h, offset by 32; its nibbles are 16 bytes as in IQ4_NL.
void pack_iq4xs_block(const uint8_t* const rows[kPackRows], int64_t b, PackedIQ4XSBlock& out) {
  std::memset(&out, 0, sizeof(out));
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(rows[r])[b];
    out.d[r] = blk.d;
    for (int j = 0; j < kSubBlocks; ++j) {
      const int low = (blk.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
      const int high = (blk.scales_h >> (2 * j)) & 3;
      out.scales[j][r] = static_cast<int8_t>((low | high << 4) - 32);
      const uint8_t* qs = blk.qs + 16 * j;
      interleave_q4_block(out.qs[j], r, qs);
    }
  }
}

// MXFP4: each row's E8M0 byte as it is, its nibbles as Q4_0's (the kernels look the values up).
// Padding rows get e = 0 (a tiny scale) and nibbles 0, whose value is 0: they add nothing.
void pack_mxfp4_block(const uint8_t* const rows[kPackRows], int64_t b, PackedMXFP4Block& out) {
  std::memset(&out, 0, sizeof(out));
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockMXFP4*>(rows[r])[b];
    out.e[r] = blk.e;
    interleave_q4_block(out.qs, r, blk.qs);
  }
}

// The 256 values of a GGUF Q6_K super-block, q in [0, 63], in order: each half of 128 values
// takes 64 ql bytes (low nibbles for its first 64 values, high nibbles for the next 64) and 32
// qh bytes (2 bits for each of its 4 runs of 32 values, run s at bits 2s). Decoded a whole
// block at once: per value, with the index arithmetic, packing Q6_K ran at 0.72 GB/s against
// Q4_K's 3.1 (inferd_kernels_bench Pack/, AMD EPYC Zen 4), most of a Q4_K_M model's load.
void q6k_values(const BlockQ6_K& blk, uint8_t q[kPackSuperCols]) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = blk.ql + 64 * half;
    const uint8_t* qh = blk.qh + 32 * half;
    uint8_t* v = q + 128 * half;
    for (int i = 0; i < 32; ++i) {
      v[i] = static_cast<uint8_t>((ql[i] & 0x0F) | (qh[i] & 3) << 4);
      v[i + 32] = static_cast<uint8_t>((ql[i + 32] & 0x0F) | (qh[i] >> 2 & 3) << 4);
      v[i + 64] = static_cast<uint8_t>((ql[i] >> 4) | (qh[i] >> 4 & 3) << 4);
      v[i + 96] = static_cast<uint8_t>((ql[i + 32] >> 4) | (qh[i] >> 6 & 3) << 4);
    }
  }
}

void pack_q6k_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ6KBlock& out) {
  std::memset(&out, 0, sizeof(out));  // padding rows: zero scales and values
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockQ6_K*>(rows[r])[b];
    out.d[r] = blk.d;
    for (int s = 0; s < 2 * kSubBlocks; ++s) out.scales[s][r] = blk.scales[s];
    uint8_t q[kPackSuperCols];
    q6k_values(blk, q);
    // Byte 4r + k of ql[c]: the low nibbles of values 8c + k and 8c + 4 + k of the sub-block;
    // of qh[c / 2]: their top 2 bits at bits 4 (c % 2), 4 (c % 2) + 2. A word at a time.
    for (int j = 0; j < kSubBlocks; ++j) {
      for (int h = 0; h < 2; ++h) {  // qh[h] holds the top bits of ql[2h] and ql[2h + 1]
        uint32_t top = 0;
        for (int e = 0; e < 2; ++e) {
          const int c = 2 * h + e;
          const uint32_t first = load_u32(q + 32 * j + 8 * c),
                         second = load_u32(q + 32 * j + 8 * c + 4);
          store_row_word(out.sub[j].ql, c, r, low_nibbles(first) | low_nibbles(second) << 4);
          top |= ((first >> 4 & 0x03030303u) | (second >> 4 & 0x03030303u) << 2) << (4 * e);
        }
        std::memcpy(&out.sub[j].qh[h][r * 4], &top, sizeof(top));
      }
    }
  }
}

// The low 2 bits of the 256 values of a GGUF Q2_K or Q3_K super-block, in order: each half of
// 128 values takes 32 bytes of qs, its four runs of 32 values the four 2-bit fields of those
// bytes, lowest first. Decoded a block at once (value by value, packing these types ran at 0.19
// GB/s: inferd_kernels_bench Pack/).
void k2_low_bits(const uint8_t* qs, uint8_t q[kPackSuperCols]) {
  for (int half = 0; half < 2; ++half) {
    for (int run = 0; run < 4; ++run) {
      for (int i = 0; i < 32; ++i)
        q[128 * half + 32 * run + i] = static_cast<uint8_t>(qs[32 * half + i] >> (2 * run) & 3);
    }
  }
}

// Writes the 2-bit fields of row r for the 32 columns of a sub-block, `values` (PackedQ3KBlock's
// ql, and PackedQ2KBlock's qs): ql[p] byte r * 4 + k, bits 2i, 2i + 1 take column 16p + 4i + k;
// the row's 4 bytes as one word.
void interleave_two_bits(uint8_t (&ql)[2][64], int r, const uint8_t* values) {
  for (int p = 0; p < 2; ++p) {
    uint32_t word = 0;
    for (int i = 0; i < 4; ++i)
      word |= (load_u32(values + 16 * p + 4 * i) & 0x03030303u) << (2 * i);
    std::memcpy(&ql[p][r * 4], &word, sizeof(word));
  }
}

// Q3_K: v = q + 4 = low 2 bits + 4 x (hmask bit: set means no -4 offset); the third bit of
// value v is bit v / 32 of hmask[v % 32]. Scale s takes its low 4 bits from the nibble s / 8 of
// scales[s % 8] and its high 2 bits from field s / 4 of scales[8 + s % 4], offset by 32.
void pack_q3k_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ3KBlock& out) {
  std::memset(&out, 0, sizeof(out));  // padding rows: zero scales and values
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockQ3_K*>(rows[r])[b];
    out.d[r] = blk.d;
    for (int s = 0; s < 2 * kSubBlocks; ++s) {
      const int low = (blk.scales[s % 8] >> (4 * (s / 8))) & 0x0F;
      const int high = (blk.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      out.scales[s][r] = static_cast<int8_t>((low | high << 4) - 32);
    }
    uint8_t q[kPackSuperCols];
    k2_low_bits(blk.qs, q);
    for (int j = 0; j < kSubBlocks; ++j) {
      interleave_two_bits(out.sub[j].ql, r, q + 32 * j);
      // Byte 4r + k, bit g: the third bit of value 32j + 4g + k, bit j of hmask[4g + k].
      uint32_t word = 0;
      for (int g = 0; g < 8; ++g) word |= (load_u32(blk.hmask + 4 * g) >> j & 0x01010101u) << g;
      std::memcpy(&out.sub[j].qh[r * 4], &word, sizeof(word));
    }
  }
}

// Q2_K: d, dmin and the scale bytes as they are; the 2-bit values laid out as Q3_K's low bits.
void pack_q2k_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ2KBlock& out) {
  std::memset(&out, 0, sizeof(out));  // padding rows: zero scales, mins and values
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) continue;
    const auto& blk = reinterpret_cast<const BlockQ2_K*>(rows[r])[b];
    out.d[r] = blk.d;
    out.dmin[r] = blk.dmin;
    uint8_t q[kPackSuperCols];
    k2_low_bits(blk.qs, q);
    for (int j = 0; j < kSubBlocks; ++j) {
      out.scales[j][r][0] = blk.scales[2 * j];
      out.scales[j][r][1] = blk.scales[2 * j + 1];
      interleave_two_bits(out.qs[j], r, q + 32 * j);
    }
  }
}

}  // namespace

void PackedWeights::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

bool PackedWeights::supports(DType type, int64_t cols) {
  if (cols <= 0) return false;
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q8_0:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::MXFP4:
    case DType::F16:
      return cols % kPackCols == 0;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
      return cols % kPackSuperCols == 0;
    default:
      return false;
  }
}

namespace {

// Packing is a copy made once at load, and most of its time is the kernel faulting in the file's
// pages and zeroing the arena's fresh ones (a 5.5 GB model took 16-20 s on one thread, half of
// it in clear_page): matrices of several MiB are split into ranges of groups, one a CPU this
// process may use (at most 16), so that all of it runs on every core.
template <typename Fn>
void for_group_ranges(int64_t groups, size_t bytes, Fn&& pack_groups) {
  constexpr size_t kMinBytesPerThread = size_t{4} << 20;
  constexpr int kMaxThreads = 16;
  const auto cpus = static_cast<int64_t>(allowed_cpus().size());
  const int64_t threads = std::clamp<int64_t>(
      std::min({cpus, static_cast<int64_t>(bytes / kMinBytesPerThread), groups}), 1, kMaxThreads);
  if (threads == 1) {
    pack_groups(int64_t{0}, groups);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  const auto run_range = [&](int64_t i) {
    try {
      pack_groups(groups * i / threads, groups * (i + 1) / threads);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  for (int64_t i = 1; i < threads; ++i) {
    try {
      workers.emplace_back(run_range, i);
    } catch (const std::system_error&) {  // no thread to be had (a process limit): do it here
      run_range(i);
    }
  }
  run_range(0);
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace

std::shared_ptr<const PackedWeights> PackedWeights::pack(DType type, const uint8_t* data,
                                                         int64_t rows, int64_t cols,
                                                         size_t row_bytes,
                                                         std::shared_ptr<HugePageArena> arena) {
  if (!supports(type, kPackSuperCols))
    fail("pack: weight type {} has no packed layout", dtype_name(type));
  if (!supports(type, cols) || rows <= 0) {
    fail("pack: a {} x {} matrix of {} is not a whole number of packed blocks", rows, cols,
         dtype_name(type));
  }
  auto packed = std::make_shared<PackedWeights>();
  switch (type) {
    case DType::Q4_0:
      packed->format_ = PackedFormat::Q4_0;
      break;
    case DType::Q4_1:
      packed->format_ = PackedFormat::Q4_1;
      break;
    case DType::F16:
      packed->format_ = PackedFormat::F16;
      break;
    case DType::Q4_K:
      packed->format_ = PackedFormat::Q4_K;
      break;
    case DType::Q5_K:
      packed->format_ = PackedFormat::Q5_K;
      break;
    case DType::Q6_K:
      packed->format_ = PackedFormat::Q6_K;
      break;
    case DType::Q3_K:
      packed->format_ = PackedFormat::Q3_K;
      break;
    case DType::Q2_K:
      packed->format_ = PackedFormat::Q2_K;
      break;
    case DType::IQ4_XS:
      packed->format_ = PackedFormat::IQ4_XS;
      break;
    case DType::Q5_1:
      packed->format_ = PackedFormat::Q5_1;
      break;
    case DType::MXFP4:
      packed->format_ = PackedFormat::MXFP4;
      break;
    default:  // Q8_0, Q5_0, IQ4_NL
      packed->format_ = PackedFormat::Q8_0;
  }
  packed->rows_ = rows;
  packed->groups_ = (rows + kPackRows - 1) / kPackRows;
  packed->blocks_per_row_ = cols / packed->block_cols();
  const size_t bytes =
      static_cast<size_t>(packed->groups_ * packed->blocks_per_row_) * packed->block_bytes();
  // 64-byte alignment: every packed block starts on a cache line (320, 1344 and 2368
  // are multiples of 64; 544, 1824 and MXFP4's 272 are not, and their kernels load unaligned).
  if (arena != nullptr) {
    packed->data_ = arena->allocate(bytes, 64);
    packed->arena_ = std::move(arena);
  } else {
    packed->owned_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!packed->owned_) fail("pack: out of memory for {} bytes of packed weights", bytes);
    packed->data_ = packed->owned_.get();
  }
  const auto pack_groups = [&](int64_t first, int64_t last) {
    for (int64_t g = first; g < last; ++g) {
      const uint8_t* group_rows[kPackRows];
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        group_rows[r] = row < rows ? data + static_cast<size_t>(row) * row_bytes : nullptr;
      }
      uint8_t* out =
          packed->data_ + static_cast<size_t>(g * packed->blocks_per_row_) * packed->block_bytes();
      for (int64_t b = 0; b < packed->blocks_per_row_; ++b) {
        switch (packed->format_) {
          case PackedFormat::Q8_0:
            pack_q8_block(type, group_rows, b, reinterpret_cast<PackedQ8Block*>(out)[b]);
            break;
          case PackedFormat::Q4_K:
            pack_q4k_block(group_rows, b, reinterpret_cast<PackedQ4KBlock*>(out)[b]);
            break;
          case PackedFormat::Q5_K:
            pack_q5k_block(group_rows, b, reinterpret_cast<PackedQ5KBlock*>(out)[b]);
            break;
          case PackedFormat::Q6_K:
            pack_q6k_block(group_rows, b, reinterpret_cast<PackedQ6KBlock*>(out)[b]);
            break;
          case PackedFormat::Q3_K:
            pack_q3k_block(group_rows, b, reinterpret_cast<PackedQ3KBlock*>(out)[b]);
            break;
          case PackedFormat::Q2_K:
            pack_q2k_block(group_rows, b, reinterpret_cast<PackedQ2KBlock*>(out)[b]);
            break;
          case PackedFormat::IQ4_XS:
            pack_iq4xs_block(group_rows, b, reinterpret_cast<PackedIQ4XSBlock*>(out)[b]);
            break;
          case PackedFormat::F16:
            pack_f16_block(group_rows, b, reinterpret_cast<PackedF16Block*>(out)[b]);
            break;
          case PackedFormat::Q5_1:
            pack_q5_1_block(group_rows, b, reinterpret_cast<PackedQ5_1Block*>(out)[b]);
            break;
          case PackedFormat::MXFP4:
            pack_mxfp4_block(group_rows, b, reinterpret_cast<PackedMXFP4Block*>(out)[b]);
            break;
          default:
            pack_q4_block(type, group_rows, b, reinterpret_cast<PackedQ4Block*>(out)[b]);
        }
      }
    }
  };
  for_group_ranges(packed->groups_, bytes, pack_groups);
  return packed;
}

}  // namespace inferd::kernels
