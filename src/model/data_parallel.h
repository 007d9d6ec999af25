// Data-parallel attention (dist/model_parallel.h, `--data-parallel N`): every rank holds the
// whole model but its share of the vocabulary projection (and, with --expert-parallel, of the
// experts), and runs only its own
// sequences of each step's batch: their embeddings, attention (or recurrent) layers and dense
// feed-forwards, and the router of their tokens; the MoE layers send tokens to their experts'
// ranks and back (model/moe.h). The final residual rows of the logit and hidden-state rows go to
// every rank in one all-gather: each holds and computes 1/N of the vocabulary projection, whose
// slices rank 0 gathers, as under tensor parallelism.
//
// A sequence belongs to the rank that computed its first step (its first token at position 0):
// a new sequence goes to the rank with the fewest tokens in the step so far (the sequences that
// go on where they are counted first, then the new ones in batch order; ties in turn), so that
// a prompt's chunk and the decoding sequences spread over the ranks. Every rank records which
// rank wrote each KV block and each recurrent state (slot and snapshot), alike, as every rank
// sees the same batches and copies in the same order. A sequence goes on where its first block (of the first
// full-attention KV group) was written; a fork's copy of a block, or of a state, takes the rank
// along. A prefix-cache hit may only take blocks and a snapshot of one rank (kv::PrefixCache's
// block rank, the scheduler's snapshot check ask rank_of_block and rank_of_snapshot): a sequence
// that would read a block or a state another rank holds is an error, never a silent wrong
// answer. A sequence preempted and taken up again starts over at position 0 and may go to
// another rank.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "model/batch.h"

namespace inferd::model {

// The KV group whose first block places a sequence: the first full-attention group. An
// inferd::Error when every group slides (its first blocks are freed behind the window).
size_t placing_group(const kv::KvCache& cache);

// One rank's part of a step's batch: the entries it owns, as a batch of their own (their tokens
// in batch order, so the bf16 rows stay a suffix), and how its rows map to the whole batch's;
// and the record of which rank holds what. The buffers are sized once for max_tokens (the
// records once per cache).
class LocalBatch {
 public:
  explicit LocalBatch(int64_t max_tokens);
  // Places the batch's new sequences, records the blocks and state slots its entries write,
  // then returns this rank's part of `batch` (valid until the next select). No logit or hidden
  // rows: rank 0 computes those for the whole batch from the gathered final rows. An
  // inferd::Error for a sequence that would read K/V or a state that its rank does not hold.
  const Batch& select(const Batch& batch, const kv::KvCache& cache, int rank, int ranks);
  // Copies (a beam's or a fork's copy-on-write, a hybrid's fork and prefix snapshots): the
  // copy takes the rank of what it copies.
  void block_copied(const kv::KvCache& cache, size_t group, int32_t from, int32_t to);
  void state_copied(const kv::KvCache& cache, int32_t from, int32_t to);
  void snapshot_saved(const kv::KvCache& cache, int32_t state, int32_t snapshot);
  void snapshot_loaded(const kv::KvCache& cache, int32_t snapshot, int32_t state);
  // The rank that holds a block's K/V or a snapshot's state; -1: none known.
  int rank_of_block(size_t group, int32_t block) const;
  int rank_of_snapshot(int32_t snapshot) const;
  // Of the last select: the whole batch's row of each local row.
  std::span<const int32_t> global_rows() const { return global_rows_; }
  // Of the last select: the batch rows of `rank`'s tokens among the logit rows, then among the
  // hidden-state rows, in list order (what rank 0 needs of it), or (tokens) all its tokens in
  // batch order. Every rank computes them alike for every rank.
  int64_t final_rows_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const;
  int64_t tokens_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const;

 private:
  void fit(const kv::KvCache& cache);  // sizes the records for this cache (once)
  // The entry's rank, placing a new sequence; checks what it reads; records what it writes.
  int place(const Batch& batch, const BatchSequence& seq, const kv::KvCache& cache, int ranks);
  // step_tokens_: the tokens of the entries that go on where they are (whose first block no
  // new entry of the batch also starts), by rank; counted_ marks those entries.
  void count_continuing(const Batch& batch, int ranks);
  std::vector<int32_t> tokens_, positions_, global_rows_;
  std::vector<BatchSequence> entries_;
  std::vector<int> entry_owner_;  // [batch entries] of the last select
  std::vector<int> row_owner_;    // [batch tokens] of the last select
  // The rank that wrote each block of each KV group, each state slot, each snapshot (-1: none).
  std::vector<std::vector<int8_t>> block_owner_;
  std::vector<int8_t> slot_owner_, snapshot_owner_;
  size_t group_ = 0;   // the placing group
  int next_rank_ = 0;  // where a tie between the least loaded ranks goes (in turn)
  std::vector<int64_t> step_tokens_;  // [ranks]
  std::vector<uint8_t> counted_;      // [batch entries]
  std::vector<int32_t> new_firsts_;   // first blocks of the batch's new entries
  Batch local_;
};

}  // namespace inferd::model
