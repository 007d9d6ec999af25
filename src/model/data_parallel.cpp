#include "model/data_parallel.h"

#include <algorithm>

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
  counted_.reserve(T);
  new_firsts_.reserve(T);
  step_tokens_.reserve(64);
}

void LocalBatch::count_continuing(const Batch& batch, int ranks) {
  step_tokens_.assign(static_cast<size_t>(ranks), 0);
  counted_.assign(batch.sequences.size(), 0);
  new_firsts_.clear();
  const auto first_block = [&](const BatchSequence& seq) {
    const std::vector<int32_t>& table = (*seq.block_tables)[group_];
    return table.empty() ? kv::kNoBlock : table[0];
  };
  const auto starts = [&](const BatchSequence& seq) {
    return seq.token_end > seq.token_begin && batch.positions[static_cast<size_t>(seq.token_begin)] == 0;
  };
  for (const BatchSequence& seq : batch.sequences)
    if (starts(seq)) new_firsts_.push_back(first_block(seq));
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& seq = batch.sequences[i];
    const int32_t first = first_block(seq);
    if (seq.token_end <= seq.token_begin || starts(seq) || first == kv::kNoBlock ||
        static_cast<size_t>(first) >= block_owner_[group_].size() ||
        std::find(new_firsts_.begin(), new_firsts_.end(), first) != new_firsts_.end())
      continue;  // (a new sequence's later part is counted where it is placed)
    const int owner = block_owner_[group_][static_cast<size_t>(first)];
    if (owner < 0 || owner >= ranks) continue;  // (place() says what is wrong)
    step_tokens_[static_cast<size_t>(owner)] += seq.token_end - seq.token_begin;
    counted_[i] = 1;
  }
}

void LocalBatch::fit(const kv::KvCache& cache) {
  const auto groups = cache.groups();
  const auto slots = static_cast<size_t>(cache.config().num_state_slots);
  const auto snapshots = static_cast<size_t>(cache.config().num_snapshot_slots);
  bool same = block_owner_.size() == groups.size() && slot_owner_.size() == slots &&
              snapshot_owner_.size() == snapshots;
  for (size_t g = 0; same && g < groups.size(); ++g)
    same = block_owner_[g].size() == static_cast<size_t>(groups[g].pool.num_blocks());
  if (same) return;
  block_owner_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    block_owner_[g].assign(static_cast<size_t>(groups[g].pool.num_blocks()), -1);
  slot_owner_.assign(slots, -1);
  snapshot_owner_.assign(snapshots, -1);
  group_ = placing_group(cache);
}

int LocalBatch::place(const Batch& batch, const BatchSequence& seq, const kv::KvCache& cache,
                      int ranks) {
  const int bs = cache.block_size();
  const std::vector<int32_t>& placing = (*seq.block_tables)[group_];
  if (placing.empty() || placing[0] == kv::kNoBlock ||
      static_cast<size_t>(placing[0]) >= block_owner_[group_].size())
    fail("data parallelism: a sequence without its first block");
  const int32_t first = batch.positions[static_cast<size_t>(seq.token_begin)];
  const int32_t last = batch.positions[static_cast<size_t>(seq.token_end - 1)];
  int owner = 0;
  if (first == 0) {  // a new sequence (or one started over): the least loaded rank
    owner = next_rank_;
    for (int k = 1; k < ranks; ++k) {
      const int r = (next_rank_ + k) % ranks;
      if (step_tokens_[static_cast<size_t>(r)] < step_tokens_[static_cast<size_t>(owner)]) owner = r;
    }
    next_rank_ = (owner + 1) % ranks;
  } else {
    owner = block_owner_[group_][static_cast<size_t>(placing[0])];
    if (owner < 0 || owner >= ranks)
      fail("data parallelism: a sequence continues at position {} with no rank holding its K/V",
           first);
    // What it reads of its earlier positions must be where it runs.
    for (size_t g = 0; g < block_owner_.size(); ++g) {
      const std::vector<int32_t>& table = (*seq.block_tables)[g];
      const auto held = std::min(table.size(), static_cast<size_t>((first - 1) / bs + 1));
      for (size_t i = 0; i < held; ++i) {
        if (table[i] == kv::kNoBlock) continue;
        const int holder = block_owner_[g][static_cast<size_t>(table[i])];
        if (holder != owner)
          fail("data parallelism: a sequence on rank {} would read KV block {} (group {}) that "
               "rank {} holds",
               owner, table[i], g, holder);
      }
    }
    const int state_holder =
        seq.state_slot >= 0 ? slot_owner_[static_cast<size_t>(seq.state_slot)] : -1;
    if (state_holder >= 0 && state_holder != owner)  // (-1: cleared, zeros on every rank)
      fail("data parallelism: a sequence on rank {} would read recurrent state {} that rank {} "
           "holds",
           owner, seq.state_slot, state_holder);
  }
  // The blocks and the state it writes now.
  for (size_t g = 0; g < block_owner_.size(); ++g) {
    const std::vector<int32_t>& table = (*seq.block_tables)[g];
    for (size_t i = static_cast<size_t>(first / bs); i <= static_cast<size_t>(last / bs) && i < table.size(); ++i)
      if (table[i] != kv::kNoBlock) block_owner_[g][static_cast<size_t>(table[i])] = static_cast<int8_t>(owner);
  }
  if (seq.state_slot >= 0) slot_owner_[static_cast<size_t>(seq.state_slot)] = static_cast<int8_t>(owner);
  return owner;
}

