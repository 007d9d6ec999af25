// Scheduler and BlockPool: token budget, sequence cap, chunked prefill, FCFS admission,
// preemption of the newest sequence when blocks run out, and block accounting.
#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

Sequence make_seq(uint64_t id, int prompt_len) {
  Sequence s;
  s.id = id;
  s.tokens.assign(static_cast<size_t>(prompt_len), 1);
  s.num_prompt_tokens = prompt_len;
  return s;
}

// Applies a step as the engine would: tokens computed, and one sampled token appended to
// every sequence whose step reached its end.
void complete_step(const std::vector<ScheduledSequence>& step) {
  for (const auto& s : step) {
    s.seq->num_computed += s.num_new_tokens;
    if (s.seq->num_computed == s.seq->num_tokens()) s.seq->tokens.push_back(2);
  }
}

TEST(BlockPool, AllocateRetainRelease) {
  kv::BlockPool pool(3);
  auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(pool.allocate());
  pool.retain(*a);
  pool.release(*a);
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(*a);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_THROW(pool.release(*a), Error);
  EXPECT_EQ(*pool.allocate(), *a);
}

TEST(Scheduler, ChunkedPrefillUnderTokenBudget) {
  kv::KvGroup full(100, 0);
  Scheduler sched({8, 4, 4}, {&full, 1});
  Sequence s = make_seq(1, 20);
  sched.add(&s);
  std::vector<ScheduledSequence> step;
  std::vector<int64_t> chunks;
  while (s.num_generated() == 0) {
    sched.schedule(step);
    ASSERT_EQ(step.size(), 1u);
    chunks.push_back(step[0].num_new_tokens);
    complete_step(step);
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{8, 8, 4}));
  sched.schedule(step);  // decode: one token
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].num_new_tokens, 1);
  EXPECT_EQ(s.block_tables[0].size(), 6u);  // 21 positions in blocks of 4
}

TEST(Scheduler, DecodesFirstThenAdmitsInArrivalOrder) {
  kv::KvGroup full(100, 0);
  Scheduler sched({10, 2, 4}, {&full, 1});
  Sequence a = make_seq(1, 6), b = make_seq(2, 6), c = make_seq(3, 3);
  sched.add(&a);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  complete_step(step);  // a prefilled, now decoding
  sched.add(&b);
  sched.add(&c);
  sched.schedule(step);
  ASSERT_EQ(step.size(), 2u);  // max_seqs = 2: c must wait
  EXPECT_EQ(step[0].seq, &a);
  EXPECT_EQ(step[0].num_new_tokens, 1);
  EXPECT_EQ(step[1].seq, &b);
  EXPECT_EQ(step[1].num_new_tokens, 6);
  EXPECT_EQ(sched.num_waiting(), 1u);
  complete_step(step);
  sched.remove(&a);
  sched.schedule(step);
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].seq, &c);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOut) {
  kv::KvGroup full(4, 0);  // 16 slots in blocks of 4
  Scheduler sched({64, 4, 4}, {&full, 1});
  Sequence a = make_seq(1, 8), b = make_seq(2, 8);
  sched.add(&a);
  sched.add(&b);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(full.pool.num_free(), 0);
  complete_step(step);  // both now need a 9th slot: a new block each
  sched.schedule(step);
  // b (newest) is preempted and its blocks go to a.
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].seq, &a);
  EXPECT_EQ(b.num_computed, 0);
  EXPECT_EQ(b.num_preemptions, 1);
  EXPECT_TRUE(b.block_tables[0].empty());
  EXPECT_EQ(sched.num_waiting(), 1u);
  complete_step(step);
  sched.remove(&a);
  EXPECT_EQ(full.pool.num_free(), 4);
  sched.schedule(step);  // b comes back and recomputes prompt + its generated token
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].seq, &b);
  EXPECT_EQ(step[0].num_new_tokens, 9);
}

