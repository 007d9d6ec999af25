// Decoding i-quant super-blocks into IqTile (iq_tiles.h). A group of 8 weights becomes one
// 64-bit word of signed bytes: the codebook point with its signs applied by (v ^ m) + (m & 1)
// per byte, m = 0xFF where a sign bit is set (no magnitude is 0, so no byte carries), or for IQ1
// a word of 8 x coordinate + shift from two tables made once. Its low 4 bytes go to one operand
// vector, its high 4 to the next.
#include "kernels/iq_tiles.h"

#include <array>
#include <cstring>
#include <type_traits>

#include "tensor/half.h"
#include "tensor/iq_grids.h"

namespace inferd::kernels {
namespace {

// Byte j of kSignMask[s] is 0xFF when bit j of s is set.
const std::array<uint64_t, 256> kSignMask = [] {
  std::array<uint64_t, 256> t{};
  for (int s = 0; s < 256; ++s)
    for (int j = 0; j < 8; ++j)
      if ((s >> j) & 1) t[static_cast<size_t>(s)] |= uint64_t{0xFF} << (8 * j);
  return t;
}();

uint8_t signs_of(uint32_t seven_bits) {
  return kIqSigns[seven_bits & 127];
}

uint64_t with_signs(uint64_t magnitudes, uint8_t signs) {
  const uint64_t m = kSignMask[signs];
  return (magnitudes ^ m) + (m & 0x0101010101010101ULL);
}

// IQ1's points as int8 bytes of 8 x coordinate + 1 (plus: the shift's sign bit clear) or - 1
// (minus): a weight in units of its scale times kIq1Delta, so the shift is exact in integers.
struct Iq1Words {
  std::array<uint64_t, 2048> plus, minus;
};
const Iq1Words& iq1_words() {
  static const Iq1Words words = [] {
    Iq1Words w;
    for (size_t i = 0; i < 2048; ++i) {
      uint64_t p = 0, m = 0;
      for (int j = 0; j < 8; ++j) {
        const int c = static_cast<int8_t>(kIq1SGrid[i] >> (8 * j));
        p |= uint64_t{static_cast<uint8_t>(8 * c + 1)} << (8 * j);
        m |= uint64_t{static_cast<uint8_t>(8 * c - 1)} << (8 * j);
      }
      w.plus[i] = p;
      w.minus[i] = m;
    }
    return w;
  }();
  return words;
}

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One row's decoded super-block: 32 words of 8 values, the scale field of each run of 16, d.
struct RowBlock {
  uint64_t words[32];
  int scale[kIqTileRuns];
  float d;
};

void decode(const BlockIQ2_XXS& b, RowBlock& out) {
  out.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t indices = load_u32(b.qs + 4 * ib), fields = load_u32(b.qs + 4 * ib + 2);
    for (int l = 0; l < 4; ++l)
      out.words[4 * ib + l] =
          with_signs(kIq2XxsGrid[(indices >> (8 * l)) & 0xFF], signs_of(fields >> (7 * l)));
    out.scale[2 * ib] = out.scale[2 * ib + 1] = static_cast<int>(fields >> 28);
  }
}

void decode(const BlockIQ2_XS& b, RowBlock& out) {
  out.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * ib + l];
      out.words[4 * ib + l] = with_signs(kIq2XsGrid[q & 511], signs_of(q >> 9));
    }
    out.scale[2 * ib] = b.scales[ib] & 0x0F;
    out.scale[2 * ib + 1] = b.scales[ib] >> 4;
  }
}

void decode(const BlockIQ2_S& b, RowBlock& out) {
  out.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
      out.words[4 * ib + l] = with_signs(kIq2SGrid[index], b.signs[4 * ib + l]);
    }
    out.scale[2 * ib] = b.scales[ib] & 0x0F;
    out.scale[2 * ib + 1] = b.scales[ib] >> 4;
  }
}

uint64_t halves(uint32_t first, uint32_t second) {
  return first | (static_cast<uint64_t>(second) << 32);
}

void decode(const BlockIQ3_XXS& b, RowBlock& out) {
  out.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t fields = load_u32(b.qs + kQKK / 4 + 4 * ib);
    const uint8_t* q = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l)
      out.words[4 * ib + l] = with_signs(halves(kIq3XxsGrid[q[2 * l]], kIq3XxsGrid[q[2 * l + 1]]),
                                         signs_of(fields >> (7 * l)));
    out.scale[2 * ib] = out.scale[2 * ib + 1] = static_cast<int>(fields >> 28);
  }
}

