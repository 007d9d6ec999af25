#include "kernels/packed.h"

#include <cstdlib>
#include <cstring>

#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "util/error.h"

namespace inferd::kernels {
namespace {

// The 4-bit value of column `col` (0..31) of a GGUF Q4 block: low nibbles hold 0..15.
inline uint8_t q4_value(const uint8_t* qs, int col) {
  return col < 16 ? qs[col] & 0x0F : qs[col - 16] >> 4;
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
    for (int c = 0; c < 4; ++c) {
      for (int k = 0; k < 4; ++k) {
        out.qs[c][r * 4 + k] =
            static_cast<uint8_t>(q4_value(qs, 8 * c + k) | q4_value(qs, 8 * c + 4 + k) << 4);
      }
    }
  }
  // Padding rows: zero scales make them contribute nothing; their nibbles are zero too.
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] != nullptr) continue;
    for (int c = 0; c < 4; ++c) std::memset(&out.qs[c][r * 4], 0, 4);
  }
}

void pack_q8_block(const uint8_t* const rows[kPackRows], int64_t b, PackedQ8Block& out) {
  for (int r = 0; r < kPackRows; ++r) {
    if (rows[r] == nullptr) {
      out.d[r] = 0;
      for (int c = 0; c < 8; ++c) std::memset(&out.qs[c][r * 4], 128, 4);  // q = 0
      continue;
    }
    const auto& blk = reinterpret_cast<const BlockQ8_0*>(rows[r])[b];
    out.d[r] = blk.d;
    for (int c = 0; c < 8; ++c) {
      for (int k = 0; k < 4; ++k)
        out.qs[c][r * 4 + k] = static_cast<uint8_t>(blk.qs[4 * c + k] + 128);
    }
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

}  // namespace

void PackedWeights::FreeDeleter::operator()(uint8_t* p) const {
  std::free(p);
}

bool PackedWeights::supports(DType type, int64_t cols) {
  const bool packable_type =
      type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q8_0 || type == DType::F16;
  return packable_type && cols > 0 && cols % kPackCols == 0;
}

std::shared_ptr<const PackedWeights> PackedWeights::pack(DType type, const uint8_t* data,
                                                         int64_t rows, int64_t cols,
                                                         size_t row_bytes,
                                                         std::shared_ptr<HugePageArena> arena) {
  if (!supports(type, kPackCols))
    fail("pack: weight type {} has no packed layout", dtype_name(type));
  if (cols % kPackCols != 0 || cols <= 0 || rows <= 0) {
    fail("pack: a {} x {} matrix is not a whole number of {}-wide blocks", rows, cols, kPackCols);
  }
  auto packed = std::make_shared<PackedWeights>();
  packed->format_ = type == DType::Q8_0   ? PackedFormat::Q8_0
                    : type == DType::Q4_0 ? PackedFormat::Q4_0
                    : type == DType::F16  ? PackedFormat::F16
                                          : PackedFormat::Q4_1;
  packed->rows_ = rows;
  packed->groups_ = (rows + kPackRows - 1) / kPackRows;
  packed->blocks_per_row_ = cols / kPackCols;
  const size_t bytes =
      static_cast<size_t>(packed->groups_ * packed->blocks_per_row_) * packed->block_bytes();
  // 64-byte alignment: every packed block starts on a cache line (320 and 544 are multiples).
  if (arena != nullptr) {
    packed->data_ = arena->allocate(bytes, 64);
    packed->arena_ = std::move(arena);
  } else {
    packed->owned_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!packed->owned_) fail("pack: out of memory for {} bytes of packed weights", bytes);
    packed->data_ = packed->owned_.get();
  }
  for (int64_t g = 0; g < packed->groups_; ++g) {
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
          pack_q8_block(group_rows, b, reinterpret_cast<PackedQ8Block*>(out)[b]);
          break;
        case PackedFormat::F16:
          pack_f16_block(group_rows, b, reinterpret_cast<PackedF16Block*>(out)[b]);
          break;
        default:
          pack_q4_block(type, group_rows, b, reinterpret_cast<PackedQ4Block*>(out)[b]);
      }
    }
  }
  return packed;
}

}  // namespace inferd::kernels
