// Reference kernels of quant_k_ref.h. Every block is first unpacked into its integer values and
// integer (sub-)block scales; dequantization and the dot products both read that form, so the
// bit layouts are written down once per type.
//
// Dequantization follows gguf-py's float operations exactly: the fp16 scales become floats, the
// per-sub-block factor d * scale (and dmin * min) is rounded to float first, then multiplies
// the value (and the min term is subtracted). This file is compiled with -ffp-contract=off
// (src/CMakeLists.txt) so no multiply-add is fused into one rounding.
#include "kernels/ref/quant_k_ref.h"

#include <cmath>
#include <cstring>

#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::ref {
namespace {

// Value j of a 32-value block whose nibbles are laid out as Q4_0's: the first 16 values in the
// low nibbles of qs[0..16), the last 16 in the high nibbles.
int nibble32(const uint8_t* qs, int j) {
  return j < kQK / 2 ? qs[j] & 0x0F : qs[j - kQK / 2] >> 4;
}

// The fifth bit of value j of a Q5_0/Q5_1 block: bit j of the little-endian u32 qh.
int high_bit32(const uint8_t* qh, int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return static_cast<int>((bits >> j) & 1u);
}

// A super-block unpacked: value i = d * scale[s] * q[i] - dmin * min[s], s = i / sub (the min
// term only when has_min).
struct SuperBlock {
  int8_t q[kQKK];
  int scale[16];
  int min[16];
  int sub;  // values per sub-block: 16 or 32
  bool has_min;
  float d, dmin;
};

void unpack(const BlockQ2_K& b, SuperBlock& u) {
  u.sub = 16;
  u.has_min = true;
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    u.scale[s] = b.scales[s] & 0x0F;
    u.min[s] = b.scales[s] >> 4;
  }
  // Each half of 128 values takes 32 bytes of qs; the four 32-value runs of a half are the
  // four 2-bit fields of those bytes, lowest bits first.
  for (int i = 0; i < kQKK; ++i) {
    const int half = i / 128, run = i % 128 / 32, l = i % 32;
    u.q[i] = static_cast<int8_t>((b.qs[32 * half + l] >> (2 * run)) & 3);
  }
}

void unpack(const BlockQ3_K& b, SuperBlock& u) {
  u.sub = 16;
  u.has_min = false;
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0;
  // Scale s: its low 4 bits are the low (s < 8) or high (s >= 8) nibble of scales[s % 8], its
  // high 2 bits the 2-bit field s / 4 of scales[8 + s % 4]; stored offset by 32.
  for (int s = 0; s < 16; ++s) {
    const int low = (b.scales[s % 8] >> (4 * (s / 8))) & 0x0F;
    const int high = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    u.scale[s] = (low | (high << 4)) - 32;
    u.min[s] = 0;
  }
  // The low 2 bits as Q2_K's; the third is bit i / 32 of hmask[i % 32], and a clear bit means
  // the value is 4 lower.
  for (int i = 0; i < kQKK; ++i) {
    const int half = i / 128, run = i % 128 / 32, l = i % 32;
    const int low = (b.qs[32 * half + l] >> (2 * run)) & 3;
    const int high = (b.hmask[l] >> (i / 32)) & 1;
    u.q[i] = static_cast<int8_t>(low - (high != 0 ? 0 : 4));
  }
}

// The 6-bit scale and min of sub-block s (0..8) of Q4_K and Q5_K from their 12 bytes: bytes
// 0..3 hold scales 0..3 and bytes 4..7 mins 0..3 in their low 6 bits; for s >= 4 the low 4 bits
// come from the nibbles of byte s + 4 (scale low, min high) and the high 2 bits from the top
// bits of bytes s - 4 (scale) and s (min).
void scale_min_k4(const uint8_t* scales, int s, int& scale, int& min) {
  if (s < 4) {
    scale = scales[s] & 63;
    min = scales[s + 4] & 63;
  } else {
    scale = (scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4);
    min = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
  }
}

// Q4_K's and Q5_K's nibbles: 4 chunks of 32 bytes; chunk c holds values 64c..64c+31 in its low
// nibbles and 64c+32..64c+63 in its high nibbles.
int nibble_k4(const uint8_t* qs, int i) {
  const int chunk = i / 64, l = i % 32;
  return (qs[32 * chunk + l] >> (4 * (i % 64 / 32))) & 0x0F;
}

