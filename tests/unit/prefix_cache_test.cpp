// BlockPool's free list and hash index, and PrefixCache's matching: longest prefix of whole
// blocks, token comparison on a hit, salts, sliding-window groups that keep only their window.
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "util/error.h"

namespace inferd::kv {
namespace {

TEST(BlockPoolIndex, FreedBlocksStayFindableUntilReused) {
  BlockPool pool(3);
  const int32_t a = *pool.allocate(), b = *pool.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  ASSERT_TRUE(pool.index(a, 111));
  EXPECT_FALSE(pool.index(b, 111));  // the hash names a block already
  EXPECT_FALSE(pool.index(a, 222));  // the block has a hash already
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.find(111), a);
  pool.retain(a);  // taken back from the free list
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.ref_count(a), 1);
  pool.release(a);
  EXPECT_THROW(pool.retain(2), Error);  // free and never indexed
  // Free list order: 2 (never used), then a. Taking a evicts its entry.
  EXPECT_EQ(*pool.allocate(), 2);
  EXPECT_EQ(*pool.allocate(), a);
  EXPECT_FALSE(pool.find(111));
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.allocate());
}

// Random operations against a plain model of the same rules: the pool's counts, free order and
// index agree after every step (the index's backward-shift deletion included).
TEST(BlockPoolIndex, RandomOperationsKeepItConsistent) {
  constexpr int32_t kBlocks = 64;
  BlockPool pool(kBlocks);
  std::vector<int32_t> refs(kBlocks, 0);
  std::vector<int32_t> free_order;  // model of the free list, front = next to allocate
  for (int32_t b = 0; b < kBlocks; ++b) free_order.push_back(b);
  std::map<uint64_t, int32_t> index;
  std::map<int32_t, uint64_t> hash_of;
  std::mt19937 rng(5);
  const auto unindex = [&](int32_t b) {
    if (auto it = hash_of.find(b); it != hash_of.end()) {
      index.erase(it->second);
      hash_of.erase(it);
    }
  };
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    const auto b = static_cast<int32_t>(rng() % kBlocks);
    if (op == 0) {
      const std::optional<int32_t> got = pool.allocate();
      if (free_order.empty()) {
        ASSERT_FALSE(got);
      } else {
        ASSERT_EQ(got, free_order.front());
        free_order.erase(free_order.begin());
        unindex(*got);
        refs[static_cast<size_t>(*got)] = 1;
      }
    } else if (op == 1 && refs[static_cast<size_t>(b)] > 0) {
      pool.release(b);
      if (--refs[static_cast<size_t>(b)] == 0) free_order.push_back(b);
    } else if (op == 2 && (refs[static_cast<size_t>(b)] > 0 || hash_of.count(b))) {
      pool.retain(b);
      if (refs[static_cast<size_t>(b)]++ == 0) std::erase(free_order, b);
    } else if (op == 3) {
      const uint64_t hash = rng() % 97 * 0x9E3779B97F4A7C15ull;  // collide in the table often
      const bool expect = !hash_of.count(b) && !index.count(hash);
      ASSERT_EQ(pool.index(b, hash), expect);
      if (expect) index[hash] = b, hash_of[b] = hash;
    }
    ASSERT_EQ(pool.num_free(), static_cast<int32_t>(free_order.size()));
    ASSERT_EQ(pool.num_cached(), static_cast<int32_t>(index.size()));
    if (step % 64 == 0) {
      for (const auto& [hash, block] : index) ASSERT_EQ(pool.find(hash), block);
    }
  }
}

// A sequence of `n` tokens, all blocks computed and indexed, then freed: what a finished request
// leaves behind.
void compute_and_finish(PrefixCache& cache, std::span<KvGroup> groups,
                        const std::vector<int32_t>& tokens, uint64_t root) {
  PrefixState state;
  state.root = root;
  BlockTables tables;
  const auto blocks = static_cast<int64_t>(tokens.size()) / 4;
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t i = 0; i < blocks; ++i) tables[g].push_back(*groups[g].pool.allocate());
  cache.index_computed(tokens, std::ssize(tokens), state, tables);
  release_blocks(groups, tables);
}

