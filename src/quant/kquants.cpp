// The k-quants and IQ4_XS: super-blocks of 256 values whose sub-blocks (16 or 32 values) each
// get a searched scale (and min, quant/fit.h); those scales are then quantized themselves
// against the super-block's fp16 d (and dmin), and every value is rounded again with the scale
// it will really be decoded with.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fit.h"
#include "quant/quantize.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::quant {
namespace {

int clamp_int(int v, int lo, int hi) {
  return std::min(std::max(v, lo), hi);
}

// 2-bit levels of 256 values into 64 bytes: per half of 128, byte l holds values l, l + 32,
// l + 64 and l + 96 of that half in bits 0-1, 2-3, 4-5 and 6-7 (Q2_K, and Q3_K's low bits).
void pack_2bit(const uint8_t* q, uint8_t* qs) {
  for (int half = 0; half < kQKK; half += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = q + half + l;
      qs[half / 4 + l] = static_cast<uint8_t>(v[0] | (v[32] << 2) | (v[64] << 4) | (v[96] << 6));
    }
  }
}

// Q4_K/Q5_K: eight 6-bit scales and eight 6-bit mins in 12 bytes. Sub-blocks 0-3 keep theirs
// in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low 4 bits
// in bytes 8-11 (scale low nibble, min high nibble) and their top 2 bits in the spare top bits
// of bytes 0-3 (scales) and 4-7 (mins).
void pack_scales_mins(const uint8_t* sc, const uint8_t* mn, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = sc[j];
    out[j + 4] = mn[j];
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((mn[j] & 0x0F) << 4));
    out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    out[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
  }
}

void unpack_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Shared by Q4_K and Q5_K: searched scale and min per sub-block of 32 (weights |x| + the
// sub-block's RMS), both quantized to 6 bits; levels in [0, top], re-rounded against the stored
// scales. Fills the block's d, dmin, scales and the 256 levels.
void fit_32x8_with_mins(const float* x, int top, float rmin, float rdelta, int nstep,
                        uint16_t* d_out, uint16_t* dmin_out, uint8_t* packed_scales,
                        uint8_t* levels) {
  float scales[8];
  float mins[8];
  float weights[32];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[j] =
        fit_with_min(32, top, xs, weights, levels + 32 * j, &mins[j], rmin, rdelta, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t sc[8];
  uint8_t mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(clamp_int(round_int(inv_scale * scales[j]), 0, 63));
    mn[j] = static_cast<uint8_t>(clamp_int(round_int(inv_min * mins[j]), 0, 63));
  }
  pack_scales_mins(sc, mn, packed_scales);
  *d_out = fp32_to_fp16(max_scale / 63.0f);
  *dmin_out = fp32_to_fp16(max_min / 63.0f);

  const float d = fp16_to_fp32(*d_out);
  const float dmin = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    int s = 0;
    int m = 0;
    unpack_scale_min(packed_scales, j, &s, &m);
    const float dl = d * s;
    if (dl == 0) continue;
    const float ml = dmin * m;
    for (int l = 0; l < 32; ++l) {
      levels[32 * j + l] =
          static_cast<uint8_t>(clamp_int(round_int((x[32 * j + l] + ml) / dl), 0, top));
    }
  }
}

}  // namespace

void quantize_q2_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ2_K*>(out);
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ2_K& y = blocks[b];
    float scales[16];
    float mins[16];
    float weights[16];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_with_min(16, 3, x + 16 * j, weights, levels + 16 * j, &mins[j], -0.5f, 0.1f,
                               15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // 4-bit scales (low nibble) and mins (high nibble) against d = max / 15.
    std::memset(y.scales, 0, sizeof(y.scales));
    y.d = fp32_to_fp16(0.0f);
    y.dmin = fp32_to_fp16(0.0f);
    if (max_scale > 0) {
      const float inv = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        y.scales[j] = static_cast<uint8_t>(clamp_int(round_int(inv * scales[j]), 0, 15));
      }
      y.d = fp32_to_fp16(max_scale / 15.0f);
    }
    if (max_min > 0) {
      const float inv = 15.0f / max_min;
      for (int j = 0; j < 16; ++j) {
        y.scales[j] |= static_cast<uint8_t>(clamp_int(round_int(inv * mins[j]), 0, 15) << 4);
      }
      y.dmin = fp32_to_fp16(max_min / 15.0f);
    }
    const float d = fp16_to_fp32(y.d);
    const float dmin = fp16_to_fp32(y.dmin);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * (y.scales[j] & 0x0F);
      if (dl == 0) continue;
      const float ml = dmin * (y.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        levels[16 * j + l] =
            static_cast<uint8_t>(clamp_int(round_int((x[16 * j + l] + ml) / dl), 0, 3));
      }
    }
    pack_2bit(levels, y.qs);
  }
}

