// Attention of query tokens over one sequence's paged KV cache, flash-style: scores are
// produced a block at a time with an online softmax, never as a full score matrix.
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_cache.h"

namespace inferd::kernels {

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;  // query head h reads kv head h / (n_heads / n_kv_heads) (GQA)
  int head_dim = 0;
  float scale = 0;  // usually 1 / sqrt(head_dim)
};

// out: [n_heads, head_dim] for one query at position `pos`, attending to positions
// [0, pos] (causal) of the sequence whose blocks are `block_table`.
void attend_one(const float* q, const kv::KvCache& cache, int layer,
                std::span<const int32_t> block_table, int64_t pos, const AttentionShape& shape,
                float* out);

}  // namespace inferd::kernels
