#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "kernels/kernels.h"
#include "kernels/ref/quant_ref.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "util/error.h"

namespace inferd::kv {
namespace {

// One token's head_dim values in Q8_0 blocks (the table's quantizer, SIMD where the CPU has it:
// d = amax / 127 kept as fp16, q = round(x / d), as llama.cpp's Q8_0), spread into the cache's
// layout: value i to q[i * q_stride], the scale of block g (as a float) to scales[g *
// scale_stride].
void quantize_q8(const float* x, int head_dim, int8_t* q, size_t q_stride, float* scales,
                 size_t scale_stride) {
  BlockQ8_0 blocks[KvCache::kMaxHeadDim / kQ8Group];
  kernels::active_kernels().q8_0.quantize_activation(x, blocks, head_dim);
  for (int g = 0; g < head_dim / kQ8Group; ++g) {
    for (int i = 0; i < kQ8Group; ++i)
      q[static_cast<size_t>(g * kQ8Group + i) * q_stride] = blocks[g].qs[i];
    scales[static_cast<size_t>(g) * scale_stride] = fp16_to_fp32(blocks[g].d);
  }
}

// One token's head_dim values in Q4_0 blocks (the reference quantizer: a token's few hundred
// values a layer cost little beside attention over the whole sequence), their fp16 scales to
// scales[g * scale_stride].
void quantize_q4(const float* x, int head_dim, BlockQ4_0* blocks, uint16_t* scales,
                 size_t scale_stride) {
  kernels::ref::quantize_row_q4_0(x, blocks, head_dim);
  for (int g = 0; g < head_dim / kQ8Group; ++g)
    scales[static_cast<size_t>(g) * scale_stride] = blocks[g].d;
}

// A value's Q4_0 blocks keep their nibbles as they are: [head_dim / 2] bytes.
void store_q4_value(const float* x, int head_dim, uint8_t* q, uint16_t* scales) {
  BlockQ4_0 blocks[KvCache::kMaxHeadDim / kQ8Group];
  quantize_q4(x, head_dim, blocks, scales, 1);
  for (int g = 0; g < head_dim / kQ8Group; ++g)
    std::memcpy(q + g * kQ8Group / 2, blocks[g].qs, kQ8Group / 2);
}

// A key's nibbles go to column `pos` of the transposed [head_dim / 2, block_size] bytes: row i
// holds dimensions 2i (low nibble) and 2i + 1 (high), so a kernel reads a key's two dimensions,
// and 16 keys' with one load.
void store_q4_key(const float* x, int head_dim, uint8_t* q, size_t block_size, uint16_t* scales) {
  BlockQ4_0 blocks[KvCache::kMaxHeadDim / kQ8Group];
  quantize_q4(x, head_dim, blocks, scales, block_size);
  constexpr int kHalf = kQ8Group / 2;  // a Q4_0 block: dimension i in qs[i]'s low nibble,
                                       // i + 16 in its high
  const auto nibble = [&](int d) {
    const uint8_t byte = blocks[d / kQ8Group].qs[d % kHalf];
    return d % kQ8Group < kHalf ? byte & 0x0F : byte >> 4;
  };
  for (int d = 0; d < head_dim; d += 2)
    q[static_cast<size_t>(d / 2) * block_size] =
        static_cast<uint8_t>(nibble(d) | nibble(d + 1) << 4);
}

// The rotations (hadamard_rotate widths, 0: none) of a type's keys and values at a head size:
// llama.cpp's, which rotates every quantized cache type (Q8_0 as well as Q4_0) whose head size is
// a multiple of 64, so that a Q8_0 or Q4_0 cache here holds what llama.cpp's holds.
bool rotated(DType type, int head_dim) {
  return type != DType::F16 && head_dim % 64 == 0;
}
int key_rotation_for(DType type, int head_dim) {
  return rotated(type, head_dim) ? head_dim & -head_dim : 0;  // the largest power of two dividing it
}
int value_rotation_for(DType type, int head_dim) {
  return rotated(type, head_dim) ? 64 : 0;
}

}  // namespace

void hadamard_rotate(float* x, int n, int width) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(width));
  for (int start = 0; start < n; start += width) {
    float* v = x + start;
    for (int h = 1; h < width; h *= 2) {  // butterflies of the fast transform
      for (int i = 0; i < width; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
      }
    }
    for (int i = 0; i < width; ++i) v[i] *= norm;
  }
}

