// PrefixCache: automatic prefix caching (vLLM's design). Every full KV block of a sequence is
// indexed in its group's BlockPool under a chained hash: hash(block i) = XXH3 of its token ids
// seeded with hash(block i - 1), the chain starting at a root key made from the request's
// cache salt. A new sequence starts at its longest prefix of whole blocks that every KV group
// still holds; a hit is confirmed by comparing the block's stored token ids and parent hash,
// so a hash collision cannot hand out another prefix's K/V.
//
// Sliding-window groups keep their hits although a sequence frees their old blocks: a sliding
// layer needs, for the first token still to compute at position p, only the blocks holding
// keys p - window + 1 .. p - 1. So a prefix of L blocks is usable when the full-attention
// groups hold blocks 0 .. L-1 and each sliding group holds the blocks of that last window; the
// blocks before it are neither needed nor taken (kNoBlock in the table), whether or not they
// were recycled. Freed blocks stay indexed until the pool hands them out again.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"

namespace inferd::kv {

// A sequence's progress through the prefix cache.
struct PrefixState {
  uint64_t root = 0;               // chain root: the cache salt's key
  std::vector<uint64_t> hashes;    // chained hash of each full block hashed so far
  int64_t num_indexed_blocks = 0;  // blocks [0, this) were offered to the index
};

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // prompt tokens looked up at admission
  int64_t hit_tokens = 0;      // of those, tokens whose K/V came from the cache
};

class PrefixCache {
 public:
  // `groups` must outlive the cache. max_blocks_per_sequence sizes the look-up scratch.
  PrefixCache(std::span<KvGroup> groups, int block_size, int64_t max_blocks_per_sequence);

  // The chain root for a request's cache salt ("" for none): requests with different salts
  // never share a block.
  static uint64_t root_key(std::string_view salt);
  // The same for a request that also gives its LoRA adapters' scales (engine/request.h; empty:
  // the adapters' own, the key of the salt alone): different scales never share a block.
  static uint64_t root_key(std::string_view salt, std::span<const float> lora_scales);

  // At admission, with empty tables: hashes the full blocks of `tokens`, takes the longest
  // usable cached prefix into `tables` (one reference per block) and returns its length in
  // tokens, always less than tokens.size() (one token is left to compute its logits).
  int64_t match(std::span<const int32_t> tokens, PrefixState& state, BlockTables& tables);

  // After a step: indexes the blocks of positions [0, num_computed) that are full and were not
  // offered yet. A block whose hash another block already holds stays unindexed.
  void index_computed(std::span<const int32_t> tokens, int64_t num_computed, PrefixState& state,
                      const BlockTables& tables);

  // A request's first look-up: `queried` prompt tokens, `hit` of them found.
  void count(int64_t queried, int64_t hit) {
    stats_.queried_tokens += queried;
    stats_.hit_tokens += hit;
  }
  const PrefixCacheStats& stats() const { return stats_; }

  // Data parallelism (model/data_parallel.h): which rank holds a block of a group. A match then
  // takes only blocks that the rank of its first block (of the first full-attention group)
  // holds: a block with the same chained hash that another rank wrote (two sequences that
  // computed the same first block, each on its rank) ends the prefix there.
  using BlockRank = std::function<int(size_t group, int32_t block)>;
  void set_block_rank(BlockRank rank_of) { rank_of_ = std::move(rank_of); }

 private:
  void hash_blocks(std::span<const int32_t> tokens, int64_t n_blocks, PrefixState& state) const;
  // The block of group g that holds block i of `tokens` with `hashes`, or kNoBlock.
  int32_t lookup(size_t g, std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                 int64_t i, uint64_t root) const;

  std::span<KvGroup> groups_;
  int block_size_;
  // Per group, per block: the token ids and parent hash it was indexed with.
  std::vector<std::vector<int32_t>> tokens_;   // [groups][num_blocks * block_size]
  std::vector<std::vector<uint64_t>> parent_;  // [groups][num_blocks]
  std::vector<int32_t> hits_[kMaxKvGroups];    // [max_blocks_per_sequence] look-up scratch
  std::vector<int32_t> runs_[kMaxKvGroups];    // consecutive hits ending at each block
  PrefixCacheStats stats_;
  BlockRank rank_of_;  // (data parallelism; empty: one place holds every block)
};

}  // namespace inferd::kv
