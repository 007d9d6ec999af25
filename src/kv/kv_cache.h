// KvCache: the K and V storage of every layer, in blocks of `block_size` token slots.
// A slot is block * block_size + offset. Per layer, block and kv head, keys are stored
// transposed, [dim][offset], so attention scores a whole block with one vector per dimension;
// values are [offset][dim].
//
// Layers are in KV groups (vLLM's "KV cache groups"): the full-attention layers in one, the
// sliding-window layers in another. Each group has its own blocks, pool and block table per
// sequence, so a sliding layer's blocks that fall behind its window can go back to the pool
// while the full-attention layers keep theirs: a long sequence of a model that slides on 5 of 6
// layers holds about a sixth of the KV a full-attention model would.
//
// Keys and values are each stored as F16, Q8_0 or Q4_0 (llama.cpp's --cache-type-k/-v). Q8_0
// keeps int8 values with a scale per 32 dimensions of each token, quantized as llama.cpp's Q8_0
// blocks (d = amax / 127 rounded to fp16, q = round(x / d)) and laid out for attention: about
// half the bytes of F16. Q4_0 keeps nibbles with an fp16 scale per 32 dimensions, quantized as
// llama.cpp's Q4_0 blocks (d = the value of largest magnitude / -8, q = round(x / d) + 8 in
// 0..15): 18 bytes per 32 values as llama.cpp's, 28% of F16. A decode step reads every
// sequence's whole KV, so with many sequences or long contexts this is memory traffic saved.
//
// Q8_0 and Q4_0 keys and values are stored rotated, as llama.cpp rotates a quantized cache's:
// a key's head by a Walsh-Hadamard transform as wide as the largest power of two dividing the
// head size, a value's in pieces of 64 (head sizes that are multiples of 64; others are stored as
// they are). A few large dimensions of a head otherwise set the scales of their groups and leave
// the rest a step or two of 16; rotated, every dimension is a mix of them all (SmolLM2 at context
// 4096, Q4_0 keys and values: perplexity +13% over F16 unrotated, +5% rotated). The transform is
// orthonormal and its own inverse, so attention rotates the queries the same way (q . k
// unchanged) and rotates its output back. Before that, a layer with query and key norms stores
// its keys divided channel by channel by an equalizer the decoder takes from those norms (and
// multiplies the queries by it; model/decoder.cpp, set_key_equalizer): rotation spreads a large
// channel over the others, equalizing first makes it no larger than the queries need (Gemma 3
// 270M, Q4_0: +14.6% rotated, +4.2% equalized and rotated).
//
// Exact copies. Most of what a 4-bit cache loses is in the keys a query attends to most: its
// own block's, the few blocks before it, and the first block (the attention sink most heads
// park their weight on). So a quantized cache also keeps, per state slot (one per running
// sequence), F16 copies of those blocks, rotated as the quantized ones: entry 0 holds the
// sequence's block 0, entries 1.. a ring of its latest blocks (block b in entry 1 + b % ring).
// A query in block qb reads block b from its copy when b == 0 or qb - W < b <= qb
// (W = exact_window_blocks()), if the copy is there, and from the quantized block otherwise.
// That rule depends only on the query's and the key's positions, so a token's output does not
// depend on how its prompt was cut into steps. A copy is there when its tag names that block
// (the sequence's latest block may be there in part: the positions its steps wrote, rejected
// drafts' included, which later steps write again); a slot taken afresh has none
// (copy_state(kNoSlot, slot)). A prefix
// found in the prefix cache gets its copies from a snapshot slot (num_snapshot_slots: the
// copies saved at a block end, as a hybrid model's state is) when one ends where the prefix
// does (engine/scheduler.h), and is otherwise read from its quantized blocks until the
// sequence's own blocks take over. The quantized blocks are always written too: the copies
// only ever replace what a query would read. Perplexity at -c 4096 with Q4_0 keys and values,
// over F16: SmolLM2 +5.2% without copies, +0.6% with; Gemma 3 270M +4.2%, +0.1%
// (docs/BENCHMARKS.md).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "tensor/dtype.h"
#include "util/huge_pages.h"

