// MtpDrafter: drafts with the model's own multi-token-prediction block (`--spec mtp`; Qwen3.5's
// `nextn` layer, model/decoder.cpp's MTP block). The block predicts the token after next from a
// token and the model's final hidden state at the position before it. The engine's steps run it
// over every token they compute (ModelRunner::enable_mtp_catch_up), so its K/V, one more layer
// in the model's own cache at the sequence's own blocks, always cover the computed positions.
// After a step, a sequence whose last token was just sampled drafts from it: round 0 pairs that
// token with the model's hidden state at the position before it; round r pairs the draft of
// round r - 1 with the block's own output hidden state, one position further (as llama.cpp and
// vLLM chain one MTP layer). Every drafting sequence runs in one batch per round. Drafts are the
// block's argmax: one-hot proposals, so verification keeps sampling exact (speculative.h).
//
// An EAGLE-3 head (`--spec eagle3`, a separate file; model/archs/eagle3.cpp) drafts the same
// way, with its g (ModelRunner::enable_eagle3) in place of the hidden state and everything one
// position earlier: llama.cpp's EAGLE-3 decoder writes the pair (token at p + 1, g of p) at
// position p. Its K/V live in a cache of its own, placed by the sequences' group-0 tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::engine {

class MtpDrafter {
 public:
  // The model must have been loaded with its MTP block (ModelOptions::mtp).
  MtpDrafter(model::Model& model, kv::KvCache& cache, ThreadPool& pool, int max_seqs);
  // An EAGLE-3 head with its own cache; `tables` is the target's, whose block tables it grows.
  MtpDrafter(model::Model& head, kv::KvCache& head_cache, kv::KvCache& tables, ThreadPool& pool,
             int max_seqs);

  struct Job {
    Sequence* seq;             // drafts follow its last token, at position num_tokens() - 1
    const float* hidden;       // [hidden_width()] the model's final hidden state (EAGLE-3: g)
                               // at the position before
    int64_t want;              // drafts wanted, 1 or more
    std::span<int32_t> out;    // [want]
    int64_t proposed = 0;      // set by propose(): fewer than want when the cache ran short
  };
  // Drafts for all jobs together, one batched step per draft position. Grows each sequence's
  // block tables over the positions its drafts' K/V take (fewer drafts when blocks run out).
  void propose(std::span<Job> jobs);

  // Mean seconds of one batched draft round (for the engine's cost model); 0 before the first.
  double step_seconds() const { return step_seconds_; }
  // The values of a hidden state the drafter takes (Sequence::mtp_hidden's size).
  int hidden_width() const { return n_embd_; }

 private:
  model::Model& model_;
  kv::KvCache& cache_;   // where the drafter's K/V go
  kv::KvCache& tables_;  // whose block pools the sequences' tables draw from
  int position_offset_;  // EAGLE-3: -1 (its pairs sit a position before the token)
  ThreadPool& pool_;
  int n_embd_, n_vocab_;
  std::vector<int32_t> tokens_, positions_, logit_rows_;  // [max_seqs]
  std::vector<model::BatchSequence> sequences_;           // [max_seqs]
  std::vector<size_t> job_of_;                            // [max_seqs] job of each batch row
  std::vector<size_t> row_of_job_;                        // [max_seqs] its row last round
  std::vector<float> hidden_in_, hidden_out_;             // [max_seqs, n_embd]
  HugePageBuffer logits_memory_;                          // [max_seqs, n_vocab]
  std::span<float> logits_;
  double step_seconds_ = 0;
};

}  // namespace inferd::engine
