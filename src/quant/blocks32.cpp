// The 32-wide formats. Q4_0..Q5_1 and Q8_0 are plain roundings against the block's extremes
// (as llama-quantize makes them without an importance matrix); IQ4_NL searches its scale;
// MXFP4 takes a power-of-two scale from the block's largest magnitude.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fit.h"
#include "quant/quantize.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::quant {
namespace {

// The value of largest magnitude, with its sign (the first one on ties).
float signed_peak(const float* x) {
  float peak = 0;
  float mag = 0;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > mag) {
      mag = std::fabs(x[j]);
      peak = x[j];
    }
  }
  return peak;
}

// Levels of a symmetric format: the peak lands on level 0 (-half), the rest are rounded
// (x / d + half + 0.5, truncated) and capped at the top level.
void symmetric_levels(const float* x, int half, float* d_out, uint8_t* q) {
  const float d = signed_peak(x) / static_cast<float>(-half);
  const float inv = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const int v = static_cast<int>(x[j] * inv + (static_cast<float>(half) + 0.5f));
    q[j] = static_cast<uint8_t>(std::min(2 * half - 1, v));
  }
  *d_out = d;
}

// Levels of a format with a min: d = (max - min) / top, q = (x - min) / d rounded.
void offset_levels(const float* x, int top, float* d_out, float* min_out, uint8_t* q) {
  float lo = x[0];
  float hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / static_cast<float>(top);
  const float inv = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const int v = static_cast<int>((x[j] - lo) * inv + 0.5f);
    q[j] = static_cast<uint8_t>(std::min(top, v));
  }
  *d_out = d;
  *min_out = lo;
}

// Values j and j + 16 share byte j: low and high nibble.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kQK / 2] & 0x0F) << 4));
  }
}

// Bit j of the 32-bit word is the fifth bit of value j.
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kQK; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, sizeof(bits));
}

}  // namespace

void quantize_q4_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float d = 0;
    symmetric_levels(x, 8, &d, q);
    blocks[b].d = fp32_to_fp16(d);
    pack_nibbles(q, blocks[b].qs);
  }
}

void quantize_q4_1(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float d = 0;
    float lo = 0;
    offset_levels(x, 15, &d, &lo, q);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(lo);
    pack_nibbles(q, blocks[b].qs);
  }
}

void quantize_q5_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float d = 0;
    symmetric_levels(x, 16, &d, q);
    blocks[b].d = fp32_to_fp16(d);
    pack_fifth_bits(q, blocks[b].qh);
    pack_nibbles(q, blocks[b].qs);
  }
}

void quantize_q5_1(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float d = 0;
    float lo = 0;
    offset_levels(x, 31, &d, &lo, q);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(lo);
    pack_fifth_bits(q, blocks[b].qh);
    pack_nibbles(q, blocks[b].qs);
  }
}

void quantize_q8_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    // Halves round away from zero here (roundf), as llama-quantize writes Q8_0.
    for (int j = 0; j < kQK; ++j) blocks[b].qs[j] = static_cast<int8_t>(std::round(x[j] * inv));
  }
}

void quantize_iq4_nl(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockIQ4_NL*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float d = fit_iq4(kQK, x, 7);
    blocks[b].d = fp32_to_fp16(d);
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(nearest_iq4_level(inv * x[j]));
    pack_nibbles(q, blocks[b].qs);
  }
}

namespace {

// The E8M0 exponent of an MXFP4 block whose largest magnitude is amax: floor(log2(amax)) - 2 +
// 127, with float's log2 as ggml takes it (just below a power of two log2f rounds up to it, and
// the exponent with it: the same bytes need the same rounding), so that amax falls in [8, 16)
// half-scales (12 the largest level); 0 for an all-zero block. Below amax = 2^-125 the value is
// negative and ggml's cast to uint8_t is out of range: x86 builds wrap it through a 32-bit
// integer, and so does this.
uint8_t mxfp4_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  return static_cast<uint8_t>(static_cast<int32_t>(e));
}

// The first of the 16 levels nearest to x at half scale d (ties go to the lower index: +0 before
// -0, 1 before 2, -1 before -2).
uint8_t nearest_mxfp4_level(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

void quantize_mxfp4(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockMXFP4*>(out);
  uint8_t q[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    blocks[b].e = mxfp4_exponent(amax);
    const float d = e8m0_to_fp32_half(blocks[b].e);
    for (int j = 0; j < kQK; ++j) q[j] = nearest_mxfp4_level(x[j], d);
    pack_nibbles(q, blocks[b].qs);
  }
}

}  // namespace inferd::quant