namespace inferd::kv {

// Dimensions per Q8_0 or Q4_0 scale.
constexpr int kQ8Group = 32;

// Full-attention layers, sliding-window layers.
constexpr int kMaxKvGroups = 2;

// A sequence's blocks, one table per KV group: entry i holds positions [i * block_size,
// (i + 1) * block_size). A sliding group's entries behind the window are kNoBlock once freed.
using BlockTables = std::array<std::vector<int32_t>, kMaxKvGroups>;
constexpr int32_t kNoBlock = -1;

// The layers that share block ids, and their pool.
struct KvGroup {
  KvGroup(int32_t num_blocks, int window_) : window(window_), pool(num_blocks) {}
  int window = 0;  // a query at p sees keys from p - window + 1 on; 0: all keys (full attention)
  BlockPool pool;
  int n_layers = 0;
  size_t block_bytes = 0;  // K and V of all its layers and kv heads, one block

  // The first block a query at `position` reads: blocks before it hold only keys behind the
  // window (0 for full attention).
  int64_t first_block_seen(int64_t position, int block_size) const {
    return window > 0 ? std::max<int64_t>(0, position - window + 1) / block_size : 0;
  }
};

// Grows each group's table to `blocks` entries with blocks from that group's pool; false, with
// nothing allocated, when a pool has too few free blocks.
bool grow_tables(std::span<KvGroup> groups, BlockTables& tables, int64_t blocks);

// Returns every block of `tables` to its group's pool and clears them.
void release_blocks(std::span<KvGroup> groups, BlockTables& tables);

// The orthonormal Walsh-Hadamard transform (its own inverse) of each consecutive `width` values
// of x[0, n); width a power of two dividing n.
void hadamard_rotate(float* x, int n, int width);

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int32_t num_blocks = 0;         // blocks of the full-attention group
  DType key_type = DType::F16;    // F16, Q8_0 or Q4_0
  DType value_type = DType::F16;  // F16, Q8_0 or Q4_0
  // Sliding-window layers (one flag per layer; empty: none) form their own group of
  // num_sliding_blocks blocks (0: num_blocks). Without flags every layer keeps all its keys
  // (llama.cpp's --swa-full), whatever window its attention applies.
  std::vector<bool> sliding_layers = {};
  int sliding_window = 0;
  int32_t num_sliding_blocks = 0;
  // false: no K/V storage here, only the groups' pools (a device executor keeps the blocks,
  // model/model.h); write, copy_block and the block accessors must not be called.
  bool host_storage = true;
  // Layers that keep no K/V (the recurrent layers of a hybrid model, model/gated_delta_net.h):
  // one flag per layer, empty: none. They belong to no group.
  std::vector<bool> stateless_layers = {};
  // The fixed-size recurrent state of a hybrid model's sequences: num_state_slots slots of
  // state_floats floats each (every recurrent layer's convolution and delta-rule state), one per
  // running sequence; 0: the model has none.
  int64_t state_floats = 0;
  int32_t num_state_slots = 0;
  // Snapshots of states at block ends, for prefix caching of hybrid models and of a cache that
  // keeps exact copies: slots of the same size (recurrent state, exact copies) whose pool
  // indexes them by the hash of the block they end (0: none).
  int32_t num_snapshot_slots = 0;
  // The sliding layers' kv heads and head size when they differ from the others' (Gemma 4);
  // 0: the same.
  int sliding_n_kv_heads = 0;
  int sliding_head_dim = 0;
  // The value head size of the full-attention group's layers where it differs from the key
  // head size (DeepSeek's MLA, decompressed: keys of nope + rope dimensions, values of their
  // own size); 0: head_dim.
  int value_head_dim = 0;
  // The sliding group keeps every block (llama.cpp's --swa-full for a model whose sliding
  // layers have their own shape and so cannot join the full group): attention still applies
  // the window, nothing is freed behind it.
  bool sliding_keeps_all = false;
  // Layers another rank of a pipeline runs (dist/model_parallel.h): one flag per layer, empty:
  // none. They count in their kind's group, so that every rank has the same groups and the
  // same block tables, but have no K/V storage here.
  std::vector<bool> remote_layers = {};
  // Exact copies (a quantized key or value type with host storage; 0: none): every state slot
  // (num_state_slots of them, one per running sequence) also keeps F16 copies of its sequence's
  // first block and of its latest blocks, enough that a query reads at least this many keys
  // before its own, and its own block's, exactly (see "Exact copies" above).
  int exact_recent_tokens = 0;
  bool keeps_exact_copies() const {
    return exact_recent_tokens > 0 && host_storage &&
           (key_type != DType::F16 || value_type != DType::F16);
  }
};