std::vector<int32_t> tokens_from(int first, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}

TEST(PrefixCache, LongestPrefixOfWholeBlocksAndTokensCompared) {
  KvGroup groups[] = {KvGroup(32, 0)};
  PrefixCache cache(groups, 4, 16);
  const uint64_t root = PrefixCache::root_key("");
  const std::vector<int32_t> first = tokens_from(100, 12);  // 3 blocks
  compute_and_finish(cache, groups, first, root);
  // Same 12 tokens again: 2 blocks, since one token must be left to compute.
  PrefixState state{root, {}, 0};
  BlockTables tables;
  EXPECT_EQ(cache.match(first, state, tables), 8);
  EXPECT_EQ(tables[0].size(), 2u);
  release_blocks(groups, tables);
  // Longer, sharing 2 blocks and then different.
  std::vector<int32_t> other = first;
  other[9] = 7;
  other.resize(20, 1);
  state = {root, {}, 0};
  EXPECT_EQ(cache.match(other, state, tables), 8);
  release_blocks(groups, tables);
  // Another salt shares nothing.
  state = {PrefixCache::root_key("tenant-b"), {}, 0};
  EXPECT_EQ(cache.match(first, state, tables), 0);
  EXPECT_TRUE(tables[0].empty());
  for (const KvGroup& g : groups) EXPECT_EQ(g.pool.num_used(), 0);
}

TEST(PrefixCache, SlidingGroupNeedsOnlyTheLastWindow) {
  // Blocks of 4; the sliding group keeps a window of 6 keys.
  KvGroup groups[] = {KvGroup(64, 0), KvGroup(64, 6)};
  PrefixCache cache(groups, 4, 16);
  const uint64_t root = PrefixCache::root_key("");
  const std::vector<int32_t> turn = tokens_from(0, 40);  // 10 blocks
  compute_and_finish(cache, groups, turn, root);
  std::vector<int32_t> next = turn;  // turn 2: the history plus new tokens
  for (int i = 0; i < 9; ++i) next.push_back(500 + i);
  PrefixState state{root, {}, 0};
  BlockTables tables;
  EXPECT_EQ(cache.match(next, state, tables), 40);
  // The full group takes all 10 blocks; the sliding one only those of keys 35..39's window.
  EXPECT_EQ(tables[0].size(), 10u);
  ASSERT_EQ(tables[1].size(), 10u);
  const int64_t first = (40 - 6 + 1) / 4;  // block 8
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_EQ(tables[1][static_cast<size_t>(i)] == kNoBlock, i < first) << i;
  EXPECT_EQ(groups[1].pool.num_used(), 10 - first);
  release_blocks(groups, tables);
}

TEST(PrefixCache, SlidingHitSurvivesRecycledOldBlocks) {
  KvGroup groups[] = {KvGroup(64, 0), KvGroup(12, 6)};  // a small sliding pool
  PrefixCache cache(groups, 4, 16);
  const uint64_t root = PrefixCache::root_key("");
  // Turn 1 as the scheduler runs it: the sliding group frees blocks behind the window as the
  // sequence grows, so only its last blocks are still held (and indexed) at the end.
  const std::vector<int32_t> turn = tokens_from(0, 40);
  PrefixState state{root, {}, 0};
  BlockTables tables;
  for (int64_t pos = 0; pos < 40; pos += 4) {
    for (size_t g = 0; g < 2; ++g) tables[g].push_back(*groups[g].pool.allocate());
    cache.index_computed(turn, pos + 4, state, tables);
    const int64_t behind = std::max<int64_t>(0, pos + 4 - 6 + 1) / 4;
    for (int64_t i = 0; i < behind; ++i) {
      int32_t& b = tables[1][static_cast<size_t>(i)];
      if (b != kNoBlock) groups[1].pool.release(b), b = kNoBlock;
    }
    // Another sequence churns the sliding pool, recycling what was freed.
    if (auto other = groups[1].pool.allocate()) groups[1].pool.release(*other);
  }
  release_blocks(groups, tables);
  ASSERT_LT(groups[1].pool.num_cached(), 10) << "the churn should have recycled old blocks";
  std::vector<int32_t> next = turn;
  next.push_back(999);
  PrefixState again{root, {}, 0};
  BlockTables got;
  EXPECT_EQ(cache.match(next, again, got), 40) << "the full prefix, old sliding blocks or not";
  release_blocks(groups, got);
}

