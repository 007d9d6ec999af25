// Data-parallel attention (dist/model_parallel.h, `--data-parallel N`): every rank holds the
// whole model but (with --expert-parallel) its share of the experts, and runs only its own
// sequences of each step's batch: their embeddings, attention (or recurrent) layers and dense
// feed-forwards, and the router of their tokens; the MoE layers send tokens to their experts'
// ranks and back (model/moe.h). The final residual rows that rank 0 needs for logits and hidden
// states come back to it in one gather.
//
// A sequence belongs to the rank that computed its first step (its first token at position 0):
// new sequences go to the ranks in turn. Its rank is kept by its first block (of the first
// full-attention KV group), on every rank alike, as every rank sees the same batches and block
// copies in the same order: a prefix-cache hit shares its first block with the sequence that
// wrote the K/V (and the recurrent state) it reads, and so its rank, and a fork's copy of that
// block takes the rank with it. A sequence preempted and taken up again starts over at position
// 0 and may go to another rank.
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
// in batch order, so the bf16 rows stay a suffix), and how its rows map to the whole batch's.
// The buffers are sized once for max_tokens.
class LocalBatch {
 public:
  explicit LocalBatch(int64_t max_tokens);
  // Places the batch's new sequences, then returns this rank's part of `batch` (valid until the
  // next select). No logit or hidden rows: rank 0 computes those for the whole batch from the
  // gathered final rows. An inferd::Error for a sequence that continues with no rank known.
  const Batch& select(const Batch& batch, const kv::KvCache& cache, int rank, int ranks);
  // A block copy (a beam's or a fork's copy-on-write): `to` takes the rank of `from`.
  void block_copied(size_t group, int32_t from, int32_t to);
  // Of the last select: the whole batch's row of each local row.
  std::span<const int32_t> global_rows() const { return global_rows_; }
  // Of the last select: the batch rows of `rank`'s tokens among the logit rows, then among the
  // hidden-state rows, in list order (what rank 0 needs of it), or (tokens) all its tokens in
  // batch order. Every rank computes them alike for every rank.
  int64_t final_rows_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const;
  int64_t tokens_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const;

 private:
  std::vector<int32_t> tokens_, positions_, global_rows_;
  std::vector<BatchSequence> entries_;
  std::vector<int> entry_owner_;  // [batch entries] of the last select
  std::vector<int> row_owner_;    // [batch tokens] of the last select
  std::vector<int8_t> block_owner_;  // [placing group's blocks] -1: none
  size_t group_ = 0;                 // the placing group
  int next_rank_ = 0;                // the rank the next new sequence goes to
  Batch local_;
};

}  // namespace inferd::model
