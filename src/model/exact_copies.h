// ExactCopies: one forward pass's side of a quantized KV cache's exact copies (kv/kv_cache.h,
// "Exact copies"): the F16 copies of each sequence's first block and latest blocks, which its
// queries read instead of the 4-bit (or 8-bit) blocks.
//
// The blocks a step's tokens write are staged here, one layer at a time: a chunk of a prompt
// spans many blocks, and writing them straight into the sequence's ring of copies would evict
// blocks that the chunk's first tokens still read. For each layer that owns its K/V:
//   begin_layer   seeds the staged first block of each sequence with its ring copy (the
//                 positions an earlier step wrote), or marks it missing;
//   store         puts a token's K and V into its staged block (per token, in parallel);
//   blocks        the copies an entry's attention reads: staged blocks, ring copies before them;
//   end_layer     after attention, moves each sequence's latest staged blocks (and block 0)
//                 into its ring and tags them.
// A batch entry without a state slot reads and writes no copies.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kv/kv_cache.h"
#include "model/batch.h"

namespace inferd::model {

class ExactCopies {
 public:
  // Plans the batch's staged blocks (check_batch has checked it); false when the cache keeps no
  // copies. Grows the staging area when this batch needs more than any before.
  bool plan(const Batch& batch, const kv::KvCache& cache);
  bool active() const { return active_; }

  void begin_layer(int layer, const kv::KvCache& cache);
  // Batch row t at `position`: K and V of the layer, as cache.write takes them.
  void store(int layer, int64_t t, int32_t position, const float* k, const float* v,
             const kv::KvCache& cache);
  // The copies batch entry `entry` reads at this layer (after its store calls).
  const kernels::ExactBlocks* blocks(size_t entry) const { return &blocks_[entry]; }
  void end_layer(int layer, kv::KvCache& cache);

 private:
  struct Entry {
    int32_t slot = -1;        // its state slot; -1: no copies
    size_t owner = 0;         // the first entry of its slot in the batch (stages for all of them)
    int64_t first_block = 0;  // owners: the blocks the slot's tokens write, staged from `stage`
    int64_t last_block = -1;
    int first_offset = 0;     // where its first token lies in first_block
    int64_t stage = 0;
    int64_t read_first = 0, read_last = -1;  // the blocks its queries read copies of (but block 0)
    bool first_staged_whole = true;          // this layer: first_block staged whole
  };
  uint16_t* stage_keys(int64_t block) { return stage_keys_.data() + block * key_block_halves_; }
  uint16_t* stage_values(int64_t block) {
    return stage_values_.data() + block * value_block_halves_;
  }
  const uint16_t* staged(const Entry& owner, int64_t block, bool value) const;

  bool active_ = false;
  int window_ = 0;
  int block_size_ = 0;
  size_t key_block_halves_ = 0, value_block_halves_ = 0;  // one block of every kv head, any layer
  std::vector<Entry> entries_;                   // [batch entries]
  std::vector<int32_t> token_entry_;             // [batch rows] the entry of each
  std::vector<uint16_t> stage_keys_, stage_values_;  // [staged blocks, *_block_halves_]
  std::vector<const uint16_t*> pointers_;        // ExactBlocks' keys and values
  std::vector<kernels::ExactBlocks> blocks_;     // [batch entries]
};

}  // namespace inferd::model