// Several steps in flight (pipeline parallelism): a sequence in a launched step is neither
// scheduled again nor preempted until that step finishes; a step takes at most the share of
// sequences it is given.
TEST(Scheduler, PassesOverSequencesInFlight) {
  kv::KvGroup full(5, 0);  // 20 slots in blocks of 4
  Scheduler sched({64, 4, 4}, {&full, 1});
  Sequence a = make_seq(1, 8), b = make_seq(2, 8), c = make_seq(3, 3);
  sched.add(&a);
  sched.add(&b);
  std::vector<ScheduledSequence> first, second;
  sched.schedule(first, 1);  // a share of one sequence: a alone
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].seq, &a);
  a.in_flight = true;
  sched.schedule(second);  // b, not a again
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].seq, &b);
  EXPECT_EQ(full.pool.num_free(), 1);
  b.in_flight = true;
  sched.add(&c);
  std::vector<ScheduledSequence> third;
  sched.schedule(third);  // c takes the last block; a and b are in flight
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].seq, &c);
  complete_step(first);
  a.in_flight = false;
  complete_step(third);
  // a needs a third block and none is free: the newest sequence not in flight (c) goes, not b.
  sched.schedule(first);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].seq, &a);
  EXPECT_EQ(c.num_preemptions, 1);
  EXPECT_EQ(b.num_preemptions, 0);
  EXPECT_EQ(b.block_tables[0].size(), 2u);
  // With a and b both in flight and c waiting for blocks, nothing runs.
  a.in_flight = true;
  std::vector<ScheduledSequence> none;
  sched.schedule(none);
  EXPECT_TRUE(none.empty());
}

TEST(Scheduler, RemoveWhileWaitingFreesNothingTwice) {
  kv::KvGroup full(8, 0);
  Scheduler sched({4, 1, 4}, {&full, 1});
  Sequence a = make_seq(1, 3), b = make_seq(2, 3);
  sched.add(&a);
  sched.add(&b);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  sched.remove(&b);  // cancelled while queued
  sched.remove(&a);  // cancelled while running
  EXPECT_EQ(full.pool.num_free(), 8);
  EXPECT_TRUE(sched.idle());
}

TEST(Scheduler, SlidingGroupFreesBlocksBehindTheWindow) {
  // Window of 6 keys, blocks of 4, steps of up to 8 tokens.
  kv::KvGroup groups[] = {kv::KvGroup(100, 0), kv::KvGroup(100, 6)};
  Scheduler sched({8, 4, 4}, groups);
  Sequence s = make_seq(1, 30);
  sched.add(&s);
  std::vector<ScheduledSequence> step;
  int32_t most_sliding = 0;
  while (s.num_generated() < 20) {
    sched.schedule(step);
    ASSERT_EQ(step.size(), 1u);
    const int64_t first = s.num_computed, end = first + step[0].num_new_tokens;
    // Every position of the step, and the window of its first token, has a block in both groups.
    const auto& full = s.block_tables[0];
    const auto& sliding = s.block_tables[1];
    ASSERT_EQ(std::ssize(full), (end + 3) / 4);
    ASSERT_EQ(sliding.size(), full.size());
    for (int64_t b = std::max<int64_t>(0, first - 6 + 1) / 4; b < std::ssize(sliding); ++b)
      EXPECT_NE(sliding[static_cast<size_t>(b)], kv::kNoBlock) << "block " << b << " at " << first;
    // Blocks wholly behind that window are back in the pool.
    for (int64_t b = 0; b < (first - 6 + 1) / 4; ++b)
      EXPECT_EQ(sliding[static_cast<size_t>(b)], kv::kNoBlock) << "block " << b << " at " << first;
    most_sliding = std::max(most_sliding, groups[1].pool.num_used());
    complete_step(step);
  }
  // Blocks of at most (8 + 6 - 1) keys, however long the sequence grows: ceil(13 / 4) + 1.
  EXPECT_LE(most_sliding, 5);
  EXPECT_EQ(groups[0].pool.num_used(), 13);  // 50 positions: the full group keeps them all
  sched.remove(&s);
  EXPECT_EQ(groups[0].pool.num_used(), 0);
  EXPECT_EQ(groups[1].pool.num_used(), 0);
}