bool grow_tables(std::span<KvGroup> groups, BlockTables& tables, int64_t blocks) {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (blocks - std::ssize(tables[g]) > groups[g].pool.num_free()) return false;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    while (std::ssize(tables[g]) < blocks) tables[g].push_back(*groups[g].pool.allocate());
  }
  return true;
}

void release_blocks(std::span<KvGroup> groups, BlockTables& tables) {
  // Last block first: the free list hands out the blocks freed longest ago, so a sequence's
  // tail (the part least likely to be shared) is reused before its prefix.
  for (size_t g = 0; g < groups.size(); ++g) {
    for (auto it = tables[g].rbegin(); it != tables[g].rend(); ++it) {
      if (*it != kNoBlock) groups[g].pool.release(*it);
    }
  }
  for (std::vector<int32_t>& table : tables) table.clear();
}

size_t KvCache::record_bytes(DType type, int head_dim) const {
  const size_t values = static_cast<size_t>(config_.block_size) * static_cast<size_t>(head_dim);
  size_t bytes = values * sizeof(uint16_t);  // F16
  if (type == DType::Q8_0) bytes = values + values / kQ8Group * sizeof(float);
  if (type == DType::Q4_0) bytes = values / 2 + values / kQ8Group * sizeof(uint16_t);
  return (bytes + 63) / 64 * 64;  // records start on cache lines
}

