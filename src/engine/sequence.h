// Sequence: one request's tokens and progress through the engine. The scheduler only looks
// at num_tokens() and num_computed: a prompt is many uncomputed tokens, a decode step one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"

namespace inferd::engine {

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  Request request;
  SequenceStatus status = SequenceStatus::kWaiting;
  std::vector<int32_t> tokens;  // prompt, then generated tokens; capacity reserved at admission
  int64_t num_prompt_tokens = 0;
  int64_t num_computed = 0;      // tokens whose K/V are in the cache
  // In a step that has been launched and not finished (several steps in flight: pipeline
  // parallelism): the scheduler neither schedules it again nor preempts it until then.
  bool in_flight = false;
  kv::BlockTables block_tables;  // per KV group: block of positions [i * bs, (i + 1) * bs)
  // Hybrid models: the KV cache's recurrent state slot, holding the state after num_computed
  // tokens; -1 while it holds none (waiting, or a model without recurrent layers).
  int32_t state_slot = -1;
  // With speculative decoding on a hybrid model: a second slot holding the state at the start
  // of the step that verifies drafts, restored when one is rejected (engine.cpp).
  int32_t checkpoint_slot = -1;
  // Prefix caching with snapshots (a hybrid model, a quantized cache's exact copies): a
  // snapshot slot of its own (kv/kv_cache.h) holding its state at the end of block
  // snapshot_blocks - 1, the last block end a step stopped at (exact copies: reached or
  // passed); it is indexed under that block's hash when the sequence finishes
  // (Scheduler::remove).
  int32_t snapshot_slot = -1;
  int64_t snapshot_blocks = 0;
  int num_preemptions = 0;
  kv::PrefixState prefix;          // its blocks' hashes for the prefix cache
  int64_t num_cached_tokens = -1;  // prompt tokens found in the prefix cache at first admission
  // Running slots (of the scheduler's max_seqs) this sequence accounts for: 1, or a beam
  // search's width for its first beam, which hands one to each beam forked from it.
  int32_t slots = 1;
  uint64_t request_id = 0;  // the request it serves (several beams serve one)
  // Speculative decoding: the last num_draft tokens are proposals, scheduled with the real ones
  // and verified against the model's logits after the step (engine/speculative.h).
  int64_t num_draft = 0;
  // Multi-token-prediction drafting (--spec mtp): the model's final hidden state at position
  // mtp_hidden_pos ([n_embd], sized at admission; -1: none), the input the MTP block pairs with
  // the token after it.
  std::vector<float> mtp_hidden;
  int64_t mtp_hidden_pos = -1;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  int64_t num_uncomputed() const { return num_tokens() - num_computed; }
  // An embedding pooled over more than its last token needs the hidden state of every prompt
  // position, so its prompt is computed whole, never started from cached blocks.
  // So does a request for prompt logprobs: every prompt position's logits.
  bool needs_every_position() const {
    return (request.embed.has_value() && *request.embed != Pooling::kLast) ||
           request.prompt_logprobs >= 0;
  }
  // Prompt logprobs: positions before this one have had theirs taken (a preempted prompt is
  // computed again from position 0; those are not asked for twice).
  int64_t prompt_logprobs_next = 0;
  // Of positions [begin, end), how many need a row of logits for prompt logprobs: those from
  // prompt_logprobs_next up to the prompt's second last (position p predicts token p + 1; the
  // last one's logits are the first output token's, as for any request).
  int64_t prompt_logit_rows(int64_t begin, int64_t end) const {
    if (request.prompt_logprobs < 0) return 0;
    return std::max<int64_t>(
        0, std::min(end, num_prompt_tokens - 1) - std::max(begin, prompt_logprobs_next));
  }
  // Forgets unverified drafts (and any K/V computed for them: they are past num_computed).
  void drop_drafts() {
    tokens.resize(tokens.size() - static_cast<size_t>(num_draft));
    num_draft = 0;
    num_computed = std::min(num_computed, num_tokens());
  }
};

}  // namespace inferd::engine
