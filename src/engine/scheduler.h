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
  // Rows of logits a step has for prompt logprobs (Request::prompt_logprobs), shared by the
  // step's sequences: such a prompt runs at most this many of its positions that need one a step.
  int64_t max_prompt_logit_rows = 0;
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
  // Sequences in flight (Sequence::in_flight) are passed over: neither scheduled nor
  // preempted. At most `max_seqs` sequences this step (below the config's: several steps in
  // flight share the running sequences between them).
  void schedule(std::vector<ScheduledSequence>& out, int max_seqs = -1);
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

  // Prefix caching with state kept at block ends. `pool` is the KV cache's snapshot_pool() (it
  // must outlive the scheduler); `save` copies a state slot into a snapshot slot, `load` the
  // other way. With them, each sequence holds a snapshot slot of its own, kept at block ends
  // and indexed when it finishes, and a prompt's last full block gets a snapshot indexed at
  // once. `required`: a hybrid model's recurrent state, without which a prefix cannot be
  // resumed: a sequence admitted at a cached prefix starts at the longest part of it with a
  // snapshot, and a prompt's prefill stops a step at its last full block so that the state
  // there is seen. Otherwise (a quantized cache's exact copies, kv/kv_cache.h) the whole prefix
  // is taken and a snapshot loaded only where it ends (snapshot_prefix says why; without one
  // the prefix's blocks are read quantized), which lets a snapshot be taken after a step that
  // passed its block end (snapshot_after_step): no stop.
  using SnapshotCopier = std::function<void(int32_t from, int32_t to)>;
  void set_snapshots(kv::BlockPool* pool, SnapshotCopier save, SnapshotCopier load,
                     bool required) {
    snapshot_pool_ = pool;
    save_snapshot_ = std::move(save);
    load_snapshot_ = std::move(load);
    snapshots_required_ = required;
  }
  // Data parallelism (model/data_parallel.h): whether a snapshot may start a sequence with these
  // tables (the rank of its first block holds it); a prefix whose snapshot another rank holds
  // is taken shorter, at a snapshot that rank does hold, or not at all.
  using SnapshotCheck = std::function<bool(const kv::BlockTables& tables, int32_t snapshot)>;
  void set_snapshot_check(SnapshotCheck check) { snapshot_check_ = std::move(check); }
  // After a step that left `seq` with no drafts: at a block end its state goes to its own
  // snapshot slot, and at its prompt's last full block a copy is indexed at once (a second
  // question about the same document finds it while the first is still answered).
  void snapshot_after_step(Sequence& seq);

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
  kv::BlockPool* snapshot_pool_ = nullptr;
  SnapshotCopier save_snapshot_, load_snapshot_;
  bool snapshots_required_ = true;
  SnapshotCheck snapshot_check_;
  // The prompt's last full block end, where its snapshot is kept (and, with required
  // snapshots, its prefill stops), or 0.
  int64_t prompt_snapshot_end(const Sequence& seq) const;
  // Tokens of `seq` to run this step: at most n, stopping at its prompt's snapshot end when
  // snapshots are required.
  int64_t step_tokens(const Sequence& seq, int64_t n) const;
  // n cut so that the positions that need prompt-logprob rows fit in `rows` (what the step has
  // left of them), which it then takes.
  static int64_t fit_prompt_rows(const Sequence& seq, int64_t n, int64_t& rows);
  // A cached prefix of `cached` tokens cut to the longest one ending at a kept state; returns
  // its length and the snapshot (retained; -1 for none) to load into the sequence's state.
  int64_t snapshot_prefix(Sequence& seq, int64_t cached, int32_t& snapshot);
  // Indexes a snapshot slot under `hash` and lets go of it (it stays until the pool reuses it).
  void publish_snapshot(int32_t slot, uint64_t hash);
  // A state slot for `seq` (hybrid models), true when it has one now or needs none.
  bool take_state_slot(Sequence& seq);
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order: the last one is the newest
  int64_t num_preemptions_ = 0;
};

}  // namespace inferd::engine