KvCache::KvCache(const KvCacheConfig& config) : config_(config) {
  for (const DType type : {config.key_type, config.value_type}) {
    if (type != DType::F16 && type != DType::Q8_0 && type != DType::Q4_0) {
      fail("KV cache: type {} is not supported (f16, q8_0 or q4_0)", dtype_name(type));
    }
  }
  const int sliding_heads = config.sliding_n_kv_heads > 0 ? config.sliding_n_kv_heads : config.n_kv_heads;
  const int sliding_dim = config.sliding_head_dim > 0 ? config.sliding_head_dim : config.head_dim;
  const int value_dim = config.value_head_dim > 0 ? config.value_head_dim : config.head_dim;
  for (const auto& [heads, dim, type] : {std::tuple{config.n_kv_heads, config.head_dim, config.key_type},
                                         std::tuple{config.n_kv_heads, value_dim, config.value_type},
                                         std::tuple{sliding_heads, sliding_dim, config.key_type},
                                         std::tuple{sliding_heads, sliding_dim, config.value_type}}) {
    if (config.n_layers <= 0 || heads <= 0 || dim <= 0 || dim > kMaxHeadDim ||
        config.block_size <= 0) {
      fail("KV cache: invalid shape (layers {}, kv heads {}, head dim {}, block size {})",
           config.n_layers, heads, dim, config.block_size);
    }
    if (type != DType::F16 && dim % kQ8Group != 0) {
      fail(
          "KV cache: type {} (-ctk/-ctv) needs a head size that is a multiple of {}, this "
          "model's is {}",
          dtype_name(type), kQ8Group, dim);
    }
  }
  const bool stateless_flags = !config.stateless_layers.empty();
  if (stateless_flags && std::ssize(config.stateless_layers) != config.n_layers)
    fail("KV cache: {} stateless-layer flags for {} layers", config.stateless_layers.size(),
         config.n_layers);
  const auto stateless = [&](int l) { return stateless_flags && config.stateless_layers[size_t(l)]; };
  const bool flagged = !config.sliding_layers.empty();
  if (flagged && std::ssize(config.sliding_layers) != config.n_layers)
    fail("KV cache: {} sliding-window flags for {} layers", config.sliding_layers.size(),
         config.n_layers);
  if (flagged && config.sliding_window <= 0)
    fail("KV cache: sliding layers need a positive window, got {}", config.sliding_window);
  // Group 0 holds the full-attention layers, group 1 the sliding ones; a kind without layers
  // has no group (then group 0 is the sliding one).
  const auto slides = [&](int l) { return flagged && config.sliding_layers[size_t(l)]; };
  int group_of_kind[2] = {-1, -1};  // [slides]
  groups_.reserve(kMaxKvGroups);
  for (const bool sliding : {false, true}) {
    for (int l = 0; l < config.n_layers; ++l) {
      if (stateless(l) || slides(l) != sliding) continue;
      const int32_t blocks =
          sliding && config.num_sliding_blocks > 0 ? config.num_sliding_blocks : config.num_blocks;
      group_of_kind[sliding] = static_cast<int>(groups_.size());
      Geometry& geometry = geometry_[groups_.size()];
      geometry.n_kv_heads = sliding ? sliding_heads : config.n_kv_heads;
      geometry.head_dim = sliding ? sliding_dim : config.head_dim;
      geometry.value_dim = sliding ? sliding_dim : value_dim;
      geometry.key_bytes = record_bytes(config.key_type, geometry.head_dim);
      geometry.value_bytes = record_bytes(config.value_type, geometry.value_dim);
      geometry.key_rotation = key_rotation_for(config.key_type, geometry.head_dim);
      geometry.value_rotation = value_rotation_for(config.value_type, geometry.value_dim);
      groups_.emplace_back(blocks, sliding && !config.sliding_keeps_all ? config.sliding_window : 0);
      break;
    }
  }
  if (!config.remote_layers.empty() && std::ssize(config.remote_layers) != config.n_layers)
    fail("KV cache: {} remote-layer flags for {} layers", config.remote_layers.size(),
         config.n_layers);
  const auto remote = [&](int l) { return !config.remote_layers.empty() && config.remote_layers[size_t(l)]; };
  for (int l = 0; l < config.n_layers; ++l) {
    const int g = stateless(l) ? -1 : group_of_kind[slides(l)];
    layer_group_.push_back(g);
    layer_index_.push_back(g < 0 || remote(l) ? -1 : groups_[static_cast<size_t>(g)].n_layers++);
  }
  if (groups_.empty()) fail("KV cache: every layer is stateless; a hybrid model needs attention layers");
  if (config.exact_recent_tokens < 0)
    fail("KV cache: {} exact recent tokens", config.exact_recent_tokens);
  const bool exact = config.keeps_exact_copies();
  if (config.state_floats < 0 || config.num_state_slots < 0 ||
      (config.state_floats > 0 && config.num_state_slots == 0) ||
      (config.num_state_slots > 0 && config.state_floats == 0 && !exact))
    fail("KV cache: {} recurrent state slots of {} floats", config.num_state_slots,
         config.state_floats);
  if (config.num_snapshot_slots < 0 ||
      (config.num_snapshot_slots > 0 && config.state_floats == 0 && !exact))
    fail("KV cache: {} state snapshots without a recurrent state or exact copies",
         config.num_snapshot_slots);
  if (exact && config.num_state_slots > 0) {
    // The query's own block and enough before it that at least exact_recent_tokens keys
    // precede the query in copies.
    exact_window_blocks_ =
        (config.exact_recent_tokens + config.block_size - 1) / config.block_size + 1;
    allocate_exact_copies();
  }
  if (config.num_state_slots > 0) {
    state_pool_.emplace(config.num_state_slots);
    if (config.num_snapshot_slots > 0) snapshot_pool_.emplace(config.num_snapshot_slots);
    try {
      if (config.state_floats > 0)
        state_ = state_memory_.allocate_array<float>(static_cast<size_t>(config.state_floats) *
                                                     static_cast<size_t>(config.num_state_slots));
      if (config.state_floats > 0 && config.num_snapshot_slots > 0)
        snapshots_ = state_memory_.allocate_array<float>(
            static_cast<size_t>(config.state_floats) * static_cast<size_t>(config.num_snapshot_slots));
    } catch (const Error&) {
      fail("KV cache: cannot allocate {} MiB for {} recurrent state slots", state_bytes() >> 20,
           config.num_state_slots);
    }
    state_memory_.prefault();
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    KvGroup& group = groups_[g];
    const Geometry& geometry = geometry_[g];
    const auto heads = static_cast<size_t>(geometry.n_kv_heads);
    group.block_bytes = static_cast<size_t>(group.n_layers) * heads *
                        (geometry.key_bytes + geometry.value_bytes);
    const size_t records =
        static_cast<size_t>(group.n_layers) * static_cast<size_t>(group.pool.num_blocks()) * heads;
    if (!config.host_storage) continue;
    try {
      storage_[g].keys = HugePageBuffer(records * geometry.key_bytes);
      storage_[g].values = HugePageBuffer(records * geometry.value_bytes);
      // Faulted in now, as llama.cpp clears its whole KV buffer at start: a sequence's blocks
      // lie in every layer's plane, so a first request touched a fresh (huge) page per layer
      // and block, and paid for zeroing them inside its TTFT (about 5x slower on a 135M model).
      storage_[g].keys.prefault();
      storage_[g].values.prefault();
    } catch (const Error&) {
      fail("KV cache: cannot allocate {} MiB for {} blocks",
           (records * (geometry.key_bytes + geometry.value_bytes)) >> 20, group.pool.num_blocks());
    }
  }
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const KvGroup& g : groups_) total += int64_t{g.pool.num_blocks()} * int64_t(g.block_bytes);
  return total;
}

