// BlockPool: the fixed set of KV-cache block ids, handed out and reference-counted, and the
// index of the blocks whose contents the prefix cache may reuse. Sized once at start-up: no
// operation touches the heap, and each is O(1) (the hash index is open-addressed, at most half
// full).
//
// A block whose last owner lets go keeps its contents. If the prefix cache indexed it (a full
// block, keyed by the hash of its tokens and everything before them), it can be found and
// taken back until it is reused: free blocks form a least-recently-freed list, allocate()
// takes the oldest, and only then is its index entry dropped (vLLM's free block queue).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace inferd::kv {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  // Blocks without owners, including the cached ones among them.
  int32_t num_free() const { return num_free_; }
  int32_t num_used() const { return num_blocks() - num_free(); }
  // Blocks indexed for reuse (in use or free).
  int32_t num_cached() const { return num_indexed_; }

  // The free block freed longest ago, with reference count 1 and no index entry, or nullopt.
  std::optional<int32_t> allocate();
  // Another owner of a block: one in use (a shared prefix), or a free one found through the
  // index, which leaves the free list.
  void retain(int32_t block);
  // Drops one owner; with none left the block goes to the end of the free list, contents and
  // index entry kept.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }

  // Indexes a block under `hash`; false (and nothing changes) when the hash already names a
  // block or this block is indexed under another hash.
  bool index(int32_t block, uint64_t hash);
  // The block indexed under `hash`, or nullopt.
  std::optional<int32_t> find(uint64_t hash) const;
  bool indexed(int32_t block) const { return has_hash_[static_cast<size_t>(block)] != 0; }

 private:
  static constexpr int32_t kNone = -1;
  void unlink(int32_t block);
  void push_back(int32_t block);
  void unindex(int32_t block);
  size_t slot_of(uint64_t hash) const { return static_cast<size_t>(hash) & (table_.size() - 1); }

  std::vector<int32_t> ref_counts_;
  // Free list, doubly linked through the arrays: head = freed longest ago.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = kNone, tail_ = kNone, num_free_ = 0;
  // Index: hash -> block, linear probing with backward-shift deletion; 2x to 4x num_blocks slots.
  struct Slot {
    uint64_t hash = 0;
    int32_t block = kNone;
  };
  std::vector<Slot> table_;
  std::vector<uint64_t> hash_of_;  // [num_blocks] the block's index key when has_hash_
  std::vector<uint8_t> has_hash_;
  int32_t num_indexed_ = 0;
};

}  // namespace inferd::kv
