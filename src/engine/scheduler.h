// Scheduler: decides each step which sequences run and how many of their tokens, under a
// token budget and a cap on running sequences, reserving KV blocks for them (vLLM V1 style).
// Blocks are reserved in every KV group; a sliding-window group's blocks that no token of the
// step can see any more are freed first, so its use stays bounded by the window.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "engine/sequence.h"

#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"

namespace inferd::engine {

struct SchedulerConfig {
  int64_t max_batched_tokens = 512;  // tokens per forward step (also the prefill chunk size)
  int max_seqs = 16;                 // sequences running at once
  int block_size = 16;
};

struct ScheduledSequence {
  Sequence* seq;
  int64_t num_new_tokens;  // tokens [num_computed, num_computed + num_new_tokens) run this step
};

class Scheduler {
 public:
  // `groups` (the KV cache's) and `prefix_cache` (null: off) must outlive the scheduler. With a
  // prefix cache, a sequence admitted with nothing computed starts at its longest cached prefix.
  Scheduler(const SchedulerConfig& config, std::span<kv::KvGroup> groups,
            kv::PrefixCache* prefix_cache = nullptr);

  // Queues a sequence (FCFS). The caller keeps ownership; the pointer must stay valid until
  // the sequence is finished or removed.
  void add(Sequence* seq);
  // Plans one step into `out` (cleared first). Running sequences go first, then waiting ones
  // as long as budget, sequence slots and KV blocks allow. When blocks run out for a running
  // sequence, the newest running sequence is preempted: its blocks are freed and it goes back
  // to the front of the queue to be recomputed later.
  void schedule(std::vector<ScheduledSequence>& out);
  // Releases a sequence's blocks and forgets it (finished or cancelled).
  void remove(Sequence* seq);

  // Copies a block's K/V within a group (the KV cache's copy_block); needed by fork().
  using BlockCopier = std::function<void(size_t group, int32_t from, int32_t to)>;
  void set_block_copier(BlockCopier copier) { copy_block_ = std::move(copier); }
  // Hybrid models: every running sequence also holds a recurrent state slot from `pool` (the KV
  // cache's state_pool(), which must outlive the scheduler); a waiting sequence is admitted
  // only when one is free as well as its blocks, gives it back when preempted (it is
  // recomputed from position 0, which starts from a zero state) or finished, and a fork copies
  // its parent's state with `copier`.
  // With `checkpoints` (speculative decoding), each sequence holds a second slot besides.
  using StateCopier = std::function<void(int32_t from, int32_t to)>;
  void set_state_pool(kv::BlockPool* pool, StateCopier copier, bool checkpoints = false) {
    state_pool_ = pool;
    copy_state_ = std::move(copier);
    state_checkpoints_ = checkpoints;
  }
  // Makes `child` a copy of `parent` (tokens, progress, prefix hashes) that shares its blocks:
  // every full block gains an owner, the partly filled last block (which both would write
  // next) is copied into a fresh one. The child takes one of the parent's slots and runs
  // beside it; without a free block for the copy, or when the parent is waiting, it waits to
  // be computed from the start (the prefix cache gives back the full blocks): false then.
  bool fork(Sequence& parent, Sequence& child);

  size_t num_waiting() const { return waiting_.size(); }
  // Preemptions since start (vLLM's num_preemptions_total).
  int64_t num_preemptions() const { return num_preemptions_; }
  size_t num_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Blocks so that positions [0, num_computed + n) have a home in every group (behind a sliding
  // group's window: freed); false when a pool is short, and then nothing is allocated.
  bool reserve_blocks(Sequence& seq, int64_t n);
  void free_behind_window(Sequence& seq, size_t group);
  // True when a running sequence is still computing prompt blocks that `seq` (with `cached`
  // tokens found in the prefix cache) could take from the cache once they are done: n > 1
  // choices of one prompt, or requests with the same system prompt arriving together, then
  // compute the shared blocks once.
  bool shares_a_running_prefill(const Sequence& seq, int64_t cached) const;
  void free_blocks(Sequence& seq);
  void preempt(Sequence& seq);
  int64_t running_slots() const;

  SchedulerConfig config_;
  std::span<kv::KvGroup> groups_;
  kv::PrefixCache* prefix_cache_;
  BlockCopier copy_block_;
  kv::BlockPool* state_pool_ = nullptr;
  StateCopier copy_state_;
  bool state_checkpoints_ = false;
  // A state slot for `seq` (hybrid models), true when it has one now or needs none.
  bool take_state_slot(Sequence& seq);
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order: the last one is the newest
  int64_t num_preemptions_ = 0;
};

}  // namespace inferd::engine
