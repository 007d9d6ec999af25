// KvCache: the K and V storage of every layer, in blocks of `block_size` token slots.
// A slot is block * block_size + offset. Per layer, block and kv head, keys are stored
// transposed, [dim][offset], so attention scores a whole block with one vector per dimension;
// values are [offset][dim].
//
// Keys and values are each stored as F16 or Q8_0 (llama.cpp's --cache-type-k/-v). Q8_0 keeps
// int8 values with a scale per 32 dimensions of each token, quantized as llama.cpp's Q8_0
// blocks (d = amax / 127 rounded to fp16, q = round(x / d)) and laid out for attention: about
// half the bytes of F16. A decode step reads every sequence's whole KV, so with many sequences
// this is memory traffic saved.
#pragma once

#include <cstdint>
#include <memory>

#include "kv/block_pool.h"
#include "tensor/dtype.h"
#include "util/huge_pages.h"

namespace inferd::kv {

// Dimensions per Q8_0 scale.
constexpr int kQ8Group = 32;

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int32_t num_blocks = 0;
  DType key_type = DType::F16;    // F16 or Q8_0
  DType value_type = DType::F16;  // F16 or Q8_0
};

class KvCache {
 public:
  static constexpr int kMaxHeadDim = 256;

  explicit KvCache(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int block_size() const { return config_.block_size; }
  DType key_type() const { return config_.key_type; }
  DType value_type() const { return config_.value_type; }
  int64_t bytes() const { return static_cast<int64_t>(total_key_bytes_ + total_value_bytes_); }

  // Stores one token's K and V ([n_kv_heads * head_dim] floats each) of `layer` at `slot`.
  void write(int layer, int64_t slot, const float* k, const float* v);

  // The bytes of one kv head's keys (or values) in one block, whatever their type.
  const uint8_t* key_block(int layer, int32_t block, int kv_head) const {
    return keys_.data() + offset(layer, block, kv_head) * key_block_bytes_;
  }
  const uint8_t* value_block(int layer, int32_t block, int kv_head) const {
    return values_.data() + offset(layer, block, kv_head) * value_block_bytes_;
  }
  size_t key_block_bytes() const { return key_block_bytes_; }
  size_t value_block_bytes() const { return value_block_bytes_; }

  // F16 keys: [head_dim, block_size] halves of one kv head in one block (transposed).
  const uint16_t* keys(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const uint16_t*>(key_block(layer, block, kv_head));
  }
  // F16 values: [block_size, head_dim] halves of one kv head in one block.
  const uint16_t* values(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const uint16_t*>(value_block(layer, block, kv_head));
  }
  // Q8_0 keys: int8 [head_dim, block_size], then their scales [head_dim / 32, block_size].
  const int8_t* keys_q8(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const int8_t*>(key_block(layer, block, kv_head));
  }
  const float* key_scales(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const float*>(key_block(layer, block, kv_head) + q8_scales_offset());
  }
  // Q8_0 values: int8 [block_size, head_dim], then their scales [block_size, head_dim / 32].
  const int8_t* values_q8(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const int8_t*>(value_block(layer, block, kv_head));
  }
  const float* value_scales(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const float*>(value_block(layer, block, kv_head) + q8_scales_offset());
  }

 private:
  // Index of the (layer, block, kv head) record.
  size_t offset(int layer, int32_t block, int kv_head) const {
    return (static_cast<size_t>(layer) * config_.num_blocks + static_cast<size_t>(block)) *
               config_.n_kv_heads +
           static_cast<size_t>(kv_head);
  }
  size_t q8_scales_offset() const {
    return static_cast<size_t>(config_.block_size) * config_.head_dim;
  }
  size_t record_bytes(DType type) const;

  KvCacheConfig config_;
  BlockPool pool_;
  size_t key_block_bytes_ = 0, value_block_bytes_ = 0;  // one record, 64-byte multiples
  size_t total_key_bytes_ = 0, total_value_bytes_ = 0;
  // Zeroed huge-page mappings (util/huge_pages.h): the pages are committed lazily, so a large
  // cache costs nothing until its blocks are first written, and never-written slots read as 0.
  HugePageBuffer keys_;    // [n_layers, num_blocks, n_kv_heads] records
  HugePageBuffer values_;  // [n_layers, num_blocks, n_kv_heads] records
};

}  // namespace inferd::kv
