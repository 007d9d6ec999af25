#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>

#include "tensor/half.h"

namespace inferd::kernels::ref {
namespace {

void scores(const uint16_t* keys_t, int block_size, int head_dim, const float* q, int n_rows,
            float* s, int s_stride) {
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < block_size; ++j) {
      float acc = 0;
      for (int d = 0; d < head_dim; ++d)
        acc += q[r * head_dim + d] * fp16_to_fp32(keys_t[d * block_size + j]);
      s[r * s_stride + j] = acc;
    }
  }
}

void accumulate(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                int n_rows, float* acc) {
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < n_keys; ++j) {
      const float pj = p[r * p_stride + j];
      for (int d = 0; d < head_dim; ++d)
        acc[r * head_dim + d] += pj * fp16_to_fp32(values[j * head_dim + d]);
    }
  }
}

void accumulate_blocks(const uint16_t* const* blocks, int block_size, int n_keys, int head_dim,
                       const float* p, int p_stride, int n_rows, float* acc) {
  for (int i = 0, j0 = 0; j0 < n_keys; ++i, j0 += block_size) {
    accumulate(blocks[i], std::min(block_size, n_keys - j0), head_dim, p + j0, p_stride, n_rows,
               acc);
  }
}

float exp_sum(float* x, int n, float max) {
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  return sum;
}

float scale_max(float* x, int n, float scale, float max) {
  for (int i = 0; i < n; ++i) {
    x[i] *= scale;
    max = std::max(max, x[i]);
  }
  return max;
}

void round_to_fp16(float* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

// Q8_0 KV: a dot product per group of 32 dimensions, scaled by that group's scale.
constexpr int kGroup = 32;

void scores_q8(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < block_size; ++j) {
      float acc = 0;
      for (int g = 0; g < head_dim / kGroup; ++g) {
        float part = 0;
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
          part += q[r * head_dim + d] * static_cast<float>(keys_t[d * block_size + j]);
        acc += part * scales[g * block_size + j];
      }
      s[r * s_stride + j] = acc;
    }
  }
}

void accumulate_q8(const int8_t* values, const float* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  const int groups = head_dim / kGroup;
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < n_keys; ++j) {
      for (int g = 0; g < groups; ++g) {
        const float w = p[r * p_stride + j] * scales[j * groups + g];
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
          acc[r * head_dim + d] += w * static_cast<float>(values[j * head_dim + d]);
      }
    }
  }
}

// Q4_0 KV: as Q8_0, each stored nibble standing for nibble - 8 (its fp16 scale as a float).
void scores_q4(const uint8_t* keys_t, const uint16_t* scales, int block_size, int head_dim,
               const float* q, int n_rows, float* s, int s_stride) {
  // Dimension d of key j: row d / 2 of the transposed bytes, low nibble for even d.
  const auto key = [&](int d, int j) {
    const uint8_t byte = keys_t[d / 2 * block_size + j];
    return static_cast<float>((d % 2 == 0 ? byte & 0x0F : byte >> 4) - 8);
  };
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < block_size; ++j) {
      float acc = 0;
      for (int g = 0; g < head_dim / kGroup; ++g) {
        float part = 0;
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) part += q[r * head_dim + d] * key(d, j);
        acc += part * fp16_to_fp32(scales[g * block_size + j]);
      }
      s[r * s_stride + j] = acc;
    }
  }
}

void accumulate_q4(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                   const float* p, int p_stride, int n_rows, float* acc) {
  const int groups = head_dim / kGroup;
  // Dimension d of value j: a Q4_0 block's byte d % 16 of its group, low nibble for the first 16.
  const auto value = [&](int j, int d) {
    const uint8_t byte = values[j * head_dim / 2 + d / kGroup * (kGroup / 2) + d % (kGroup / 2)];
    return static_cast<float>((d % kGroup < kGroup / 2 ? byte & 0x0F : byte >> 4) - 8);
  };
  for (int r = 0; r < n_rows; ++r) {
    for (int j = 0; j < n_keys; ++j) {
      for (int g = 0; g < groups; ++g) {
        const float w = p[r * p_stride + j] * fp16_to_fp32(scales[j * groups + g]);
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
          acc[r * head_dim + d] += w * value(j, d);
      }
    }
  }
}

}  // namespace

AttentionKernels attention_kernels() {
  return {scores,    accumulate,    exp_sum,   scale_max,     round_to_fp16,
          scores_q8, accumulate_q8, scores_q4, accumulate_q4, accumulate_blocks};
}

}  // namespace inferd::kernels::ref