// What Model::kv_config asks for by default with a quantized cache (KvCacheConfig::
// exact_recent_tokens): 32 keys before a query's block, so 32 to 47 keys at block size 16.
constexpr int kDefaultExactRecentTokens = 32;

class KvCache {
 public:
  static constexpr int kMaxHeadDim = 512;

  explicit KvCache(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  DType key_type() const { return config_.key_type; }
  DType value_type() const { return config_.value_type; }

  std::span<KvGroup> groups() { return groups_; }
  std::span<const KvGroup> groups() const { return groups_; }
  // The KV group of a layer; -1 for a stateless layer (KvCacheConfig::stateless_layers).
  int group_of(int layer) const { return layer_group_[static_cast<size_t>(layer)]; }

  // The recurrent state slots (KvCacheConfig::state_floats): their ids come from state_pool(),
  // one per running sequence, like blocks; state(slot) is its state_floats floats.
  bool has_state() const { return state_pool_.has_value(); }
  BlockPool* state_pool() { return state_pool_ ? &*state_pool_ : nullptr; }
  const BlockPool* state_pool() const { return state_pool_ ? &*state_pool_ : nullptr; }
  float* state(int32_t slot) {
    check_state_slot(slot);
    return state_.data() + static_cast<size_t>(slot) * static_cast<size_t>(config_.state_floats);
  }
  // Copies a slot's whole state (recurrent state and exact copies) to another (a forked
  // sequence continues from its parent's); from kNoSlot: clears `to`'s exact copies (a slot
  // taken by a new sequence).
  static constexpr int32_t kNoSlot = -1;
  void copy_state(int32_t from, int32_t to);
  // The snapshot slots (KvCacheConfig::num_snapshot_slots): ids and hash index from
  // snapshot_pool(); a state slot's state saved into one, or loaded back.
  BlockPool* snapshot_pool() { return snapshot_pool_ ? &*snapshot_pool_ : nullptr; }
  const BlockPool* snapshot_pool() const { return snapshot_pool_ ? &*snapshot_pool_ : nullptr; }
  void save_snapshot(int32_t state_slot, int32_t snapshot);
  void load_snapshot(int32_t snapshot, int32_t state_slot);
  // Bytes of all state and snapshot slots.
  int64_t state_bytes() const {
    return (config_.state_floats * int64_t{sizeof(float)} + static_cast<int64_t>(exact_slot_bytes_)) *
           (config_.num_state_slots + config_.num_snapshot_slots);
  }
  // A state slot for callers that run one sequence outside the scheduler (perplexity, tests), or
  // -1 when the model has no recurrent state; fails when every slot is taken.
  int32_t allocate_state();
  // Bytes of all blocks, and of the blocks in use, over every group.
  int64_t bytes() const;
  int64_t used_bytes() const;
  int32_t used_blocks() const;
  // K and V bytes a query at `context` positions reads, over all layers: every key of a
  // full-attention layer, the window of a sliding one.
  double bytes_read_at(double context) const;

  // Tables for positions [0, n_positions) in every group, nothing freed behind a window: for
  // callers that run one sequence outside the scheduler (perplexity, tests). Fails when a pool
  // is short.
  BlockTables allocate_sequence(int64_t n_positions);
  void release(BlockTables& tables) { release_blocks(groups_, tables); }

  // Copies block `from` of KV group `group` to block `to` in every layer of the group: the
  // copy-on-write of a partly filled block that two sequences (beams forked from one) would
  // both write into.
  void copy_block(size_t group, int32_t from, int32_t to);

  // A layer's kv heads and head size (its group's: the sliding group's may differ); head_dim is
  // the keys', value_dim the values' (the same but for KvCacheConfig::value_head_dim).
  int n_kv_heads(int layer) const { return geometry(layer).n_kv_heads; }
  int head_dim(int layer) const { return geometry(layer).head_dim; }
  int value_dim(int layer) const { return geometry(layer).value_dim; }
  // The width of the rotation (hadamard_rotate) a layer's keys, and its values, are stored
  // with; 0: none. Queries meet rotated keys rotated alike; outputs of rotated values are
  // rotated back.
  int key_rotation(int layer) const { return geometry(layer).key_rotation; }
  int value_rotation(int layer) const { return geometry(layer).value_rotation; }

  // Stores one token's K ([n_kv_heads * head_dim] floats, the layer's) and V ([n_kv_heads *
  // value_dim]) of `layer` at `slot`.
  void write(int layer, int64_t slot, const float* k, const float* v);

  // Exact copies (see the top of this file). W: a query reads the copies of its own block and
  // the W - 1 before it (0: this cache keeps none).
  int exact_window_blocks() const { return exact_window_blocks_; }
  bool has_exact_copies() const { return exact_window_blocks_ > 0; }
  int exact_entries() const { return exact_window_blocks_ + 2; }  // block 0, then a ring of W + 1
  int exact_entry_of(int64_t block) const {
    return block == 0 ? 0 : 1 + static_cast<int>(block % (exact_window_blocks_ + 1));
  }
  // An entry's F16 block of kv head 0 of `layer` (as an F16 cache's: keys [head_dim,
  // block_size], values [block_size, value_dim]); kv head h at h * exact_*_stride halves on.
  // Null for a layer stored on another rank.
  uint16_t* exact_keys(int32_t slot, int layer, int entry) const;
  uint16_t* exact_values(int32_t slot, int layer, int entry) const;
  size_t exact_key_stride(int layer) const {
    return static_cast<size_t>(config_.block_size) * static_cast<size_t>(head_dim(layer));
  }
  size_t exact_value_stride(int layer) const {
    return static_cast<size_t>(config_.block_size) * static_cast<size_t>(value_dim(layer));
  }
  // Halves of one entry's keys (or values) of every kv head of `layer`.
  size_t exact_block_halves(int layer, bool values) const {
    return static_cast<size_t>(n_kv_heads(layer)) *
           (values ? exact_value_stride(layer) : exact_key_stride(layer));
  }
  // The block an entry holds whole (every position from the block's start up to where its
  // sequence has written), or -1.
  int32_t& exact_tag(int32_t slot, int layer, int entry) {
    return exact_tags_[exact_tag_index(slot, layer, entry)];
  }
  int32_t exact_tag(int32_t slot, int layer, int entry) const {
    return exact_tags_[exact_tag_index(slot, layer, entry)];
  }
  // One token's K and V of `layer` as F16, rotated as the layer stores them, into F16 blocks
  // (exact_keys/exact_values layout, every kv head) at `offset`.
  void store_exact(int layer, const float* k, const float* v, uint16_t* keys, uint16_t* values,
                   int offset) const;

  // The bytes of one kv head's keys (or values) in one block, whatever their type.
  const uint8_t* key_block(int layer, int32_t block, int kv_head) const {
    return key_data(layer) + offset(layer, block, kv_head) * geometry(layer).key_bytes;
  }
  const uint8_t* value_block(int layer, int32_t block, int kv_head) const {
    return value_data(layer) + offset(layer, block, kv_head) * geometry(layer).value_bytes;
  }
  size_t key_block_bytes(int layer) const { return geometry(layer).key_bytes; }
  size_t value_block_bytes(int layer) const { return geometry(layer).value_bytes; }

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
    return reinterpret_cast<const float*>(key_block(layer, block, kv_head) +
                                          scales_offset(DType::Q8_0, geometry(layer).head_dim));
  }
  // Q8_0 values: int8 [block_size, value_dim], then their scales [block_size, value_dim / 32].
  const int8_t* values_q8(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const int8_t*>(value_block(layer, block, kv_head));
  }
  const float* value_scales(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const float*>(value_block(layer, block, kv_head) +
                                          scales_offset(DType::Q8_0, geometry(layer).value_dim));
  }
  // Q4_0 keys: nibbles [head_dim / 2, block_size] (row i holds dimension 2i in its low nibbles,
  // 2i + 1 in its high: one byte load gives a key two dimensions), then their fp16 scales
  // [head_dim / 32, block_size]; a key's dimension is scale * (nibble - 8).
  const uint8_t* keys_q4(int layer, int32_t block, int kv_head) const {
    return key_block(layer, block, kv_head);
  }
  const uint16_t* key_scales_q4(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const uint16_t*>(key_block(layer, block, kv_head) +
                                             scales_offset(DType::Q4_0, geometry(layer).head_dim));
  }
  // Q4_0 values: [block_size, head_dim / 2] bytes, each 32 dimensions of a value as the 16 bytes
  // of a Q4_0 block (dimension i in the low nibble of byte i, i + 16 in the high), then their
  // fp16 scales [block_size, head_dim / 32].
  const uint8_t* values_q4(int layer, int32_t block, int kv_head) const {
    return value_block(layer, block, kv_head);
  }
  const uint16_t* value_scales_q4(int layer, int32_t block, int kv_head) const {
    return reinterpret_cast<const uint16_t*>(value_block(layer, block, kv_head) +
                                             scales_offset(DType::Q4_0, geometry(layer).value_dim));
  }

