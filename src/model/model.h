// Model: one architecture's forward pass over a Batch and the KV cache. Architectures live
// in model/archs/<arch>.cpp and are found by name through the registry (model/registry.h).
#pragma once

#include <cstdint>
#include <memory>

#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/config.h"
#include "util/thread_pool.h"

namespace inferd::model {

struct ModelOptions {
  int64_t max_batch_tokens = 512;  // work buffers are sized for this many tokens per forward
  int64_t max_context = 0;         // 0: the model's trained context
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs the batch through the model, writing its K/V into `cache` at the blocks of the
  // sequences' tables, and fills logits: [batch.logit_rows.size(), n_vocab]. Does not allocate.
  virtual void forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool) = 0;
  // A KV cache shape that fits this model, its sliding-window layers in a group of their own
  // with as many blocks as the full-attention group (callers may give it fewer).
  kv::KvCacheConfig kv_config(int32_t num_blocks, int block_size = 16, DType key_type = DType::F16,
                              DType value_type = DType::F16) const {
    const ModelConfig& c = config();
    return {c.n_layers, c.n_kv_heads, c.head_dim,       block_size,       num_blocks,
            key_type,   value_type,   c.sliding_layers, c.sliding_window, num_blocks};
  }
};

}  // namespace inferd::model