int64_t KvCache::used_bytes() const {
  int64_t total = 0;
  for (const KvGroup& g : groups_) total += int64_t{g.pool.num_used()} * int64_t(g.block_bytes);
  return total;
}

int32_t KvCache::used_blocks() const {
  int32_t total = 0;
  for (const KvGroup& g : groups_) total += g.pool.num_used();
  return total;
}

double KvCache::bytes_read_at(double context) const {
  double total = 0;
  for (const KvGroup& g : groups_) {
    const double keys = g.window > 0 ? std::min(context, double(g.window)) : context;
    total += keys * double(g.block_bytes) / config_.block_size;
  }
  return total;
}

BlockTables KvCache::allocate_sequence(int64_t n_positions) {
  BlockTables tables;
  const int64_t blocks = (n_positions + config_.block_size - 1) / config_.block_size;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (blocks > groups_[g].pool.num_free()) {
      release(tables);
      fail("KV cache: {} positions need {} blocks, {} are free", n_positions, blocks,
           groups_[g].pool.num_free());
    }
    for (int64_t b = 0; b < blocks; ++b) tables[g].push_back(*groups_[g].pool.allocate());
  }
  return tables;
}

void KvCache::check_state_slot(int32_t slot) const {
  if (!state_pool_ || slot < 0 || slot >= config_.num_state_slots)
    fail("KV cache: no recurrent state slot {} ({} slots)", slot, config_.num_state_slots);
}

void KvCache::allocate_exact_copies() {
  const auto entries = static_cast<size_t>(exact_entries());
  const auto half = sizeof(uint16_t);
  exact_layer_offset_.assign(static_cast<size_t>(config_.n_layers), SIZE_MAX);
  for (int l = 0; l < config_.n_layers; ++l) {
    if (group_of(l) < 0 || layer_index_[static_cast<size_t>(l)] < 0) continue;  // no K/V here
    exact_layer_offset_[static_cast<size_t>(l)] = exact_slot_bytes_;
    exact_slot_bytes_ += entries * (exact_block_halves(l, false) + exact_block_halves(l, true)) * half;
  }
  const auto slots = static_cast<size_t>(config_.num_state_slots + config_.num_snapshot_slots);
  exact_tags_.assign(slots * exact_tags_per_slot(), -1);
  try {
    exact_storage_ = HugePageBuffer(std::max<size_t>(1, slots * exact_slot_bytes_));
    exact_storage_.prefault();  // read and written by every step of every sequence
  } catch (const Error&) {
    fail("KV cache: cannot allocate {} MiB of exact copies for {} sequences",
         (slots * exact_slot_bytes_) >> 20, slots);
  }
}

uint16_t* KvCache::exact_layer(int32_t slot, int layer) const {
  const size_t at = exact_layer_offset_[static_cast<size_t>(layer)];
  if (at == SIZE_MAX) return nullptr;
  return reinterpret_cast<uint16_t*>(exact_storage_.data() +
                                     static_cast<size_t>(slot) * exact_slot_bytes_ + at);
}

uint16_t* KvCache::exact_keys(int32_t slot, int layer, int entry) const {
  uint16_t* keys = exact_layer(slot, layer);
  return keys == nullptr ? nullptr : keys + static_cast<size_t>(entry) * exact_block_halves(layer, false);
}

uint16_t* KvCache::exact_values(int32_t slot, int layer, int entry) const {
  uint16_t* keys = exact_layer(slot, layer);
  if (keys == nullptr) return nullptr;
  const auto entries = static_cast<size_t>(exact_entries());
  return keys + entries * exact_block_halves(layer, false) +
         static_cast<size_t>(entry) * exact_block_halves(layer, true);
}

