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

}  // namespace

AttentionKernels attention_kernels() {
  return {scores, accumulate, exp_sum, scale_max, round_to_fp16};
}

}  // namespace inferd::kernels::ref