TEST(Scheduler, ShortSlidingPoolHoldsAdmissionBack) {
  // The sliding group can hold one window's worth only: the second sequence waits for it.
  kv::KvGroup groups[] = {kv::KvGroup(100, 0), kv::KvGroup(3, 8)};
  Scheduler sched({16, 4, 4}, groups);
  Sequence a = make_seq(1, 8), b = make_seq(2, 8);
  sched.add(&a);
  sched.add(&b);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].seq, &a);
  EXPECT_EQ(groups[1].pool.num_used(), 2);
  EXPECT_EQ(groups[0].pool.num_used(), 2);  // nothing of b was allocated
  sched.remove(&a);
  sched.schedule(step);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].seq, &b);
}

}  // namespace
}  // namespace inferd::engine

namespace inferd::engine {
namespace {

TEST(Scheduler, ForkSharesFullBlocksAndCopiesThePartlyFilledOne) {
  kv::KvGroup full(20, 0);
  Scheduler sched({64, 4, 4}, {&full, 1});
  std::vector<std::tuple<size_t, int32_t, int32_t>> copies;
  sched.set_block_copier(
      [&](size_t g, int32_t from, int32_t to) { copies.emplace_back(g, from, to); });
  Sequence parent = make_seq(1, 10), child, late;
  parent.slots = 3;
  sched.add(&parent);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  complete_step(step);  // 10 computed: blocks 0, 1 full, block 2 holds 2 of 4
  ASSERT_EQ(parent.block_tables[0].size(), 3u);
  sched.fork(parent, child);
  EXPECT_EQ(parent.slots, 2);
  EXPECT_EQ(child.slots, 1);
  EXPECT_EQ(child.tokens, parent.tokens);
  EXPECT_EQ(child.num_computed, parent.num_computed);
  ASSERT_EQ(child.block_tables[0].size(), 3u);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(child.block_tables[0][b], parent.block_tables[0][b]);
    EXPECT_EQ(full.pool.ref_count(parent.block_tables[0][b]), 2);
  }
  EXPECT_NE(child.block_tables[0][2], parent.block_tables[0][2]);
  EXPECT_EQ(full.pool.ref_count(child.block_tables[0][2]), 1);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0],
            std::make_tuple(size_t{0}, parent.block_tables[0][2], child.block_tables[0][2]));
  EXPECT_EQ(sched.num_running(), 2u);
  // Both decode next step, each into its own block.
  sched.schedule(step);
  EXPECT_EQ(step.size(), 2u);
  complete_step(step);
  // A fork without a spare slot is refused; one at a block boundary copies nothing.
  Sequence other;
  parent.slots = 1;
  EXPECT_THROW(sched.fork(parent, other), Error);
  parent.slots = 2;
  while (parent.num_computed % 4 != 0) {
    sched.schedule(step);
    complete_step(step);
  }
  copies.clear();
  sched.fork(parent, late);
  EXPECT_TRUE(copies.empty());
  sched.remove(&parent);
  sched.remove(&child);
  sched.remove(&late);
  EXPECT_EQ(full.pool.num_free(), 20);
}

// State slots (a hybrid model's state, a quantized cache's exact copies): a sequence admitted
// takes a slot and has it cleared (copy from kNoSlot: the copies of its last owner must not be
// read as its own, as they would after a prefix found in the cache), a fork copies its parent's
// into a slot of its own, and a finished sequence gives its slot back.
TEST(Scheduler, StateSlotsAreClearedWhenTakenAndCopiedByForks) {
  kv::KvGroup full(20, 0);
  kv::BlockPool slots(2);
  Scheduler sched({64, 4, 4}, {&full, 1});
  std::vector<std::pair<int32_t, int32_t>> copies;
  sched.set_block_copier([](size_t, int32_t, int32_t) {});
  sched.set_state_pool(&slots, [&](int32_t from, int32_t to) { copies.emplace_back(from, to); });
  Sequence first = make_seq(1, 6), child;
  first.slots = 2;
  sched.add(&first);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  ASSERT_GE(first.state_slot, 0);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0], std::make_pair(kv::KvCache::kNoSlot, first.state_slot));
  complete_step(step);
  copies.clear();
  ASSERT_TRUE(sched.fork(first, child));
  ASSERT_GE(child.state_slot, 0);
  EXPECT_NE(child.state_slot, first.state_slot);
  ASSERT_EQ(copies.size(), 2u);  // cleared as taken, then the parent's
  EXPECT_EQ(copies[0], std::make_pair(kv::KvCache::kNoSlot, child.state_slot));
  EXPECT_EQ(copies[1], std::make_pair(first.state_slot, child.state_slot));
  const int32_t reused = first.state_slot;
  sched.remove(&first);
  EXPECT_EQ(slots.num_free(), 1);
  Sequence next = make_seq(2, 5);
  copies.clear();
  sched.add(&next);
  sched.schedule(step);
  EXPECT_EQ(next.state_slot, reused);
  ASSERT_FALSE(copies.empty());
  EXPECT_EQ(copies[0], std::make_pair(kv::KvCache::kNoSlot, reused));
  sched.remove(&child);
  sched.remove(&next);
}