void KvCache::store_exact(int layer, const float* k, const float* v, uint16_t* keys,
                          uint16_t* values, int offset) const {
  const Geometry& geo = geometry(layer);
  const int dim = geo.head_dim, vdim = geo.value_dim;
  const auto block_size = static_cast<size_t>(config_.block_size);
  const kernels::QuantizeRowFn to_fp16 = kernels::active_kernels().f16.quantize_activation;
  float rotated[kMaxHeadDim];
  uint16_t halves[kMaxHeadDim];
  for (int h = 0; h < geo.n_kv_heads; ++h) {
    std::copy_n(k + static_cast<size_t>(h) * static_cast<size_t>(dim), dim, rotated);
    if (geo.key_rotation > 0) hadamard_rotate(rotated, dim, geo.key_rotation);
    to_fp16(rotated, halves, dim);
    uint16_t* kd = keys + static_cast<size_t>(h) * exact_key_stride(layer) + static_cast<size_t>(offset);
    for (size_t d = 0; d < static_cast<size_t>(dim); ++d) kd[d * block_size] = halves[d];
    std::copy_n(v + static_cast<size_t>(h) * static_cast<size_t>(vdim), vdim, rotated);
    if (geo.value_rotation > 0) hadamard_rotate(rotated, vdim, geo.value_rotation);
    to_fp16(rotated, values + static_cast<size_t>(h) * exact_value_stride(layer) +
                         static_cast<size_t>(offset) * static_cast<size_t>(vdim), vdim);
  }
}

void KvCache::copy_exact(int32_t from, int32_t to) {
  if (!has_exact_copies()) return;
  std::memcpy(exact_storage_.data() + static_cast<size_t>(to) * exact_slot_bytes_,
              exact_storage_.data() + static_cast<size_t>(from) * exact_slot_bytes_,
              exact_slot_bytes_);
  std::copy_n(exact_tags_.begin() + static_cast<ptrdiff_t>(exact_tag_index(from, 0, 0)),
              exact_tags_per_slot(),
              exact_tags_.begin() + static_cast<ptrdiff_t>(exact_tag_index(to, 0, 0)));
}

void KvCache::copy_state(int32_t from, int32_t to) {
  if (from == kNoSlot) {  // a fresh sequence: no copies yet
    check_state_slot(to);
    if (!has_exact_copies()) return;
    std::fill_n(exact_tags_.begin() + static_cast<ptrdiff_t>(exact_tag_index(to, 0, 0)),
                exact_tags_per_slot(), -1);
    return;
  }
  check_state_slot(from);
  check_state_slot(to);
  if (config_.state_floats > 0) std::copy_n(state(from), config_.state_floats, state(to));
  copy_exact(from, to);
}

float* KvCache::snapshot(int32_t slot) {
  if (!snapshot_pool_ || slot < 0 || slot >= config_.num_snapshot_slots)
    fail("KV cache: no state snapshot slot {} ({} slots)", slot, config_.num_snapshot_slots);
  return snapshots_.data() + static_cast<size_t>(slot) * static_cast<size_t>(config_.state_floats);
}

void KvCache::save_snapshot(int32_t state_slot, int32_t snapshot_slot) {
  const float* source = state(state_slot);
  float* target = snapshot(snapshot_slot);
  if (config_.state_floats > 0) std::copy_n(source, config_.state_floats, target);
  copy_exact(state_slot, config_.num_state_slots + snapshot_slot);
}

void KvCache::load_snapshot(int32_t snapshot_slot, int32_t state_slot) {
  const float* source = snapshot(snapshot_slot);
  float* target = state(state_slot);
  if (config_.state_floats > 0) std::copy_n(source, config_.state_floats, target);
  copy_exact(config_.num_state_slots + snapshot_slot, state_slot);
}

int32_t KvCache::allocate_state() {
  if (!state_pool_) return -1;
  const std::optional<int32_t> slot = state_pool_->allocate();
  if (!slot) fail("KV cache: all {} recurrent state slots are taken", config_.num_state_slots);
  return *slot;
}