const Batch& LocalBatch::select(const Batch& batch, const kv::KvCache& cache, int rank, int ranks) {
  fit(cache);
  tokens_.clear();
  positions_.clear();
  global_rows_.clear();
  entries_.clear();
  entry_owner_.clear();
  row_owner_.assign(static_cast<size_t>(batch.num_tokens()), -1);  // (within its capacity)
  int64_t bf16_begin = 0;
  count_continuing(batch, ranks);
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& seq = batch.sequences[i];
    if (seq.token_end <= seq.token_begin) {
      entry_owner_.push_back(-1);
      continue;
    }
    const int owner = place(batch, seq, cache, ranks);
    if (!counted_[i]) step_tokens_[static_cast<size_t>(owner)] += seq.token_end - seq.token_begin;
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
  if (batch.bf16_rows_begin < batch.num_tokens()) local_.bf16_rows_begin = bf16_begin;
  return local_;
}

namespace {
// to's record becomes from's, where both are in range.
void copy_record(std::vector<int8_t>& owners, int32_t from, int32_t to) {
  const auto n = std::ssize(owners);
  if (from >= 0 && from < n && to >= 0 && to < n)
    owners[static_cast<size_t>(to)] = owners[static_cast<size_t>(from)];
}
}  // namespace

void LocalBatch::block_copied(const kv::KvCache& cache, size_t group, int32_t from, int32_t to) {
  fit(cache);
  if (group < block_owner_.size()) copy_record(block_owner_[group], from, to);
}

void LocalBatch::state_copied(const kv::KvCache& cache, int32_t from, int32_t to) {
  fit(cache);
  if (from == kv::KvCache::kNoSlot && to >= 0 && to < std::ssize(slot_owner_)) {
    slot_owner_[static_cast<size_t>(to)] = -1;  // cleared alike on every rank: nobody's
    return;
  }
  copy_record(slot_owner_, from, to);
}

void LocalBatch::snapshot_saved(const kv::KvCache& cache, int32_t state, int32_t snapshot) {
  fit(cache);
  if (state >= 0 && state < std::ssize(slot_owner_) && snapshot >= 0 &&
      snapshot < std::ssize(snapshot_owner_))
    snapshot_owner_[static_cast<size_t>(snapshot)] = slot_owner_[static_cast<size_t>(state)];
}

void LocalBatch::snapshot_loaded(const kv::KvCache& cache, int32_t snapshot, int32_t state) {
  fit(cache);
  if (state >= 0 && state < std::ssize(slot_owner_) && snapshot >= 0 &&
      snapshot < std::ssize(snapshot_owner_))
    slot_owner_[static_cast<size_t>(state)] = snapshot_owner_[static_cast<size_t>(snapshot)];
}

int LocalBatch::rank_of_block(size_t group, int32_t block) const {
  if (group >= block_owner_.size() || block < 0 || block >= std::ssize(block_owner_[group])) return -1;
  return block_owner_[group][static_cast<size_t>(block)];
}

int LocalBatch::rank_of_snapshot(int32_t snapshot) const {
  if (snapshot < 0 || snapshot >= std::ssize(snapshot_owner_)) return -1;
  return snapshot_owner_[static_cast<size_t>(snapshot)];
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
