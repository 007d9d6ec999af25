#include "model/data_parallel.h"

#include "util/error.h"

namespace inferd::model {

size_t placing_group(const kv::KvCache& cache) {
  const auto groups = cache.groups();
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].window == 0) return g;
  fail("data parallelism: every KV group slides, so no block stays to place a sequence by");
}

LocalBatch::LocalBatch(int64_t max_tokens) {
  const auto T = static_cast<size_t>(max_tokens);
  tokens_.reserve(T);
  positions_.reserve(T);
  global_rows_.reserve(T);
  entries_.reserve(T);  // (an entry holds a token at least)
  entry_owner_.reserve(T);
  row_owner_.reserve(T);
}

const Batch& LocalBatch::select(const Batch& batch, const kv::KvCache& cache, int rank, int ranks) {
  group_ = placing_group(cache);
  const auto blocks = static_cast<size_t>(cache.groups()[group_].pool.num_blocks());
  if (block_owner_.size() != blocks) block_owner_.assign(blocks, -1);  // (once per cache)
  tokens_.clear();
  positions_.clear();
  global_rows_.clear();
  entries_.clear();
  entry_owner_.clear();
  row_owner_.assign(static_cast<size_t>(batch.num_tokens()), -1);  // (within its capacity)
  int64_t bf16_begin = 0;
  for (const BatchSequence& seq : batch.sequences) {
    const std::vector<int32_t>& table = (*seq.block_tables)[group_];
    if (table.empty() || table[0] == kv::kNoBlock || static_cast<size_t>(table[0]) >= blocks)
      fail("data parallelism: a sequence without its first block");
    int8_t& owner = block_owner_[static_cast<size_t>(table[0])];
    const bool starts = seq.token_end > seq.token_begin &&
                        batch.positions[static_cast<size_t>(seq.token_begin)] == 0;
    if (starts) {  // a new sequence (or one started over): the next rank in turn
      owner = static_cast<int8_t>(next_rank_);
      next_rank_ = (next_rank_ + 1) % ranks;
    } else if (owner < 0 || owner >= ranks) {
      fail("data parallelism: a sequence continues at position {} with no rank holding its K/V",
           batch.positions[static_cast<size_t>(seq.token_begin)]);
    }
    entry_owner_.push_back(owner);
    for (int64_t t = seq.token_begin; t < seq.token_end; ++t) row_owner_[static_cast<size_t>(t)] = owner;
    if (owner != rank) continue;
    BatchSequence& part = entries_.emplace_back(seq);
    part.token_begin = std::ssize(tokens_);
    for (int64_t t = seq.token_begin; t < seq.token_end; ++t) {
      tokens_.push_back(batch.tokens[static_cast<size_t>(t)]);
      positions_.push_back(batch.positions[static_cast<size_t>(t)]);
      global_rows_.push_back(static_cast<int32_t>(t));
      if (t < batch.bf16_rows_begin) ++bf16_begin;
    }
    part.token_end = std::ssize(tokens_);
    part.mtp_prev_hidden = nullptr;
  }
  local_ = Batch{tokens_, positions_, entries_, {}};
  // The whole batch's bf16 rows are a suffix of it, and so are this rank's of its own.
  local_.bf16_rows_begin =
      batch.bf16_rows_begin >= batch.num_tokens() ? local_.bf16_rows_begin : bf16_begin;
  return local_;
}

void LocalBatch::block_copied(size_t group, int32_t from, int32_t to) {
  if (group != group_ || block_owner_.empty()) return;
  const auto n = std::ssize(block_owner_);
  if (from < 0 || from >= n || to < 0 || to >= n) return;
  block_owner_[static_cast<size_t>(to)] = block_owner_[static_cast<size_t>(from)];
}

int64_t LocalBatch::final_rows_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const {
  int64_t n = 0;
  for (const std::span<const int32_t> list : {batch.logit_rows, batch.hidden_rows}) {
    for (const int32_t t : list) {
      if (row_owner_[static_cast<size_t>(t)] != rank) continue;
      if (rows != nullptr) rows->push_back(t);
      ++n;
    }
  }
  return n;
}

int64_t LocalBatch::tokens_of(const Batch& batch, int rank, std::vector<int32_t>* rows) const {
  int64_t n = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    if (entry_owner_[i] != rank) continue;
    const BatchSequence& seq = batch.sequences[i];
    for (int64_t t = seq.token_begin; t < seq.token_end; ++t) {
      if (rows != nullptr) rows->push_back(static_cast<int32_t>(t));
      ++n;
    }
  }
  return n;
}

}  // namespace inferd::model
