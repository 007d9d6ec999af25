#include "kv/block_pool.h"

#include "util/error.h"

namespace inferd::kv {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks <= 0) fail("KV cache: block count must be positive, got {}", num_blocks);
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Lowest ids on top of the stack, so a fresh cache fills memory from the start.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t block = free_.back();
  free_.pop_back();
  ref_counts_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  if (count <= 0) fail("KV cache: retain of free block {}", block);
  ++count;
}

void BlockPool::release(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  if (count <= 0) fail("KV cache: release of free block {}", block);
  if (--count == 0) free_.push_back(block);
}

}  // namespace inferd::kv
