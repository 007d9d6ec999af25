// BlockPool: the fixed set of KV-cache block ids, handed out and reference-counted.
// Sized once at start-up; allocate and release are O(1) and never touch the heap.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace inferd::kv {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }

  // A free block with reference count 1, or nullopt when none is left.
  std::optional<int32_t> allocate();
  // Another owner of a block in use (a shared prefix).
  void retain(int32_t block);
  // Drops one owner; the block returns to the free list when none is left.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }

 private:
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // stack of free ids; capacity fixed at construction
};

}  // namespace inferd::kv
