// Reference kernels of quant_iq_ref.h. Each block is first unpacked into its signed codebook
// coordinates, the stored scale field of every 16 values and (IQ1_S, IQ1_M) the sign of every
// 8 values' shift; dequantization and the dots both read that form, so each bit layout is
// written down once. Compiled with -ffp-contract=off (src/CMakeLists.txt), as gguf-py rounds
// every product.
#include "kernels/ref/quant_iq_ref.h"

#include <cstring>

#include "tensor/half.h"
#include "tensor/iq_grids.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::ref {
namespace {

struct Unpacked {
  float d;
  int8_t q[kQKK];  // codebook coordinate times its sign (IQ1: -1, 0 or 1)
  int scale[16];   // the stored scale field s of values 16k..16k+15 (the factor is 2 s + 1)
  int shift[32];   // IQ1: the sign (+1 or -1) of values 8g..8g+7's shift by kIq1Delta; else 0
};

uint8_t grid_byte(uint64_t point, int j) {
  return static_cast<uint8_t>(point >> (8 * j));
}

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Group g of 8 values from an 8-coordinate point with 8 sign bits.
void put_group8(Unpacked& u, int g, uint64_t point, uint8_t signs) {
  for (int j = 0; j < 8; ++j) {
    const int v = grid_byte(point, j);
    u.q[8 * g + j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
  }
}

// Group g from two 4-coordinate points (values 0-3 and 4-7) with 8 sign bits.
void put_group4x2(Unpacked& u, int g, uint32_t first, uint32_t second, uint8_t signs) {
  put_group8(u, g, static_cast<uint64_t>(first) | (static_cast<uint64_t>(second) << 32), signs);
}

void unpack(const BlockIQ2_XXS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t indices = load_u32(b.qs + 4 * ib), signs = load_u32(b.qs + 4 * ib + 2);
    for (int l = 0; l < 4; ++l) {
      put_group8(u, 4 * ib + l, kIq2XxsGrid[(indices >> (8 * l)) & 0xFF],
                 iq_signs_of(signs >> (7 * l)));
    }
    u.scale[2 * ib] = u.scale[2 * ib + 1] = static_cast<int>(signs >> 28);
  }
}

void unpack(const BlockIQ2_XS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * ib + l];
      put_group8(u, 4 * ib + l, kIq2XsGrid[q & 511], iq_signs_of(q >> 9));
    }
    u.scale[2 * ib] = b.scales[ib] & 0x0F;
    u.scale[2 * ib + 1] = b.scales[ib] >> 4;
  }
}

void unpack(const BlockIQ2_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
      put_group8(u, 4 * ib + l, kIq2SGrid[index], b.signs[4 * ib + l]);
    }
    u.scale[2 * ib] = b.scales[ib] & 0x0F;
    u.scale[2 * ib + 1] = b.scales[ib] >> 4;
  }
}

void unpack(const BlockIQ3_XXS& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t signs = load_u32(b.qs + kQKK / 4 + 4 * ib);
    const uint8_t* q = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l) {
      put_group4x2(u, 4 * ib + l, kIq3XxsGrid[q[2 * l]], kIq3XxsGrid[q[2 * l + 1]],
                   iq_signs_of(signs >> (7 * l)));
    }
    u.scale[2 * ib] = u.scale[2 * ib + 1] = static_cast<int>(signs >> 28);
  }
}

void unpack(const BlockIQ3_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l) {
      const int first = q[2 * l] | (((b.qh[ib] >> (2 * l)) & 1) << 8);
      const int second = q[2 * l + 1] | (((b.qh[ib] >> (2 * l + 1)) & 1) << 8);
      put_group4x2(u, 4 * ib + l, kIq3SGrid[first], kIq3SGrid[second], b.signs[4 * ib + l]);
    }
    u.scale[2 * ib] = u.scale[2 * ib + 1] = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F;
  }
}

void put_iq1_group(Unpacked& u, int g, int index) {
  for (int j = 0; j < 8; ++j) u.q[8 * g + j] = static_cast<int8_t>(grid_byte(kIq1SGrid[index], j));
}

void unpack(const BlockIQ1_S& b, Unpacked& u) {
  u.d = fp16_to_fp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      put_iq1_group(u, 4 * ib + l, b.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8));
      u.shift[4 * ib + l] = (h & 0x8000) != 0 ? -1 : 1;
    }
    u.scale[2 * ib] = u.scale[2 * ib + 1] = (h >> 12) & 7;
  }
}

// IQ1_M's four 16-bit scale words.
void iq1m_words(const BlockIQ1_M& b, uint16_t w[4]) {
  std::memcpy(w, b.scales, 8);
}

void unpack(const BlockIQ1_M& b, Unpacked& u) {
  uint16_t w[4];
  iq1m_words(b, w);
  const auto d_bits = static_cast<uint16_t>((w[0] >> 12) | ((w[1] >> 8) & 0x00F0) |
                                            ((w[2] >> 4) & 0x0F00) | (w[3] & 0xF000));
  u.d = fp16_to_fp32(d_bits);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int nibble = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0x0F;
      put_iq1_group(u, 4 * ib + l, b.qs[4 * ib + l] | ((nibble & 7) << 8));
      u.shift[4 * ib + l] = (nibble & 8) != 0 ? -1 : 1;
    }
    u.scale[2 * ib] = (w[ib / 2] >> (6 * (ib % 2))) & 7;
    u.scale[2 * ib + 1] = (w[ib / 2] >> (6 * (ib % 2) + 3)) & 7;
  }
}

