// KvCache: the K and V storage of every layer, in blocks of `block_size` token slots.
// A slot is block * block_size + offset. Per layer, block and kv head, keys are stored
// transposed, [dim][offset], so attention scores a whole block with one vector per dimension;
// values are [offset][dim].
#pragma once

#include <cstdint>
#include <memory>

#include "kv/block_pool.h"
#include "tensor/dtype.h"

namespace inferd::kv {

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int32_t num_blocks = 0;
  DType dtype = DType::F16;  // F16 or F32
};

class KvCache {
 public:
  static constexpr int kMaxHeadDim = 256;

  explicit KvCache(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int block_size() const { return config_.block_size; }
  int64_t bytes() const { return static_cast<int64_t>(2 * total_halves_) * 2; }

  // Stores one token's K and V ([n_kv_heads * head_dim] floats each) of `layer` at `slot`.
  void write(int layer, int64_t slot, const float* k, const float* v);

  // [head_dim, block_size] halves of one kv head in one block (transposed).
  const uint16_t* keys(int layer, int32_t block, int kv_head) const {
    return keys_.get() + offset(layer, block, kv_head);
  }
  // [block_size, head_dim] halves of one kv head in one block.
  const uint16_t* values(int layer, int32_t block, int kv_head) const {
    return values_.get() + offset(layer, block, kv_head);
  }

 private:
  size_t offset(int layer, int32_t block, int kv_head) const {
    return ((static_cast<size_t>(layer) * config_.num_blocks + static_cast<size_t>(block)) *
                config_.n_kv_heads +
            static_cast<size_t>(kv_head)) *
           block_stride_;
  }

  KvCacheConfig config_;
  BlockPool pool_;
  size_t block_stride_;  // block_size * head_dim halves
  // Zeroed storage from calloc: the pages are mapped lazily, so a large cache costs nothing
  // until its blocks are first written, and never-written slots read as 0.
  struct FreeDeleter {
    void operator()(uint16_t* p) const;
  };
  size_t total_halves_ = 0;
  std::unique_ptr<uint16_t[], FreeDeleter>
      keys_;  // [n_layers, num_blocks, n_kv_heads, head_dim, block_size] fp16
  std::unique_ptr<uint16_t[], FreeDeleter>
      values_;  // [n_layers, num_blocks, n_kv_heads, block_size, head_dim] fp16
};

}  // namespace inferd::kv
