#include "engine/scheduler.h"

#include <algorithm>
#include <optional>

#include "util/error.h"

namespace inferd::engine {

Scheduler::Scheduler(const SchedulerConfig& config, std::span<kv::KvGroup> groups,
                     kv::PrefixCache* prefix_cache)
    : config_(config), groups_(groups), prefix_cache_(prefix_cache) {
  if (groups.empty() || groups.size() > kv::kMaxKvGroups)
    fail("scheduler: {} KV groups (1 to {})", groups.size(), kv::kMaxKvGroups);
  if (config.max_batched_tokens <= 0 || config.max_seqs <= 0 || config.block_size <= 0) {
    fail("scheduler: max_batched_tokens, max_seqs and block_size must be positive");
  }
  running_.reserve(static_cast<size_t>(config.max_seqs));
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::free_behind_window(Sequence& seq, size_t group) {
  // The step's first token (at num_computed) sees the most of the past; blocks before the
  // first one it reads are never read again.
  std::vector<int32_t>& table = seq.block_tables[group];
  const int64_t behind = std::min<int64_t>(
      groups_[group].first_block_seen(seq.num_computed, config_.block_size), std::ssize(table));
  for (int64_t i = behind - 1; i >= 0 && table[static_cast<size_t>(i)] != kv::kNoBlock; --i) {
    groups_[group].pool.release(table[static_cast<size_t>(i)]);
    table[static_cast<size_t>(i)] = kv::kNoBlock;
  }
}

bool Scheduler::reserve_blocks(Sequence& seq, int64_t n) {
  const int64_t blocks = (seq.num_computed + n + config_.block_size - 1) / config_.block_size;
  for (size_t g = 0; g < groups_.size(); ++g) free_behind_window(seq, g);
  return kv::grow_tables(groups_, seq.block_tables, blocks);
}

bool Scheduler::shares_a_running_prefill(const Sequence& seq, int64_t cached) const {
  const std::vector<uint64_t>& mine = seq.prefix.hashes;
  for (const Sequence* other : running_) {
    if (other->num_computed >= other->num_prompt_tokens || other->prefix.root != seq.prefix.root)
      continue;
    // Blocks of its prompt that it is computing and that this sequence's prompt starts with.
    const std::vector<uint64_t>& theirs = other->prefix.hashes;
    const size_t n = std::min(mine.size(), theirs.size());
    size_t common = 0;
    while (common < n && mine[common] == theirs[common]) ++common;
    if (static_cast<int64_t>(common) * config_.block_size > cached) return true;
  }
  return false;
}

void Scheduler::free_blocks(Sequence& seq) {
  kv::release_blocks(groups_, seq.block_tables);
  for (int32_t* slot : {&seq.state_slot, &seq.checkpoint_slot}) {
    if (*slot >= 0) state_pool_->release(*slot);
    *slot = -1;
  }
  if (seq.snapshot_slot >= 0) snapshot_pool_->release(seq.snapshot_slot);
  seq.snapshot_slot = -1;
  seq.snapshot_blocks = 0;
}

int64_t Scheduler::prompt_snapshot_end(const Sequence& seq) const {
  if (snapshot_pool_ == nullptr) return 0;
  return seq.num_prompt_tokens / config_.block_size * config_.block_size;
}

int64_t Scheduler::step_tokens(const Sequence& seq, int64_t n) const {
  if (!snapshots_required_) return n;  // exact copies are kept past a block end too
  const int64_t end = prompt_snapshot_end(seq);
  if (seq.num_computed < end && seq.num_computed + n > end) return end - seq.num_computed;
  return n;
}

int64_t Scheduler::fit_prompt_rows(const Sequence& seq, int64_t n, int64_t& rows) {
  const int64_t begin = seq.num_computed;
  if (seq.prompt_logit_rows(begin, begin + n) > rows)
    n = std::max(begin, seq.prompt_logprobs_next) + rows - begin;
  rows -= seq.prompt_logit_rows(begin, begin + n);
  return n;
}

int64_t Scheduler::snapshot_prefix(Sequence& seq, int64_t cached, int32_t& snapshot) {
  snapshot = -1;
  int64_t blocks = cached / config_.block_size;
  // Optional snapshots (exact copies) only where the prefix ends: a snapshot's copies of blocks
  // at or past its own end can hold positions a rejected draft wrote, harmless to a sequence
  // that resumes there (it writes those blocks again before reading them) but not to one that
  // resumes further on and would read them as its prefix.
  const int64_t shortest = snapshots_required_ ? 1 : std::max<int64_t>(blocks, 1);
  for (; blocks >= shortest; --blocks) {
    const std::optional<int32_t> found =
        snapshot_pool_->find(seq.prefix.hashes[static_cast<size_t>(blocks - 1)]);
    if (found && (!snapshot_check_ || snapshot_check_(seq.block_tables, *found))) {
      snapshot_pool_->retain(*found);
      snapshot = *found;
      break;
    }
  }
  if (!snapshots_required_) return cached;
  // The blocks past the last kept state are let go of (hybrid models have no sliding groups).
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& table = seq.block_tables[g];
    while (std::ssize(table) > blocks) {
      if (table.back() != kv::kNoBlock) groups_[g].pool.release(table.back());
      table.pop_back();
    }
  }
  return blocks * config_.block_size;
}

void Scheduler::publish_snapshot(int32_t slot, uint64_t hash) {
  snapshot_pool_->index(slot, hash);  // false when the hash has a snapshot already: kept as is
  snapshot_pool_->release(slot);
}

void Scheduler::snapshot_after_step(Sequence& seq) {
  if (snapshot_pool_ == nullptr || seq.state_slot < 0 || seq.num_draft > 0) return;
  const int64_t bs = config_.block_size;
  // A recurrent state is kept only at a block end a step stopped at. Exact copies are kept for
  // the last block end a step reached or passed: a snapshot of block end e is loaded only into
  // a sequence that resumes exactly at e (snapshot_prefix), which reads block 0 and the blocks
  // before e from it and writes block e and later again before it reads them, so what this
  // sequence wrote past e (part of a block, drafts it then rejected) does not matter. Drafts
  // skip block ends, and a prompt needs no step that stops at its last one.
  if (snapshots_required_ && seq.num_computed % bs != 0) return;
  const int64_t blocks = seq.num_computed / bs;
  if (blocks == 0 || blocks > std::ssize(seq.prefix.hashes)) return;
  const uint64_t hash = seq.prefix.hashes[static_cast<size_t>(blocks - 1)];
  if (blocks == prompt_snapshot_end(seq) / bs && !snapshot_pool_->find(hash)) {
    if (const std::optional<int32_t> copy = snapshot_pool_->allocate()) {
      save_snapshot_(seq.state_slot, *copy);
      publish_snapshot(*copy, hash);
    }
  }
  if (seq.snapshot_slot < 0) return;
  if (!snapshots_required_ && blocks == seq.snapshot_blocks) return;  // (saved at this end)
  save_snapshot_(seq.state_slot, seq.snapshot_slot);
  seq.snapshot_blocks = blocks;
}

bool Scheduler::take_state_slot(Sequence& seq) {
  if (state_pool_ == nullptr || seq.state_slot >= 0) return true;
  if (state_pool_->num_free() < (state_checkpoints_ ? 2 : 1)) return false;
  seq.state_slot = *state_pool_->allocate();
  // A new owner: no exact copies of blocks it did not write (kv/kv_cache.h); a recurrent state
  // is started from zero at position 0 or loaded from a snapshot.
  if (copy_state_) copy_state_(kv::KvCache::kNoSlot, seq.state_slot);
  if (state_checkpoints_) seq.checkpoint_slot = *state_pool_->allocate();
  // Its own snapshot slot, when one is free (the pool's spare slots hold published ones).
  if (snapshot_pool_ != nullptr) {
    if (const std::optional<int32_t> slot = snapshot_pool_->allocate()) seq.snapshot_slot = *slot;
  }
  return true;
}

void Scheduler::preempt(Sequence& seq) {
  free_blocks(seq);
  seq.drop_drafts();     // recomputed tokens must be real ones
  seq.num_computed = 0;  // recomputed from scratch (prompt + what was generated so far)
  seq.num_preemptions += 1;
  num_preemptions_ += 1;
  seq.status = SequenceStatus::kWaiting;
  waiting_.push_front(&seq);
}

void Scheduler::schedule(std::vector<ScheduledSequence>& out, int max_seqs) {
  out.clear();
  int64_t budget = config_.max_batched_tokens;
  int64_t prompt_rows = config_.max_prompt_logit_rows;
  const auto cap = static_cast<size_t>(max_seqs < 0 ? config_.max_seqs : std::min(max_seqs, config_.max_seqs));
  // Running sequences first, oldest first; preempt from the newest end when blocks run out.
  const auto full = [&] { return out.size() >= cap; };
  for (size_t i = 0; i < running_.size() && budget > 0 && !full();) {
    Sequence& seq = *running_[i];
    int64_t rows = prompt_rows;
    const int64_t n =
        seq.in_flight
            ? 0
            : fit_prompt_rows(seq, step_tokens(seq, std::min(seq.num_uncomputed(), budget)), rows);
    if (n <= 0) {
      ++i;
      continue;
    }
    if (reserve_blocks(seq, n)) {
      out.push_back({&seq, n});
      budget -= n;
      prompt_rows = rows;
      ++i;
      continue;
    }
    // Not enough blocks: free the newest running sequence not in flight (possibly this one, at
    // the latest) and retry.
    const auto newest = std::find_if(running_.rbegin(), running_.rend(),
                                     [](const Sequence* s) { return !s->in_flight; });
    if (newest == running_.rend()) break;  // (never: this one is not in flight)
    Sequence* victim = *newest;
    running_.erase(std::next(newest).base());
    for (const ScheduledSequence& s : out) {
      if (s.seq == victim) {
        budget += s.num_new_tokens;
        prompt_rows += victim->prompt_logit_rows(victim->num_computed,
                                                 victim->num_computed + s.num_new_tokens);
      }
    }
    std::erase_if(out, [&](const ScheduledSequence& s) { return s.seq == victim; });
    preempt(*victim);
    if (victim == &seq) break;
  }
  // Then waiting sequences in arrival order, while there is room.
  while (!waiting_.empty() && budget > 0 && !full()) {
    Sequence& seq = *waiting_.front();
    if (running_slots() + seq.slots > config_.max_seqs) break;
    int64_t cached = 0;
    int32_t snapshot = -1;  // the state kept at the end of (a part of) the cached prefix
    const bool lookup = prefix_cache_ != nullptr && !seq.needs_every_position();
    if (lookup && seq.num_computed == 0) {
      cached = prefix_cache_->match(seq.tokens, seq.prefix, seq.block_tables);
      if (snapshot_pool_ != nullptr) cached = snapshot_prefix(seq, cached, snapshot);
      seq.num_computed = cached;
      if (shares_a_running_prefill(seq, cached)) {  // wait for those blocks rather than redo them
        if (snapshot >= 0) snapshot_pool_->release(snapshot);
        free_blocks(seq);
        seq.num_computed = 0;
        break;
      }
    }
    int64_t rows = prompt_rows;
    const int64_t n =
        fit_prompt_rows(seq, step_tokens(seq, std::min(seq.num_uncomputed(), budget)), rows);
    if (n <= 0 || !reserve_blocks(seq, n) || !take_state_slot(seq)) {  // FCFS: no overtaking
      if (snapshot >= 0) snapshot_pool_->release(snapshot);
      free_blocks(seq);             // the cached blocks it took wait in the free list again
      seq.num_computed = 0;
      break;
    }
    if (snapshot >= 0) {  // the state after the cached prefix
      load_snapshot_(snapshot, seq.state_slot);
      snapshot_pool_->release(snapshot);
    }
    if (seq.num_cached_tokens < 0) {  // first admission: what the request found cached
      seq.num_cached_tokens = cached;
      if (lookup) prefix_cache_->count(seq.num_tokens(), cached);
    }
    waiting_.pop_front();
    seq.status = SequenceStatus::kRunning;
    running_.push_back(&seq);
    out.push_back({&seq, n});
    budget -= n;
    prompt_rows = rows;
  }
}

int64_t Scheduler::running_slots() const {
  int64_t slots = 0;
  for (const Sequence* seq : running_) slots += seq->slots;
  return slots;
}

bool Scheduler::fork(Sequence& parent, Sequence& child) {
  if (parent.slots < 2) fail("scheduler: fork of sequence {} without a spare slot", parent.id);
  parent.slots -= 1;
  child.slots = 1;
  if (parent.num_draft > 0) fail("scheduler: fork of sequence {} with drafts", parent.id);
  child.tokens.assign(parent.tokens.begin(), parent.tokens.end());
  child.num_draft = 0;
  child.mtp_hidden.assign(parent.mtp_hidden.begin(), parent.mtp_hidden.end());
  child.mtp_hidden_pos = parent.mtp_hidden_pos;
  child.num_prompt_tokens = parent.num_prompt_tokens;
  child.num_cached_tokens = parent.num_cached_tokens;
  child.prefix.root = parent.prefix.root;
  child.prefix.hashes.assign(parent.prefix.hashes.begin(), parent.prefix.hashes.end());
  child.prefix.num_indexed_blocks = parent.prefix.num_indexed_blocks;
  const auto wait = [&] {
    free_blocks(child);
    child.num_computed = 0;
    child.status = SequenceStatus::kWaiting;
    waiting_.push_front(&child);
    return false;
  };
  if (parent.status != SequenceStatus::kRunning || parent.num_computed == 0 || !copy_block_)
    return wait();
  const int64_t c = parent.num_computed, bs = config_.block_size;
  const int64_t blocks = (c + bs - 1) / bs;
  const bool partial = c % bs != 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int32_t>& from = parent.block_tables[g];
    if (std::ssize(from) < blocks) fail("scheduler: sequence {} lacks blocks", parent.id);
    if (partial && groups_[g].pool.num_free() < 1) return wait();
  }
  if (state_pool_ != nullptr) {  // the child goes on from the parent's recurrent state
    if (parent.state_slot < 0) fail("scheduler: running sequence {} has no state slot", parent.id);
    if (!copy_state_ || !take_state_slot(child)) return wait();
    copy_state_(parent.state_slot, child.state_slot);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int32_t>& from = parent.block_tables[g];
    std::vector<int32_t>& to = child.block_tables[g];
    to.clear();
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t block = from[static_cast<size_t>(b)];
      if (block == kv::kNoBlock) {
        to.push_back(kv::kNoBlock);
      } else if (partial && b == blocks - 1) {  // copy-on-write: both write into it next
        const int32_t copy = *groups_[g].pool.allocate();
        copy_block_(g, block, copy);
        to.push_back(copy);
      } else {
        groups_[g].pool.retain(block);
        to.push_back(block);
      }
    }
  }
  child.num_computed = c;
  child.status = SequenceStatus::kRunning;
  running_.push_back(&child);
  return true;
}

void Scheduler::remove(Sequence* seq) {
  if (seq->snapshot_slot >= 0 && seq->snapshot_blocks > 0) {  // its last kept state, for reuse
    publish_snapshot(seq->snapshot_slot,
                     seq->prefix.hashes[static_cast<size_t>(seq->snapshot_blocks - 1)]);
    seq->snapshot_slot = -1;
  }
  free_blocks(*seq);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  seq->status = SequenceStatus::kFinished;
}

}  // namespace inferd::engine
