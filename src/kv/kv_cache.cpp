#include "kv/kv_cache.h"

#include <cstdlib>

#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::kv {

void KvCache::FreeDeleter::operator()(uint16_t* p) const {
  std::free(p);
}

KvCache::KvCache(const KvCacheConfig& config)
    : config_(config),
      pool_(config.num_blocks),
      block_stride_(static_cast<size_t>(config.block_size) * static_cast<size_t>(config.head_dim)) {
  if (config.dtype != DType::F16) fail("KV cache: only F16 storage is implemented");
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 ||
      config.head_dim > kMaxHeadDim || config.block_size <= 0) {
    fail("KV cache: invalid shape (layers {}, kv heads {}, head dim {}, block size {})",
         config.n_layers, config.n_kv_heads, config.head_dim, config.block_size);
  }
  size_t total = static_cast<size_t>(config.n_layers) * static_cast<size_t>(config.num_blocks) *
                 static_cast<size_t>(config.n_kv_heads) * block_stride_;
  total_halves_ = total;
  keys_.reset(static_cast<uint16_t*>(std::calloc(total, sizeof(uint16_t))));
  values_.reset(static_cast<uint16_t*>(std::calloc(total, sizeof(uint16_t))));
  if (!keys_ || !values_) {
    fail("KV cache: cannot allocate {} MiB for {} blocks", 4 * total / (1 << 20),
         config.num_blocks);
  }
}

void KvCache::write(int layer, int64_t slot, const float* k, const float* v) {
  const auto block = static_cast<int32_t>(slot / config_.block_size);
  const auto pos = static_cast<size_t>(slot % config_.block_size);
  // The table's fp16 conversion (F16C where the CPU has it); keys go through a buffer to be
  // stored transposed.
  const kernels::QuantizeRowFn to_fp16 = kernels::active_kernels().f16.quantize_activation;
  uint16_t key_halves[kMaxHeadDim];
  for (int h = 0; h < config_.n_kv_heads; ++h) {
    uint16_t* kd = keys_.get() + offset(layer, block, h) + pos;
    uint16_t* vd = values_.get() + offset(layer, block, h) + pos * config_.head_dim;
    const float* ks = k + static_cast<size_t>(h) * config_.head_dim;
    const float* vs = v + static_cast<size_t>(h) * config_.head_dim;
    to_fp16(vs, vd, config_.head_dim);
    to_fp16(ks, key_halves, config_.head_dim);
    for (int d = 0; d < config_.head_dim; ++d)
      kd[static_cast<size_t>(d) * config_.block_size] = key_halves[d];
  }
}

}  // namespace inferd::kv