// Snapshots that are optional (a quantized cache's exact copies): a cached prefix is taken
// whole, and a snapshot only where it ends. One that ends earlier is not loaded (its copies of
// the blocks past its end may hold positions their writer rejected, or wrote in part), and the
// prefix is not cut back to it as a hybrid model's is.
TEST(Scheduler, OptionalSnapshotsAreLoadedOnlyWhereThePrefixEnds) {
  kv::KvGroup groups[] = {kv::KvGroup(32, 0)};
  kv::PrefixCache cache(groups, 4, 16);
  kv::BlockPool slots(2), snapshots(4);
  Scheduler sched({64, 2, 4}, groups, &cache);
  sched.set_block_copier([](size_t, int32_t, int32_t) {});
  sched.set_state_pool(&slots, [](int32_t, int32_t) {});
  std::vector<std::pair<int32_t, int32_t>> loads;
  sched.set_snapshots(
      &snapshots, [](int32_t, int32_t) {},
      [&](int32_t from, int32_t to) { loads.emplace_back(from, to); }, /*required=*/false);
  // 12 tokens (3 blocks of 4) in the cache, and a snapshot at the end of the second block.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(100 + i);
  kv::PrefixState written{kv::PrefixCache::root_key(""), {}, 0};
  kv::BlockTables tables;
  for (int i = 0; i < 3; ++i) tables[0].push_back(*groups[0].pool.allocate());
  cache.index_computed(tokens, 12, written, tables);
  kv::release_blocks(groups, tables);
  const int32_t early = *snapshots.allocate();
  ASSERT_TRUE(snapshots.index(early, written.hashes[1]));
  snapshots.release(early);
  const auto admit = [&](uint64_t id) {
    Sequence s = make_seq(id, 14);
    std::copy(tokens.begin(), tokens.end(), s.tokens.begin());
    s.prefix.root = written.root;
    return s;
  };
  Sequence a = admit(1);
  sched.add(&a);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  EXPECT_EQ(a.num_cached_tokens, 12) << "the prefix was cut back to the snapshot";
  EXPECT_TRUE(loads.empty()) << "a snapshot that ends before the prefix was loaded";
  sched.remove(&a);
  // With a snapshot at the prefix's end as well, that one is loaded.
  const int32_t at_end = *snapshots.allocate();
  ASSERT_TRUE(snapshots.index(at_end, written.hashes[2]));
  snapshots.release(at_end);
  Sequence b = admit(2);
  sched.add(&b);
  sched.schedule(step);
  EXPECT_EQ(b.num_cached_tokens, 12);
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0], std::make_pair(at_end, b.state_slot));
  sched.remove(&b);
}

TEST(Scheduler, AdmissionCountsABeamSearchsSlots) {
  kv::KvGroup full(100, 0);
  Scheduler sched({64, 4, 4}, {&full, 1});
  Sequence a = make_seq(1, 4), beams = make_seq(2, 4), c = make_seq(3, 4);
  beams.slots = 3;
  sched.add(&a);
  sched.add(&beams);
  sched.add(&c);
  std::vector<ScheduledSequence> step;
  sched.schedule(step);
  EXPECT_EQ(step.size(), 2u);  // a (1 slot) + the beams (3): c waits for a slot
  EXPECT_EQ(sched.num_waiting(), 1u);
  sched.remove(&a);
  sched.schedule(step);
  EXPECT_EQ(sched.num_waiting(), 0u);
  sched.remove(&beams);
  sched.remove(&c);
}

}  // namespace
}  // namespace inferd::engine