void KvCache::copy_block(size_t group, int32_t from, int32_t to) {
  if (group >= groups_.size()) fail("KV cache: no group {}", group);
  if (!config_.host_storage) fail("KV cache: its blocks are not stored here (copy_block)");
  const int32_t n = groups_[group].pool.num_blocks();
  if (from < 0 || from >= n || to < 0 || to >= n)
    fail("KV cache: copy of block {} to {} outside the {} blocks of group {}", from, to, n, group);
  // The kv heads of one (layer, block) are consecutive records.
  const Geometry& g = geometry_[group];
  const auto heads = static_cast<size_t>(g.n_kv_heads);
  for (int l = 0; l < config_.n_layers; ++l) {
    if (layer_group_[static_cast<size_t>(l)] != static_cast<int>(group) ||
        layer_index_[static_cast<size_t>(l)] < 0)  // (a remote layer: stored on another rank)
      continue;
    std::memcpy(key_data(l) + offset(l, to, 0) * g.key_bytes,
                key_data(l) + offset(l, from, 0) * g.key_bytes, heads * g.key_bytes);
    std::memcpy(value_data(l) + offset(l, to, 0) * g.value_bytes,
                value_data(l) + offset(l, from, 0) * g.value_bytes, heads * g.value_bytes);
  }
}

void KvCache::write(int layer, int64_t slot, const float* k, const float* v) {
  const auto block = static_cast<int32_t>(slot / config_.block_size);
  const auto pos = static_cast<size_t>(slot % config_.block_size);
  const auto block_size = static_cast<size_t>(config_.block_size);
  const Geometry& geo = geometry(layer);
  const int dim = geo.head_dim, vdim = geo.value_dim;
  const auto head_dim = static_cast<size_t>(dim), value_dim = static_cast<size_t>(vdim);
  // The table's fp16 conversion (F16C where the CPU has it); keys go through a buffer to be
  // stored transposed.
  const kernels::QuantizeRowFn to_fp16 = kernels::active_kernels().f16.quantize_activation;
  uint16_t key_halves[kMaxHeadDim];
  float key_rotated[kMaxHeadDim], value_rotated[kMaxHeadDim];
  const size_t key_scales_at = scales_offset(config_.key_type, dim),
               value_scales_at = scales_offset(config_.value_type, vdim),
               groups = value_dim / kQ8Group;
  for (int h = 0; h < geo.n_kv_heads; ++h) {
    const float* ks = k + static_cast<size_t>(h) * head_dim;
    const float* vs = v + static_cast<size_t>(h) * value_dim;
    if (geo.key_rotation > 0) {
      std::copy_n(ks, dim, key_rotated);
      hadamard_rotate(key_rotated, dim, geo.key_rotation);
      ks = key_rotated;
    }
    if (geo.value_rotation > 0) {
      std::copy_n(vs, vdim, value_rotated);
      hadamard_rotate(value_rotated, vdim, geo.value_rotation);
      vs = value_rotated;
    }
    uint8_t* kb = key_data(layer) + offset(layer, block, h) * geo.key_bytes;
    uint8_t* vb = value_data(layer) + offset(layer, block, h) * geo.value_bytes;
    if (config_.key_type == DType::F16) {
      uint16_t* kd = reinterpret_cast<uint16_t*>(kb) + pos;
      to_fp16(ks, key_halves, dim);
      for (size_t d = 0; d < head_dim; ++d) kd[d * block_size] = key_halves[d];
    } else if (config_.key_type ==
               DType::Q8_0) {  // transposed: dimension d at d * block_size + pos
      quantize_q8(ks, dim, reinterpret_cast<int8_t*>(kb) + pos, block_size,
                  reinterpret_cast<float*>(kb + key_scales_at) + pos, block_size);
    } else {
      store_q4_key(ks, dim, kb + pos, block_size,
                   reinterpret_cast<uint16_t*>(kb + key_scales_at) + pos);
    }
    if (config_.value_type == DType::F16) {
      to_fp16(vs, reinterpret_cast<uint16_t*>(vb) + pos * value_dim, vdim);
    } else if (config_.value_type == DType::Q8_0) {
      quantize_q8(vs, vdim, reinterpret_cast<int8_t*>(vb) + pos * value_dim, 1,
                  reinterpret_cast<float*>(vb + value_scales_at) + pos * groups, 1);
    } else {
      store_q4_value(vs, vdim, vb + pos * value_dim / 2,
                     reinterpret_cast<uint16_t*>(vb + value_scales_at) + pos * groups);
    }
  }
}

}  // namespace inferd::kv