// 10,000 requests with shared prefixes, random lengths, cancellations and preemptions through
// the scheduler and the prefix cache (no model: each step just counts the tokens as computed).
// Afterwards every block is free (cached or not) with no owner, and along the way no block is
// ever owned by two sequences unless it is a cached prefix block.
TEST(PrefixCache, TenThousandRandomRequestsLeaveThePoolConsistent) {
  KvGroup groups[] = {KvGroup(96, 0), KvGroup(48, 12)};
  PrefixCache cache(groups, 4, 64);
  engine::Scheduler sched({32, 6, 4}, groups, &cache);
  std::mt19937 rng(11);
  const std::vector<int32_t> prefixes[] = {tokens_from(1000, 40), tokens_from(2000, 23), {}};
  std::vector<std::unique_ptr<engine::Sequence>> live;
  std::vector<engine::ScheduledSequence> step;
  int submitted = 0, finished = 0;
  uint64_t next_id = 1;
  const auto retire = [&](size_t i) {
    sched.remove(live[i].get());
    live.erase(live.begin() + static_cast<long>(i));
    ++finished;
  };
  while (finished < 10000) {
    while (submitted < 10000 && live.size() < 10 && rng() % 2 == 0) {
      auto seq = std::make_unique<engine::Sequence>();
      seq->id = next_id++;
      seq->tokens = prefixes[rng() % 3];
      const int extra = 1 + static_cast<int>(rng() % 30);
      for (int i = 0; i < extra; ++i) seq->tokens.push_back(static_cast<int32_t>(rng() % 3));
      seq->num_prompt_tokens = std::ssize(seq->tokens);
      seq->prefix.root = PrefixCache::root_key(rng() % 5 == 0 ? "salted" : "");
      sched.add(seq.get());
      live.push_back(std::move(seq));
      ++submitted;
    }
    sched.schedule(step);
    for (const engine::ScheduledSequence& s : step) {
      s.seq->num_computed += s.num_new_tokens;
      cache.index_computed(s.seq->tokens, s.seq->num_computed, s.seq->prefix, s.seq->block_tables);
      if (s.seq->num_computed == s.seq->num_tokens())
        s.seq->tokens.push_back(static_cast<int32_t>(rng() % 3));  // the sampled token
    }
    // Blocks in tables: an uncached block has exactly one owner.
    for (size_t g = 0; g < 2; ++g) {
      std::map<int32_t, int> owners;
      for (const auto& seq : live)
        for (int32_t b : seq->block_tables[g])
          if (b != kNoBlock) ++owners[b];
      for (const auto& [block, n] : owners) {
        ASSERT_EQ(groups[g].pool.ref_count(block), n) << "group " << g << " block " << block;
        if (n > 1) {
          ASSERT_TRUE(groups[g].pool.indexed(block)) << "shared but not cached";
        }
      }
    }
    // Finish or cancel some: long ones, and a few at random (queued or running).
    for (size_t i = 0; i < live.size();) {
      const engine::Sequence& seq = *live[i];
      if (seq.num_generated() >= 12 || rng() % 40 == 0) {
        retire(i);
      } else {
        ++i;
      }
    }
  }
  EXPECT_GT(cache.stats().hit_tokens, 10000) << "the shared prefixes should have been found";
  for (const KvGroup& g : groups) {
    EXPECT_EQ(g.pool.num_used(), 0);
    for (int32_t b = 0; b < g.pool.num_blocks(); ++b) EXPECT_EQ(g.pool.ref_count(b), 0);
    EXPECT_GT(g.pool.num_cached(), 0);
  }
}

}  // namespace
}  // namespace inferd::kv