void unpack(const BlockQ4_K& b, SuperBlock& u) {
  u.sub = 32;
  u.has_min = true;
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 8; ++s) scale_min_k4(b.scales, s, u.scale[s], u.min[s]);
  for (int i = 0; i < kQKK; ++i) u.q[i] = static_cast<int8_t>(nibble_k4(b.qs, i));
}

void unpack(const BlockQ5_K& b, SuperBlock& u) {
  u.sub = 32;
  u.has_min = true;
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
  for (int s = 0; s < 8; ++s) scale_min_k4(b.scales, s, u.scale[s], u.min[s]);
  // The fifth bit of value i: bit i / 32 of qh[i % 32].
  for (int i = 0; i < kQKK; ++i) {
    const int high = (b.qh[i % 32] >> (i / 32)) & 1;
    u.q[i] = static_cast<int8_t>(nibble_k4(b.qs, i) | (high << 4));
  }
}

void unpack(const BlockQ6_K& b, SuperBlock& u) {
  u.sub = 16;
  u.has_min = false;
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0;
  for (int s = 0; s < 16; ++s) {
    u.scale[s] = b.scales[s];
    u.min[s] = 0;
  }
  // Each half of 128 values: the low 4 bits from 64 bytes of ql (values r < 64 low nibbles,
  // r >= 64 high nibbles of ql[r % 64]), the high 2 bits from 32 bytes of qh (2-bit field r / 32
  // of qh[r % 32]); stored offset by 32.
  for (int i = 0; i < kQKK; ++i) {
    const int half = i / 128, r = i % 128;
    const int low = (b.ql[64 * half + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int high = (b.qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
    u.q[i] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

void unpack(const BlockIQ4_XS& b, SuperBlock& u) {
  u.sub = 32;
  u.has_min = false;
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0;
  // Scale s: low 4 bits from nibble s % 2 of scales_l[s / 2], high 2 bits from the 2-bit field
  // s of scales_h; stored offset by 32.
  for (int s = 0; s < 8; ++s) {
    const int low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F;
    const int high = (b.scales_h >> (2 * s)) & 3;
    u.scale[s] = (low | (high << 4)) - 32;
    u.min[s] = 0;
  }
  // Sub-block s is a 32-value IQ4_NL block without its own d: 16 bytes at qs + 16 s.
  for (int i = 0; i < kQKK; ++i) {
    u.q[i] = kIq4Values[nibble32(b.qs + 16 * (i / 32), i % 32)];
  }
}

template <typename Block>
void dequantize_k(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const Block*>(row);
  SuperBlock u;
  for (int64_t b = 0; b < n / kQKK; ++b, out += kQKK) {
    unpack(blocks[b], u);
    for (int i = 0; i < kQKK; ++i) {
      const int s = i / u.sub;
      const float dl = u.d * static_cast<float>(u.scale[s]);
      if (u.has_min) {
        const float ml = u.dmin * static_cast<float>(u.min[s]);
        out[i] = dl * static_cast<float>(u.q[i]) - ml;
      } else {
        out[i] = dl * static_cast<float>(u.q[i]);
      }
    }
  }
}

// sum over super-blocks of d8 * (d * sum_s scale_s * (q . a)_s - dmin * sum_s min_s * asum_s):
// the products in int32 per sub-block, the mins through the activation's 16-value sums.
template <typename Block>
float dot_k(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const Block*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  SuperBlock u;
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack(wb[b], u);
    int32_t isum = 0;
    for (int s = 0; s < kQKK / u.sub; ++s) {
      int32_t sub_sum = 0;
      for (int i = s * u.sub; i < (s + 1) * u.sub; ++i) sub_sum += u.q[i] * ab[b].qs[i];
      isum += u.scale[s] * sub_sum;
    }
    float block = ab[b].d * u.d * static_cast<float>(isum);
    if (u.has_min) {
      int32_t msum = 0;
      for (int s = 0; s < kQKK / u.sub; ++s) {
        int32_t asum = 0;
        for (int k = s * u.sub / 16; k < (s + 1) * u.sub / 16; ++k) asum += ab[b].bsums[k];
        msum += u.min[s] * asum;
      }
      block -= ab[b].d * u.dmin * static_cast<float>(msum);
    }
    sum += block;
  }
  return sum;
}

}  // namespace

void quantize_row_q8_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(out);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ8_K& y = blocks[b];
    float amax = 0, max = 0;  // the first value of largest magnitude, with its sign
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const float v = std::nearbyint(iscale * x[j]);
      y.qs[j] = static_cast<int8_t>(v > 127.0f ? 127.0f : v);
    }
    for (int k = 0; k < kQKK / 16; ++k) {
      int sum = 0;
      for (int j = 16 * k; j < 16 * (k + 1); ++j) sum += y.qs[j];
      y.bsums[k] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

void dequantize_row_q8_k(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(row);
  for (int64_t b = 0; b < n / kQKK; ++b, out += kQKK) {
    for (int j = 0; j < kQKK; ++j) out[j] = blocks[b].d * static_cast<float>(blocks[b].qs[j]);
  }
}

float dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = (nibble32(wb[b].qs, j) | (high_bit32(wb[b].qh, j) << 4)) - 16;
      block_sum += q * ab[b].qs[j];
    }
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d);
  }
  return sum;
}

float dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble32(wb[b].qs, j) | (high_bit32(wb[b].qh, j) << 4);
      block_sum += q * ab[b].qs[j];
    }
    // The min folds through the activation block's s = d_a * sum(a), as for Q4_1.
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(ab[b].s);
  }
  return sum;
}

float dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ4_NL*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK; ++j) block_sum += kIq4Values[nibble32(wb[b].qs, j)] * ab[b].qs[j];
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d);
  }
  return sum;
}

// MXFP4 x Q8_0: the integer sum of table values times q per block, scaled by the block's
// power-of-two scale times the activation's d.
float dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockMXFP4*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK; ++j) block_sum += kMxfp4Values[nibble32(wb[b].qs, j)] * ab[b].qs[j];
    const float d = fp16_to_fp32(ab[b].d) * e8m0_to_fp32_half(wb[b].e);
    sum += static_cast<float>(block_sum) * d;
  }
  return sum;
}

float dot_q2_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockQ2_K>(n, w, a);
}
float dot_q3_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockQ3_K>(n, w, a);
}
float dot_q4_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockQ4_K>(n, w, a);
}
float dot_q5_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockQ5_K>(n, w, a);
}
float dot_q6_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockQ6_K>(n, w, a);
}
float dot_iq4_xs_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k<BlockIQ4_XS>(n, w, a);
}

void dequantize_row_q5_0(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) {
      const int q = (nibble32(blocks[b].qs, j) | (high_bit32(blocks[b].qh, j) << 4)) - 16;
      out[j] = d * static_cast<float>(q);
    }
  }
}

void dequantize_row_q5_1(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    for (int j = 0; j < kQK; ++j) {
      const int q = nibble32(blocks[b].qs, j) | (high_bit32(blocks[b].qh, j) << 4);
      out[j] = d * static_cast<float>(q) + m;
    }
  }
}

void dequantize_row_iq4_nl(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) {
      out[j] = d * static_cast<float>(kIq4Values[nibble32(blocks[b].qs, j)]);
    }
  }
}

// A power of two times a small integer: every product is exact (subnormal scales included) or
// overflows to infinity (e >= 254 with the largest values), as gguf-py's does.
void dequantize_row_mxfp4(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockMXFP4*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = e8m0_to_fp32_half(blocks[b].e);
    for (int j = 0; j < kQK; ++j) {
      out[j] = static_cast<float>(kMxfp4Values[nibble32(blocks[b].qs, j)]) * d;
    }
  }
}

void dequantize_row_q2_k(const void* row, float* out, int64_t n) {
  dequantize_k<BlockQ2_K>(row, out, n);
}
void dequantize_row_q3_k(const void* row, float* out, int64_t n) {
  dequantize_k<BlockQ3_K>(row, out, n);
}
void dequantize_row_q4_k(const void* row, float* out, int64_t n) {
  dequantize_k<BlockQ4_K>(row, out, n);
}
void dequantize_row_q5_k(const void* row, float* out, int64_t n) {
  dequantize_k<BlockQ5_K>(row, out, n);
}
void dequantize_row_q6_k(const void* row, float* out, int64_t n) {
  dequantize_k<BlockQ6_K>(row, out, n);
}
void dequantize_row_iq4_xs(const void* row, float* out, int64_t n) {
  dequantize_k<BlockIQ4_XS>(row, out, n);
}

}  // namespace inferd::kernels::ref
