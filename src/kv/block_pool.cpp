#include "kv/block_pool.h"

#include <bit>

#include "util/error.h"

namespace inferd::kv {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks <= 0) fail("KV cache: block count must be positive, got {}", num_blocks);
  const auto n = static_cast<size_t>(num_blocks);
  ref_counts_.assign(n, 0);
  prev_.assign(n, kNone);
  next_.assign(n, kNone);
  hash_of_.assign(n, 0);
  has_hash_.assign(n, 0);
  table_.resize(std::bit_ceil(2 * n));
  // Lowest ids first, so a fresh cache fills memory from the start.
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

void BlockPool::unlink(int32_t block) {
  const auto b = static_cast<size_t>(block);
  (prev_[b] == kNone ? head_ : next_[static_cast<size_t>(prev_[b])]) = next_[b];
  (next_[b] == kNone ? tail_ : prev_[static_cast<size_t>(next_[b])]) = prev_[b];
  prev_[b] = next_[b] = kNone;
  --num_free_;
}

void BlockPool::push_back(int32_t block) {
  const auto b = static_cast<size_t>(block);
  prev_[b] = tail_;
  next_[b] = kNone;
  (tail_ == kNone ? head_ : next_[static_cast<size_t>(tail_)]) = block;
  tail_ = block;
  ++num_free_;
}

std::optional<int32_t> BlockPool::allocate() {
  if (head_ == kNone) return std::nullopt;
  const int32_t block = head_;
  unlink(block);
  unindex(block);  // its contents are about to be overwritten
  ref_counts_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::retain(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  if (count == 0) {
    if (!indexed(block)) fail("KV cache: retain of free block {}", block);
    unlink(block);  // a cached block taken back from the free list
  }
  ++count;
}

void BlockPool::release(int32_t block) {
  int32_t& count = ref_counts_.at(static_cast<size_t>(block));
  if (count <= 0) fail("KV cache: release of free block {}", block);
  if (--count == 0) push_back(block);
}

bool BlockPool::index(int32_t block, uint64_t hash) {
  if (indexed(block) || find(hash)) return false;
  size_t s = slot_of(hash);
  while (table_[s].block != kNone) s = (s + 1) & (table_.size() - 1);
  table_[s] = {hash, block};
  hash_of_[static_cast<size_t>(block)] = hash;
  has_hash_[static_cast<size_t>(block)] = 1;
  ++num_indexed_;
  return true;
}

std::optional<int32_t> BlockPool::find(uint64_t hash) const {
  for (size_t s = slot_of(hash); table_[s].block != kNone; s = (s + 1) & (table_.size() - 1)) {
    if (table_[s].hash == hash) return table_[s].block;
  }
  return std::nullopt;
}

void BlockPool::unindex(int32_t block) {
  if (!indexed(block)) return;
  const size_t mask = table_.size() - 1;
  size_t s = slot_of(hash_of_[static_cast<size_t>(block)]);
  while (table_[s].block != block) s = (s + 1) & mask;
  // Backward-shift deletion: move later entries of the probe run into the hole when their home
  // slot does not lie between the hole and them, so no search ever stops early.
  size_t hole = s;
  for (size_t j = (hole + 1) & mask; table_[j].block != kNone; j = (j + 1) & mask) {
    const size_t home = slot_of(table_[j].hash);
    const bool home_in_gap = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!home_in_gap) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = Slot{};
  has_hash_[static_cast<size_t>(block)] = 0;
  --num_indexed_;
}

}  // namespace inferd::kv
