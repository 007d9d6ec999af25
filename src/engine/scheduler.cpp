#include "engine/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace inferd::engine {

Scheduler::Scheduler(const SchedulerConfig& config, kv::BlockPool& pool)
    : config_(config), pool_(pool) {
  if (config.max_batched_tokens <= 0 || config.max_seqs <= 0 || config.block_size <= 0) {
    fail("scheduler: max_batched_tokens, max_seqs and block_size must be positive");
  }
  running_.reserve(static_cast<size_t>(config.max_seqs));
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(seq);
}

int64_t Scheduler::blocks_needed(const Sequence& seq, int64_t n) const {
  const int64_t positions = seq.num_computed + n;
  const int64_t blocks = (positions + config_.block_size - 1) / config_.block_size;
  return std::max<int64_t>(0, blocks - static_cast<int64_t>(seq.block_table.size()));
}

bool Scheduler::reserve_blocks(Sequence& seq, int64_t n) {
  const int64_t need = blocks_needed(seq, n);
  if (need > pool_.num_free()) return false;
  for (int64_t i = 0; i < need; ++i) seq.block_table.push_back(*pool_.allocate());
  return true;
}

void Scheduler::free_blocks(Sequence& seq) {
  for (int32_t block : seq.block_table) pool_.release(block);
  seq.block_table.clear();
}

void Scheduler::preempt(Sequence& seq) {
  free_blocks(seq);
  seq.num_computed = 0;  // recomputed from scratch (prompt + what was generated so far)
  seq.num_preemptions += 1;
  seq.status = SequenceStatus::kWaiting;
  waiting_.push_front(&seq);
}

void Scheduler::schedule(std::vector<ScheduledSequence>& out) {
  out.clear();
  int64_t budget = config_.max_batched_tokens;
  // Running sequences first, oldest first; preempt from the newest end when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const int64_t n = std::min(seq.num_uncomputed(), budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    if (reserve_blocks(seq, n)) {
      out.push_back({&seq, n});
      budget -= n;
      ++i;
      continue;
    }
    // Not enough blocks: free the newest running sequence (possibly this one) and retry.
    Sequence* victim = running_.back();
    running_.pop_back();
    for (const ScheduledSequence& s : out) {
      if (s.seq == victim) budget += s.num_new_tokens;
    }
    std::erase_if(out, [&](const ScheduledSequence& s) { return s.seq == victim; });
    preempt(*victim);
    if (victim == &seq) break;
  }
  // Then waiting sequences in arrival order, while there is room.
  while (!waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(config_.max_seqs)) {
    Sequence& seq = *waiting_.front();
    const int64_t n = std::min(seq.num_uncomputed(), budget);
    if (!reserve_blocks(seq, n)) break;  // FCFS: later arrivals do not overtake
    waiting_.pop_front();
    seq.status = SequenceStatus::kRunning;
    running_.push_back(&seq);
    out.push_back({&seq, n});
    budget -= n;
  }
}

void Scheduler::remove(Sequence* seq) {
  free_blocks(*seq);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  seq->status = SequenceStatus::kFinished;
}

}  // namespace inferd::engine