void decode(const BlockIQ3_S& b, RowBlock& out) {
  out.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b.qs + 8 * ib;
    const int h = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const int first = q[2 * l] | (((h >> (2 * l)) & 1) << 8);
      const int second = q[2 * l + 1] | (((h >> (2 * l + 1)) & 1) << 8);
      out.words[4 * ib + l] =
          with_signs(halves(kIq3SGrid[first], kIq3SGrid[second]), b.signs[4 * ib + l]);
    }
    out.scale[2 * ib] = out.scale[2 * ib + 1] = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
  }
}

void decode(const BlockIQ1_S& b, RowBlock& out) {
  const Iq1Words& w = iq1_words();
  out.d = fp16_to_fp32(b.d) * kIq1Delta;
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = b.qh[ib];
    const auto& words = (h & 0x8000) != 0 ? w.minus : w.plus;
    for (int l = 0; l < 4; ++l)
      out.words[4 * ib + l] = words[b.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)];
    out.scale[2 * ib] = out.scale[2 * ib + 1] = (h >> 12) & 7;
  }
}

void decode(const BlockIQ1_M& b, RowBlock& out) {
  const Iq1Words& w = iq1_words();
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  const auto d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                            ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  out.d = fp16_to_fp32(d_bits) * kIq1Delta;
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int nibble = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0x0F;
      const auto& words = (nibble & 8) != 0 ? w.minus : w.plus;
      out.words[4 * ib + l] = words[b.qs[4 * ib + l] | ((nibble & 7) << 8)];
    }
    out.scale[2 * ib] = (sc[ib / 2] >> (6 * (ib % 2))) & 7;
    out.scale[2 * ib + 1] = (sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7;
  }
}

// The types whose scales cover 32 columns (the others': 16).
template <typename Block>
constexpr bool kScalePer32 =
    !std::is_same_v<Block, BlockIQ2_XS> && !std::is_same_v<Block, BlockIQ2_S> &&
    !std::is_same_v<Block, BlockIQ1_M>;

template <typename Block>
void decode_rows(const uint8_t* const* rows, int n_rows, int64_t block, IqTile& tile) {
  tile.scale_per_32 = kScalePer32<Block>;
  RowBlock rb;
  for (int r = 0; r < kIqTileRows; ++r) {
    if (r >= n_rows) {
      for (auto& v : tile.q) std::memset(&v[4 * r], 0, 4);
      for (auto& s : tile.scale) s[r] = 1;
      tile.bias[r] = 0;
      tile.d[r] = 0;
      continue;
    }
    decode(reinterpret_cast<const Block*>(rows[r])[block], rb);
    int32_t bias = 0;
    for (int g = 0; g < 32; ++g) {
      const uint64_t v = rb.words[g];
      std::memcpy(&tile.q[2 * g][4 * r], &v, 4);
      std::memcpy(&tile.q[2 * g + 1][4 * r], reinterpret_cast<const uint8_t*>(&v) + 4, 4);
      int32_t sum = 0;
      for (int j = 0; j < 8; ++j) sum += static_cast<int8_t>(v >> (8 * j));
      bias += (2 * rb.scale[g / 2] + 1) * sum;
    }
    for (int k = 0; k < kIqTileRuns; ++k) tile.scale[k][r] = 2 * rb.scale[k] + 1;
    tile.bias[r] = 128 * bias;
    tile.d[r] = rb.d;
  }
}

}  // namespace

bool is_iq_tile_type(DType type) {
  switch (type) {
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
      return true;
    default:
      return false;
  }
}

float iq_final_factor(DType type) {
  switch (type) {
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
      return 0.125f;
    case DType::IQ3_XXS:
      return 0.25f;
    default:
      return 1.0f;
  }
}

void decode_iq_tile(DType type, const uint8_t* const* rows, int n_rows, int64_t block,
                    IqTile& tile) {
  switch (type) {
    case DType::IQ2_XXS:
      return decode_rows<BlockIQ2_XXS>(rows, n_rows, block, tile);
    case DType::IQ2_XS:
      return decode_rows<BlockIQ2_XS>(rows, n_rows, block, tile);
    case DType::IQ2_S:
      return decode_rows<BlockIQ2_S>(rows, n_rows, block, tile);
    case DType::IQ3_XXS:
      return decode_rows<BlockIQ3_XXS>(rows, n_rows, block, tile);
    case DType::IQ3_S:
      return decode_rows<BlockIQ3_S>(rows, n_rows, block, tile);
    case DType::IQ1_S:
      return decode_rows<BlockIQ1_S>(rows, n_rows, block, tile);
    case DType::IQ1_M:
      return decode_rows<BlockIQ1_M>(rows, n_rows, block, tile);
    default:
      break;
  }
}

}  // namespace inferd::kernels
