// Scalar reference kernels: the block formats written out value by value. Block sums are
// taken in int32 and scaled once per block, as the SIMD versions do, so results agree
// to float rounding.
#include "kernels/ref/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::ref {

void quantize_row_q8_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv =
        amax != 0 ? 127.0f / amax : 0.0f;  // 127 / amax, not 1 / d: as llama.cpp rounds
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) blocks[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * inv));
  }
}

void quantize_row_q8_1(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv =
        amax != 0 ? 127.0f / amax : 0.0f;  // 127 / amax, not 1 / d: as llama.cpp rounds
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      blocks[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * inv));
      sum += blocks[b].qs[j];
    }
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void quantize_row_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void quantize_row_f32(const float* x, void* out, int64_t n) {
  std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
}

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      block_sum += ((wb[b].qs[j] & 0x0F) - 8) * ab[b].qs[j];
      block_sum += ((wb[b].qs[j] >> 4) - 8) * ab[b].qs[j + kQK / 2];
    }
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d);
  }
  return sum;
}

float dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      block_sum += (wb[b].qs[j] & 0x0F) * ab[b].qs[j];
      block_sum += (wb[b].qs[j] >> 4) * ab[b].qs[j + kQK / 2];
    }
    // sum_j (d_w q_j + m) d_a a_j = d_w d_a sum(q a) + m * (d_a sum(a)) = ... + m * s
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(ab[b].s);
  }
  return sum;
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int block_sum = 0;
    for (int j = 0; j < kQK; ++j) block_sum += wb[b].qs[j] * ab[b].qs[j];
    sum += static_cast<float>(block_sum) * fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d);
  }
  return sum;
}

float dot_f16_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;  // wide accumulator: the reference should not lose bits to the order
  for (int64_t i = 0; i < n; ++i) sum += double(fp16_to_fp32(x[i])) * fp16_to_fp32(y[i]);
  return static_cast<float>(sum);
}

float dot_bf16_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(bf16_to_fp32(x[i])) * bf16_to_fp32(y[i]);
  return static_cast<float>(sum);
}

float dot_f32_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * y[i];
  return static_cast<float>(sum);
}

void dequantize_row_q4_0(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>((blocks[b].qs[j] & 0x0F) - 8);
      out[j + kQK / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>(blocks[b].qs[j] & 0x0F) + m;
      out[j + kQK / 2] = d * static_cast<float>(blocks[b].qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q8_0(const void* row, float* out, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(row);
  for (int64_t b = 0; b < n / kQK; ++b, out += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(blocks[b].qs[j]);
  }
}

void dequantize_row_f16(const void* row, float* out, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const void* row, float* out, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(x[i]);
}

void dequantize_row_f32(const void* row, float* out, int64_t n) {
  std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_q4_0(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    // The value of largest magnitude maps to -8 so the full signed range is used.
    float max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
    }
    const float d = max / -8.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      auto lo = static_cast<uint8_t>(std::min(15.0f, std::floor(x[j] * inv + 8.5f)));
      auto hi = static_cast<uint8_t>(std::min(15.0f, std::floor(x[j + kQK / 2] * inv + 8.5f)));
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, void* out, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const auto [lo_it, hi_it] = std::minmax_element(x, x + kQK);
    const float min = *lo_it;
    const float d = (*hi_it - min) / 15.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      auto lo = static_cast<uint8_t>(std::min(15.0f, std::floor((x[j] - min) * inv + 0.5f)));
      auto hi =
          static_cast<uint8_t>(std::min(15.0f, std::floor((x[j + kQK / 2] - min) * inv + 0.5f)));
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      float acc = y[t][o];
      for (int64_t j = 0; j < rank; ++j) acc = std::fma(low[t * rank + j], bt[j * ldb + o], acc);
      y[t][o] = acc;
    }
  }
}

void silu_mul(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

void gelu_mul(float* a, const float* b, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCoef = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    const float u = kSqrt2OverPi * x * (1.0f + kCoef * x * x);
    a[i] = x / (1.0f + std::exp(-2.0f * u)) * b[i];  // exp overflows to inf: -0 for x << 0
  }
}

void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit);
    const float y = std::clamp(u[i], -limit, limit);
    g[i] = x / (1.0f + std::exp(alpha * -x)) * (y + 1.0f);
  }
}

void softcap(float* x, int64_t n, float in_scale, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * in_scale);
}

void mask_logits(const uint32_t* allowed, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (((allowed[i / 32] >> (i % 32)) & 1u) == 0) x[i] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace inferd::kernels::ref
