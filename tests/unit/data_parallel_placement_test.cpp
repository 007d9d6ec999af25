// Data parallelism's placement and records (model/data_parallel.h), on hand-made batches over a
// small KV cache: new sequences go to the least loaded rank (ties in turn) and a rank's part of
// the batch keeps its tokens in order, with the bf16 rows still a suffix; a continuing sequence
// runs where its first block was written, and a copy of a block or a state takes its rank along;
// a sequence that would read a block or a state another rank wrote, or that continues with no
// rank known, is an error naming it; the rows rank 0 gathers are each rank's own.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/data_parallel.h"
#include "util/error.h"

namespace inferd::model {
namespace {

kv::KvCacheConfig small_cache() {
  kv::KvCacheConfig c;
  c.n_layers = 1;
  c.n_kv_heads = 1;
  c.head_dim = 32;
  c.block_size = 4;
  c.num_blocks = 32;
  c.state_floats = 8;
  c.num_state_slots = 4;
  c.num_snapshot_slots = 2;
  return c;
}

// Entries of a batch: each a table, a first position and a token count (tokens are their
// positions).
struct Entry {
  kv::BlockTables tables;
  int32_t first;
  int32_t count;
  int32_t state = -1;
};

struct HandBatch {
  std::vector<int32_t> tokens, positions, logit_rows;
  std::vector<BatchSequence> sequences;
  Batch batch;
  HandBatch(std::vector<Entry>& entries, int64_t bf16_from = std::numeric_limits<int64_t>::max()) {
    for (Entry& e : entries) {
      const auto begin = static_cast<int64_t>(tokens.size());
      for (int32_t p = e.first; p < e.first + e.count; ++p) {
        tokens.push_back(p);
        positions.push_back(p);
      }
      sequences.push_back({begin, static_cast<int64_t>(tokens.size()), &e.tables, e.state});
      logit_rows.push_back(static_cast<int32_t>(tokens.size() - 1));
    }
    batch = Batch{tokens, positions, sequences, logit_rows, bf16_from};
  }
};

std::string error_of(LocalBatch& local, const Batch& batch, const kv::KvCache& cache, int rank) {
  try {
    local.select(batch, cache, rank, 2);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DataParallelPlacement, NewSequencesGoToTheLeastLoadedRankAndStay) {
  kv::KvCache cache(small_cache());
  LocalBatch r0(64), r1(64);  // the two ranks' views, given the same batches
  // A: 6 tokens, B: 3, C: 2 (all new): A to rank 0, B to rank 1, C to rank 1 (3 < 6).
  std::vector<Entry> e = {{cache.allocate_sequence(16), 0, 6}, {cache.allocate_sequence(16), 0, 3},
                          {cache.allocate_sequence(16), 0, 2}};
  HandBatch first(e, /*bf16_from=*/6);  // A's rows take the int8 route, B's and C's bf16
  const Batch& mine0 = r0.select(first.batch, cache, 0, 2);
  const Batch& mine1 = r1.select(first.batch, cache, 1, 2);
  EXPECT_EQ(mine0.num_tokens(), 6);
  EXPECT_EQ(mine1.num_tokens(), 5);
  EXPECT_GE(mine0.bf16_rows_begin, mine0.num_tokens());                   // none of A's
  EXPECT_EQ(mine1.bf16_rows_begin, 0);                                    // all of B's and C's
  EXPECT_EQ(std::vector<int32_t>(r1.global_rows().begin(), r1.global_rows().end()),
            (std::vector<int32_t>{6, 7, 8, 9, 10}));
  std::vector<int32_t> rows;
  EXPECT_EQ(r0.final_rows_of(first.batch, 1, &rows), 2);  // B's and C's logit rows
  EXPECT_EQ(rows, (std::vector<int32_t>{8, 10}));
  EXPECT_EQ(r0.rank_of_block(0, e[0].tables[0][0]), 0);
  EXPECT_EQ(r0.rank_of_block(0, e[1].tables[0][0]), 1);
  EXPECT_EQ(r1.rank_of_block(0, e[2].tables[0][1]), -1);  // (not written yet)
  // Next step: each decodes one token, where it began; and D (new, 1 token) goes to the rank
  // with fewer tokens this step: rank 0 has A's 1, rank 1 has B's and C's 2.
  std::vector<Entry> next = {{e[0].tables, 6, 1}, {e[1].tables, 3, 1}, {e[2].tables, 2, 1},
                             {cache.allocate_sequence(16), 0, 1}};
  HandBatch second(next);
  EXPECT_EQ(r0.select(second.batch, cache, 0, 2).num_tokens(), 2);  // A and D
  EXPECT_EQ(r1.select(second.batch, cache, 1, 2).num_tokens(), 2);  // B and C
  EXPECT_EQ(r0.tokens_of(second.batch, 0, nullptr), 2);
}

TEST(DataParallelPlacement, CopiesTakeTheirRankAndStrangersAreErrors) {
  kv::KvCache cache(small_cache());
  LocalBatch local(64);
  std::vector<Entry> e = {{cache.allocate_sequence(16), 0, 6, cache.allocate_state()},
                          {cache.allocate_sequence(16), 0, 3, cache.allocate_state()}};
  HandBatch first(e);
  local.select(first.batch, cache, 0, 2);  // A on rank 0, B on rank 1
  // A fork of A whose partly filled second block (positions 4-7) is copied: it runs on rank 0.
  Entry fork{e[0].tables, 6, 1, cache.allocate_state()};
  const int32_t fresh = cache.allocate_sequence(4)[0][0];
  fork.tables[0][1] = fresh;
  local.block_copied(cache, 0, e[0].tables[0][1], fresh);
  local.state_copied(cache, e[0].state, fork.state);
  std::vector<Entry> forked = {fork};
  HandBatch with_fork(forked);
  EXPECT_EQ(local.select(with_fork.batch, cache, 0, 2).num_tokens(), 1);
  // A sequence that begins with A's block 0 (rank 0) but holds B's block 0 as its second block
  // (rank 1 wrote it): an error naming the block, not a wrong answer.
  Entry mixed{{}, 5, 1};
  mixed.tables[0] = {e[0].tables[0][0], e[1].tables[0][0], e[0].tables[0][2]};
  std::vector<Entry> bad = {mixed};
  HandBatch mixed_batch(bad);
  EXPECT_NE(error_of(local, mixed_batch.batch, cache, 0).find("would read KV block"), std::string::npos);
  // A state another rank wrote, loaded through a snapshot: also an error.
  local.snapshot_saved(cache, e[1].state, 0);
  EXPECT_EQ(local.rank_of_snapshot(0), 1);
  Entry a_again{e[0].tables, 6, 1, cache.allocate_state()};
  local.snapshot_loaded(cache, 0, a_again.state);
  std::vector<Entry> stray = {a_again};
  HandBatch stray_batch(stray);
  EXPECT_NE(error_of(local, stray_batch.batch, cache, 0).find("recurrent state"), std::string::npos);
  // A cleared state (a new sequence's slot, KvCache::kNoSlot) is nobody's: any rank may go on.
  local.state_copied(cache, kv::KvCache::kNoSlot, a_again.state);
  EXPECT_EQ(error_of(local, stray_batch.batch, cache, 0), "");
  // A sequence that continues on a first block nobody wrote.
  std::vector<Entry> unknown = {{cache.allocate_sequence(16), 4, 1}};
  HandBatch unknown_batch(unknown);
  EXPECT_NE(error_of(local, unknown_batch.batch, cache, 0).find("no rank holding"), std::string::npos);
}

}  // namespace
}  // namespace inferd::model