 private:
  // A group's kv heads and head sizes (keys', values'), and the bytes of one (layer, block, kv
  // head) record of its keys and of its values (64-byte multiples).
  struct Geometry {
    int n_kv_heads = 0;
    int head_dim = 0;
    int value_dim = 0;
    size_t key_bytes = 0, value_bytes = 0;
    int key_rotation = 0, value_rotation = 0;
  };
  const Geometry& geometry(int layer) const {
    return geometry_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
  }
  // Index of the (layer, block, kv head) record within its group's storage.
  size_t offset(int layer, int32_t block, int kv_head) const {
    const auto l = static_cast<size_t>(layer);
    const KvGroup& group = groups_[static_cast<size_t>(layer_group_[l])];
    return (static_cast<size_t>(layer_index_[l]) * static_cast<size_t>(group.pool.num_blocks()) +
            static_cast<size_t>(block)) *
               static_cast<size_t>(geometry(layer).n_kv_heads) +
           static_cast<size_t>(kv_head);
  }
  uint8_t* key_data(int layer) const { return storage_[group_of(layer)].keys.data(); }
  uint8_t* value_data(int layer) const { return storage_[group_of(layer)].values.data(); }
  // Where a quantized record's scales start: after its int8 values (Q8_0) or nibbles (Q4_0);
  // `dim` is the record's head size (the keys' or the values').
  size_t scales_offset(DType type, int dim) const {
    const size_t values = static_cast<size_t>(config_.block_size) * static_cast<size_t>(dim);
    return type == DType::Q4_0 ? values / 2 : values;
  }
  size_t record_bytes(DType type, int head_dim) const;
  void check_state_slot(int32_t slot) const;
  // Exact copies of state slot s (0 <= s < num_state_slots) or of snapshot n (num_state_slots +
  // n): [layer with storage][entry][kv head] key blocks, then the values alike.
  void allocate_exact_copies();
  uint16_t* exact_layer(int32_t slot, int layer) const;  // its keys' first entry; null: none
  size_t exact_tags_per_slot() const {
    return static_cast<size_t>(config_.n_layers) * static_cast<size_t>(exact_entries());
  }
  size_t exact_tag_index(int32_t slot, int layer, int entry) const {
    return (static_cast<size_t>(slot) * static_cast<size_t>(config_.n_layers) +
            static_cast<size_t>(layer)) * static_cast<size_t>(exact_entries()) +
           static_cast<size_t>(entry);
  }
  void copy_exact(int32_t from, int32_t to);  // whole slots (snapshots after the state slots)
  int exact_window_blocks_ = 0;
  size_t exact_slot_bytes_ = 0;
  std::vector<size_t> exact_layer_offset_;  // [n_layers] bytes into a slot; SIZE_MAX: none
  HugePageBuffer exact_storage_;            // [state + snapshot slots, exact_slot_bytes_]
  std::vector<int32_t> exact_tags_;         // [state + snapshot slots, n_layers, entries]

  // Zeroed huge-page mappings (util/huge_pages.h): the pages are committed lazily, so a large
  // cache costs nothing until its blocks are first written, and never-written slots read as 0.
  struct GroupStorage {
    HugePageBuffer keys;    // [group layers, group blocks, n_kv_heads] records
    HugePageBuffer values;  // [group layers, group blocks, n_kv_heads] records
  };

  KvCacheConfig config_;
  std::vector<KvGroup> groups_;
  std::array<GroupStorage, kMaxKvGroups> storage_;
  std::vector<int> layer_group_;  // [n_layers] its group
  std::vector<int> layer_index_;  // [n_layers] its index among the group's layers
  std::array<Geometry, kMaxKvGroups> geometry_;  // [group]
  std::optional<BlockPool> state_pool_;  // when the model has a recurrent state
  std::optional<BlockPool> snapshot_pool_;
  std::span<float> snapshots_;  // [num_snapshot_slots, state_floats]
  float* snapshot(int32_t slot);
  std::span<float> state_;  // [num_state_slots, state_floats]
  HugePageArena state_memory_;  // holds state_
};

}  // namespace inferd::kv
