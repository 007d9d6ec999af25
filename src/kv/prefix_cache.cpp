#include "kv/prefix_cache.h"

#include <xxhash.h>
#include <algorithm>

#include "util/error.h"

namespace inferd::kv {

PrefixCache::PrefixCache(std::span<KvGroup> groups, int block_size, int64_t max_blocks_per_sequence)
    : groups_(groups), block_size_(block_size) {
  for (const KvGroup& g : groups) {
    tokens_.emplace_back(static_cast<size_t>(g.pool.num_blocks()) * block_size);
    parent_.emplace_back(static_cast<size_t>(g.pool.num_blocks()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    hits_[g].resize(static_cast<size_t>(max_blocks_per_sequence));
    runs_[g].resize(static_cast<size_t>(max_blocks_per_sequence));
  }
}

uint64_t PrefixCache::root_key(std::string_view salt) {
  constexpr uint64_t kUnsalted = 0x696e666572642d31;  // any fixed value
  return salt.empty() ? kUnsalted : XXH3_64bits_withSeed(salt.data(), salt.size(), kUnsalted);
}

uint64_t PrefixCache::root_key(std::string_view salt, std::span<const float> lora_scales) {
  const uint64_t key = root_key(salt);
  return lora_scales.empty()
             ? key
             : XXH3_64bits_withSeed(lora_scales.data(), lora_scales.size_bytes(), key);
}

void PrefixCache::hash_blocks(std::span<const int32_t> tokens, int64_t n_blocks,
                              PrefixState& state) const {
  for (auto i = std::ssize(state.hashes); i < n_blocks; ++i) {
    const uint64_t parent = i == 0 ? state.root : state.hashes[static_cast<size_t>(i - 1)];
    state.hashes.push_back(XXH3_64bits_withSeed(&tokens[static_cast<size_t>(i * block_size_)],
                                                sizeof(int32_t) * size_t(block_size_), parent));
  }
}

int32_t PrefixCache::lookup(size_t g, std::span<const int32_t> tokens,
                            std::span<const uint64_t> hashes, int64_t i, uint64_t root) const {
  const std::optional<int32_t> block = groups_[g].pool.find(hashes[static_cast<size_t>(i)]);
  if (!block) return kNoBlock;
  const uint64_t parent = i == 0 ? root : hashes[static_cast<size_t>(i - 1)];
  const auto b = static_cast<size_t>(*block);
  const auto first = tokens.begin() + i * block_size_;
  const bool same = parent_[g][b] == parent &&
                    std::equal(first, first + block_size_,
                               tokens_[g].begin() + static_cast<int64_t>(b) * block_size_);
  return same ? *block : kNoBlock;
}

int64_t PrefixCache::match(std::span<const int32_t> tokens, PrefixState& state,
                           BlockTables& tables) {
  const int64_t n = std::min<int64_t>((std::ssize(tokens) - 1) / block_size_,
                                      std::ssize(hits_[0]));  // leave one token to compute
  if (n <= 0) return 0;
  hash_blocks(tokens, n, state);
  // Data parallelism: the rank of the first block; only its blocks are hits.
  int rank = -1;
  if (rank_of_) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].window > 0) continue;
      const int32_t first = lookup(g, tokens, state.hashes, 0, state.root);
      rank = first == kNoBlock ? -1 : rank_of_(g, first);
      break;
    }
  }
  const auto held_here = [&](size_t g, int32_t block) {
    return block == kNoBlock || !rank_of_ || (rank >= 0 && rank_of_(g, block) == rank);
  };
  // Hits per group, and for each block the run of consecutive hits ending at it.
  int64_t full_run = n;  // consecutive hits from block 0 in every full-attention group
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& hits = hits_[g];
    std::vector<int32_t>& runs = runs_[g];
    const bool full = groups_[g].window <= 0;
    int64_t i = 0;
    for (; i < full_run; ++i) {  // groups after the full ones need no block past their run
      hits[static_cast<size_t>(i)] = lookup(g, tokens, state.hashes, i, state.root);
      if (!held_here(g, hits[static_cast<size_t>(i)])) hits[static_cast<size_t>(i)] = kNoBlock;
      const int32_t before = i > 0 ? runs[static_cast<size_t>(i - 1)] : 0;
      runs[static_cast<size_t>(i)] = hits[static_cast<size_t>(i)] == kNoBlock ? 0 : before + 1;
      if (full && hits[static_cast<size_t>(i)] == kNoBlock) break;
    }
    if (full) full_run = std::min(full_run, i);
  }
  // The longest prefix of L blocks that every group can serve.
  const auto usable = [&](int64_t blocks) {
    if (blocks > full_run) return false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].window <= 0 || blocks == 0) continue;
      const int64_t first = groups_[g].first_block_seen(blocks * block_size_, block_size_);
      if (runs_[g][static_cast<size_t>(blocks - 1)] < blocks - first) return false;
    }
    return true;
  };
  int64_t blocks = full_run;
  while (blocks > 0 && !usable(blocks)) --blocks;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t first = groups_[g].first_block_seen(blocks * block_size_, block_size_);
    std::vector<int32_t>& table = tables[g];
    table.assign(static_cast<size_t>(first), kNoBlock);
    for (int64_t i = first; i < blocks; ++i) {
      const int32_t block = hits_[g][static_cast<size_t>(i)];
      groups_[g].pool.retain(block);
      table.push_back(block);
    }
  }
  state.num_indexed_blocks = blocks;
  return blocks * block_size_;
}

void PrefixCache::index_computed(std::span<const int32_t> tokens, int64_t num_computed,
                                 PrefixState& state, const BlockTables& tables) {
  const int64_t full = num_computed / block_size_;
  if (full <= state.num_indexed_blocks) return;
  hash_blocks(tokens, full, state);
  for (int64_t i = state.num_indexed_blocks; i < full; ++i) {
    const uint64_t hash = state.hashes[static_cast<size_t>(i)];
    const uint64_t parent = i == 0 ? state.root : state.hashes[static_cast<size_t>(i - 1)];
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int32_t block = tables[g][static_cast<size_t>(i)];
      if (block == kNoBlock || !groups_[g].pool.index(block, hash)) continue;
      const auto b = static_cast<size_t>(block);
      std::copy_n(tokens.begin() + i * block_size_, block_size_,
                  tokens_[g].begin() + static_cast<int64_t>(b) * block_size_);
      parent_[g][b] = parent;
    }
  }
  state.num_indexed_blocks = full;
}

}  // namespace inferd::kv
