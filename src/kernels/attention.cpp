#include "kernels/attention.h"

#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "tensor/half.h"

namespace inferd::kernels {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlockSize = 256;

// One head: online softmax over the blocks, accumulating sum_j p_j v_j in float.
void attend_head(const float* q, const kv::KvCache& cache, int layer,
                 std::span<const int32_t> block_table, int64_t pos, int kv_head, int head_dim,
                 float scale, float* out, const KernelTable& k) {
  // Queries are rounded to f16 like the keys, as llama.cpp does before its f16 dot products.
  float q16[kMaxHeadDim];
  for (int d = 0; d < head_dim; ++d) q16[d] = fp16_to_fp32(fp32_to_fp16(q[d]));
  float acc[kMaxHeadDim] = {};
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0;
  const int block_size = cache.block_size();
  const int64_t n_keys = pos + 1;
  float scores[kMaxBlockSize];
  for (int64_t start = 0, b = 0; start < n_keys; start += block_size, ++b) {
    const int count = static_cast<int>(std::min<int64_t>(block_size, n_keys - start));
    const uint16_t* keys = cache.keys(layer, block_table[static_cast<size_t>(b)], kv_head);
    const uint16_t* values = cache.values(layer, block_table[static_cast<size_t>(b)], kv_head);
    float block_max = running_max;
    for (int j = 0; j < count; ++j) {
      scores[j] = k.dot_f16_f32(head_dim, keys + static_cast<size_t>(j) * head_dim, q16) * scale;
      block_max = std::max(block_max, scores[j]);
    }
    const float correction = std::exp(running_max - block_max);
    running_sum *= correction;
    for (int d = 0; d < head_dim; ++d) acc[d] *= correction;
    for (int j = 0; j < count; ++j) {
      const float p = std::exp(scores[j] - block_max);
      running_sum += p;
      k.axpy_f16(head_dim, p, values + static_cast<size_t>(j) * head_dim, acc);
    }
    running_max = block_max;
  }
  const float inv = 1.0f / running_sum;
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace

void attend_one(const float* q, const kv::KvCache& cache, int layer,
                std::span<const int32_t> block_table, int64_t pos, const AttentionShape& shape,
                float* out) {
  const int group = shape.n_heads / shape.n_kv_heads;
  const KernelTable& table = active_kernels();
  for (int h = 0; h < shape.n_heads; ++h) {
    attend_head(q + static_cast<int64_t>(h) * shape.head_dim, cache, layer, block_table, pos,
                h / group, shape.head_dim, shape.scale,
                out + static_cast<int64_t>(h) * shape.head_dim, table);
  }
}

}  // namespace inferd::kernels