void quantize_q3_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ3_K*>(out);
  int8_t fitted[kQKK];
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ3_K& y = blocks[b];
    float scales[16];
    float max_scale = 0;  // the scale of largest magnitude, signed
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric_refined(16, 4, x + 16 * j, fitted + 16 * j);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    // 6-bit signed scales (stored + 32): low 4 bits in bytes 0-7 (sub-blocks 0-7 low nibble,
    // 8-15 high nibble), top 2 bits in bytes 8-11 (sub-block j at bits 2 * (j / 4) of byte
    // 8 + j % 4).
    std::memset(y.scales, 0, sizeof(y.scales));
    y.d = fp32_to_fp16(0.0f);
    if (max_scale != 0) {
      const float inv = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = clamp_int(round_int(inv * scales[j]), -32, 31) + 32;
        if (j < 8) {
          y.scales[j] = static_cast<uint8_t>(l & 0x0F);
        } else {
          y.scales[j - 8] |= static_cast<uint8_t>((l & 0x0F) << 4);
        }
        y.scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y.d = fp32_to_fp16(1 / inv);
    }
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? y.scales[j] & 0x0F : y.scales[j - 8] >> 4;
      const int high = (y.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      const float dl = d * static_cast<float>((low | (high << 4)) - 32);
      if (dl == 0) {
        for (int l = 0; l < 16; ++l) levels[16 * j + l] = static_cast<uint8_t>(fitted[16 * j + l]);
        continue;
      }
      for (int l = 0; l < 16; ++l) {
        levels[16 * j + l] =
            static_cast<uint8_t>(clamp_int(round_int(x[16 * j + l] / dl), -4, 3) + 4);
      }
    }
    // The third bit of value i goes to bit i / 32 of hmask[i % 32]; the low two bits as Q2_K.
    std::memset(y.hmask, 0, sizeof(y.hmask));
    for (int i = 0; i < kQKK; ++i) {
      if (levels[i] > 3) {
        y.hmask[i % 32] |= static_cast<uint8_t>(1 << (i / 32));
        levels[i] = static_cast<uint8_t>(levels[i] - 4);
      }
    }
    pack_2bit(levels, y.qs);
  }
}

void quantize_q4_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(out);
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ4_K& y = blocks[b];
    fit_32x8_with_mins(x, 15, -1.0f, 0.1f, 20, &y.d, &y.dmin, y.scales, levels);
    // Per 64 values: the first 32 in the low nibbles of 32 bytes, the next 32 in the high.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y.qs[32 * c + l] =
            static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ5_K*>(out);
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ5_K& y = blocks[b];
    fit_32x8_with_mins(x, 31, -0.5f, 0.1f, 15, &y.d, &y.dmin, y.scales, levels);
    // Nibbles as Q4_K; the fifth bit of value 64c + l (l < 32) is bit 2c of qh[l], of value
    // 64c + 32 + l bit 2c + 1.
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int a = levels[64 * c + l];
        const int h = levels[64 * c + 32 + l];
        y.qs[32 * c + l] = static_cast<uint8_t>((a & 0x0F) | ((h & 0x0F) << 4));
        y.qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * c)) | ((h >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ6_K*>(out);
  int8_t fitted[kQKK];
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ6_K& y = blocks[b];
    float scales[16];
    float max_scale = 0;  // signed, largest magnitude
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(16, 32, x + 16 * j, fitted + 16 * j);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    if (std::fabs(max_scale) < kTinyGroup) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    // int8 scales against d = max / -128 (the largest lands on -128).
    const float inv = -128.0f / max_scale;
    y.d = fp32_to_fp16(1 / inv);
    for (int j = 0; j < 16; ++j)
      y.scales[j] = static_cast<int8_t>(std::min(127, round_int(inv * scales[j])));
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * y.scales[j];
      for (int l = 0; l < 16; ++l) {
        levels[16 * j + l] =
            dl == 0 ? static_cast<uint8_t>(fitted[16 * j + l])
                    : static_cast<uint8_t>(clamp_int(round_int(x[16 * j + l] / dl), -32, 31) + 32);
      }
    }
    // Per half of 128: ql[l] = values l (low nibble) and l + 64 (high), ql[l + 32] = values
    // l + 32 and l + 96; the top 2 bits of l, l + 32, l + 64, l + 96 in qh[l] bits 0-1 .. 6-7.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* v = levels + 128 * half;
      uint8_t* ql = y.ql + 64 * half;
      uint8_t* qh = y.qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((v[l] & 0x0F) | ((v[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0F) | ((v[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) |
                                     ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_iq4_xs(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockIQ4_XS*>(out);
  uint8_t levels[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockIQ4_XS& y = blocks[b];
    float scales[8];
    float max_scale = 0;  // signed, largest magnitude
    for (int j = 0; j < 8; ++j) {
      scales[j] = fit_iq4(32, x + 32 * j, 7);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    // 6-bit signed sub-block scales against d = max / -32, stored + 32: low 4 bits in
    // scales_l (two per byte), top 2 bits in scales_h (bits 2j, 2j + 1).
    const float d = -max_scale / 32;
    y.d = fp32_to_fp16(d);
    const float inv = d != 0 ? 1 / d : 0.0f;
    uint16_t high_bits = 0;
    std::memset(y.scales_l, 0, sizeof(y.scales_l));
    for (int j = 0; j < 8; ++j) {
      const int l = clamp_int(round_int(inv * scales[j]), -32, 31);
      const float dl = d * l;
      const float inv_dl = dl != 0 ? 1 / dl : 0.0f;
      for (int i = 0; i < 32; ++i)
        levels[32 * j + i] = static_cast<uint8_t>(nearest_iq4_level(inv_dl * x[32 * j + i]));
      const int stored = l + 32;
      y.scales_l[j / 2] |= static_cast<uint8_t>((stored & 0x0F) << (4 * (j % 2)));
      high_bits |= static_cast<uint16_t>((stored >> 4) << (2 * j));
    }
    y.scales_h = high_bits;
    // Per 32 values, as IQ4_NL: values i and i + 16 share a byte.
    for (int j = 0; j < 8; ++j) {
      for (int i = 0; i < 16; ++i) {
        y.qs[16 * j + i] =
            static_cast<uint8_t>(levels[32 * j + i] | (levels[32 * j + 16 + i] << 4));
      }
    }
  }
}

}  // namespace inferd::quant