// The float each family's dequantization computes for one scale field, gguf-py's operations.
enum class Family { IQ2, IQ3_XXS, IQ3_S, IQ1 };
template <typename Block>
constexpr Family family_of();
template <>
constexpr Family family_of<BlockIQ2_XXS>() {
  return Family::IQ2;
}
template <>
constexpr Family family_of<BlockIQ2_XS>() {
  return Family::IQ2;
}
template <>
constexpr Family family_of<BlockIQ2_S>() {
  return Family::IQ2;
}
template <>
constexpr Family family_of<BlockIQ3_XXS>() {
  return Family::IQ3_XXS;
}
template <>
constexpr Family family_of<BlockIQ3_S>() {
  return Family::IQ3_S;
}
template <>
constexpr Family family_of<BlockIQ1_S>() {
  return Family::IQ1;
}
template <>
constexpr Family family_of<BlockIQ1_M>() {
  return Family::IQ1;
}

float scale_of(Family f, float d, int s) {
  switch (f) {
    case Family::IQ2:
      return d * (0.5f + static_cast<float>(s)) * 0.25f;
    case Family::IQ3_XXS:
      return d * (0.5f + static_cast<float>(s)) * 0.5f;
    case Family::IQ3_S:
    case Family::IQ1:
      return d * static_cast<float>(2 * s + 1);
  }
  return 0;
}

// What the dot's integer sum is multiplied by at the end: the scales 2 s + 1 stand for
// (s + 1/2) / 4 (IQ2) and (s + 1/2) / 2 (IQ3_XXS).
constexpr float final_factor(Family f) {
  return f == Family::IQ2 ? 0.125f : f == Family::IQ3_XXS ? 0.25f : 1.0f;
}

template <typename Block>
void dequantize_iq(const void* row, float* out, int64_t n) {
  constexpr Family f = family_of<Block>();
  const auto* blocks = static_cast<const Block*>(row);
  Unpacked u{};
  for (int64_t b = 0; b < n / kQKK; ++b, out += kQKK) {
    unpack(blocks[b], u);
    for (int i = 0; i < kQKK; ++i) {
      const float dl = scale_of(f, u.d, u.scale[i / 16]);
      if constexpr (f == Family::IQ1) {
        const float delta = u.shift[i / 8] < 0 ? -kIq1Delta : kIq1Delta;
        out[i] = dl * (static_cast<float>(u.q[i]) + delta);
      } else {
        out[i] = dl * static_cast<float>(u.q[i]);
      }
    }
  }
}

// Per super-block: d_w * d_a * (sum over 16-value runs of (2 s + 1) * (q . a), plus for IQ1
// kIq1Delta * sum over 8-value groups of (2 s + 1) * shift * sum(a)); the blocks' floats summed
// in order, times the final factor.
template <typename Block>
float dot_iq(int64_t n, const void* w, const void* a) {
  constexpr Family f = family_of<Block>();
  const auto* wb = static_cast<const Block*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  Unpacked u{};
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack(wb[b], u);
    int32_t isum = 0, shift_sum = 0;
    for (int k = 0; k < 16; ++k) {
      int32_t run = 0;
      for (int i = 16 * k; i < 16 * (k + 1); ++i) run += u.q[i] * ab[b].qs[i];
      isum += (2 * u.scale[k] + 1) * run;
    }
    float block = static_cast<float>(isum);
    if constexpr (f == Family::IQ1) {
      for (int g = 0; g < 32; ++g) {
        int32_t asum = 0;
        for (int i = 8 * g; i < 8 * (g + 1); ++i) asum += ab[b].qs[i];
        shift_sum += (2 * u.scale[g / 2] + 1) * u.shift[g] * asum;
      }
      block = block + kIq1Delta * static_cast<float>(shift_sum);
    }
    sum += u.d * ab[b].d * block;
  }
  return sum * final_factor(f);
}

}  // namespace

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ2_XXS>(n, w, a);
}
float dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ2_XS>(n, w, a);
}
float dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ2_S>(n, w, a);
}
float dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ3_XXS>(n, w, a);
}
float dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ3_S>(n, w, a);
}
float dot_iq1_s_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ1_S>(n, w, a);
}
float dot_iq1_m_q8_k(int64_t n, const void* w, const void* a) {
  return dot_iq<BlockIQ1_M>(n, w, a);
}

void dequantize_row_iq2_xxs(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ2_XXS>(r, o, n);
}
void dequantize_row_iq2_xs(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ2_XS>(r, o, n);
}
void dequantize_row_iq2_s(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ2_S>(r, o, n);
}
void dequantize_row_iq3_xxs(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ3_XXS>(r, o, n);
}
void dequantize_row_iq3_s(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ3_S>(r, o, n);
}
void dequantize_row_iq1_s(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ1_S>(r, o, n);
}
void dequantize_row_iq1_m(const void* r, float* o, int64_t n) {
  dequantize_iq<BlockIQ1_M>(r, o, n);
}

void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto& a =
        *reinterpret_cast<const BlockQ8_K*>(reinterpret_cast<const uint8_t*>(act) + t * act_stride);
    const auto* a_u8 = reinterpret_cast<const uint8_t*>(a.qs);  // q + 128
    for (int r = 0; r < n_rows; ++r) {
      int32_t isum = -tile.bias[r];
      for (int k = 0; k < kIqTileRuns; ++k) {
        int32_t run = 0;
        for (int c = 16 * k; c < 16 * (k + 1); ++c) run += tile.q[c / 4][4 * r + c % 4] * a_u8[c];
        isum += tile.scale[k][r] * run;
      }
      y[t * y_stride + r] += tile.d[r] * a.d * static_cast<float>(isum);
    }
  }
}

}  // namespace inferd::kernels::ref
