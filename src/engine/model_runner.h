// ModelRunner: flattens one scheduled step into a ragged Batch (tokens, positions,
// per-sequence block tables) and runs the model. Buffers are sized once for the largest step.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::engine {

class ModelRunner {
 public:
  // max_draft: the most draft tokens a sequence brings to a step (speculative decoding), each
  // of which needs a row of logits.
  // max_prompt_rows: the rows of logits a step has for prompt logprobs (the scheduler's
  // max_prompt_logit_rows), past those; their memory is touched only when used.
  // bf16_prompts: the tokens of long prompts take the bf16 route (EngineConfig::bf16_prompts).
  ModelRunner(model::Model& model, kv::KvCache& cache, ThreadPool& pool, int64_t max_batch_tokens,
              int max_seqs, int max_draft = 0, int64_t max_prompt_rows = 0,
              bool bf16_prompts = true);

  // Runs the step. Afterwards logits_for(i) holds the next-token logits of scheduled[i] when
  // that step computes its last uncomputed token (wants_logits(i)); with drafts, one row per
  // computed position from the last real token on: row j predicts the token after position
  // num_tokens - 1 - num_draft + j.
  void run(std::span<const ScheduledSequence> scheduled);
  // run in two halves (Model::launch_forward/finish_forward: pipeline parallelism, several
  // steps in flight, each with a runner of its own and `slot` its index): launch starts the
  // step, finish waits for its logits. The scheduled sequences' tokens and block tables stay as
  // they are in between.
  void launch(std::span<const ScheduledSequence> scheduled, int slot);
  void finish();
  bool wants_logits(size_t i) const { return logit_count_[i] > 0; }
  int32_t num_logit_rows(size_t i) const { return logit_count_[i]; }
  std::span<float> logits_for(size_t i, int32_t row = 0);
  // Prompt logprobs (Request::prompt_logprobs): the rows of the positions of scheduled[i] that
  // predict a prompt token (Sequence::prompt_logit_rows), row j the one of position
  // prompt_row_position(i) + j, which predicts the token after it.
  int32_t num_prompt_rows(size_t i) const { return prompt_count_[i]; }
  int64_t prompt_row_position(size_t i) const { return prompt_position_[i]; }
  std::span<float> prompt_logits_for(size_t i, int32_t row);
  // Embedding requests (Request::embed) get no logits: each position the step computes gets its
  // final hidden state instead. [positions computed this step, n_embd], in position order from
  // the sequence's num_computed before the step.
  std::span<const float> hidden_for(size_t i) const;

  // Multi-token prediction (ModelConfig::mtp): every step also runs the model's MTP block over
  // its tokens (Batch::mtp_catch_up), each sequence's first one paired with its mtp_hidden, and
  // keeps every token's final hidden state for token_hidden().
  void enable_mtp_catch_up();
  // EAGLE-3 (--spec eagle3): every step also hands `head` the inputs of the target layers it
  // reads (Batch::features), turns them into its g (Model::encode_features), kept for
  // token_hidden(), and catches the head's K/V in `head_cache` up: at position p it pairs the
  // token at p + 1 with g of p, as llama.cpp's EAGLE-3 decoder does, so a step that computes
  // positions [b, e) writes [b - 1, e - 1) (b - 1 with the sequence's mtp_hidden, which then
  // holds g of b - 1). The head's cache has the model's block size and as many blocks as the
  // model's full-attention group (0): the sequences' group-0 tables place its K/V too.
  void enable_eagle3(model::Model& head, kv::KvCache& head_cache);
  // Whether the next runs compute the MTP block or the EAGLE-3 head's catch-up (the hidden
  // states are kept either way).
  void set_mtp_catch_up(bool on) { mtp_catch_up_ = on; }
  // The final hidden state [n_embd] (EAGLE-3: g, [the head's n_embd]) the last run computed for
  // scheduled[i]'s position `pos`; empty when that step did not compute it.
  std::span<const float> token_hidden(size_t i, int64_t pos) const;

 private:
  bool bf16_prompts_ = true;
  model::Model& model_;
  kv::KvCache& cache_;
  model::Batch batch_;  // the step launched last, over the arrays below
  int slot_ = -1;       // its pipeline slot while it is in flight, else -1
  ThreadPool& pool_;
  int n_vocab_;
  std::vector<int32_t> tokens_;                  // [max_batch_tokens]
  std::vector<int32_t> positions_;               // [max_batch_tokens]
  std::vector<model::BatchSequence> sequences_;  // [max_seqs]
  std::vector<int32_t> logit_rows_;              // [max_logit_rows]
  std::vector<int32_t> logit_index_;             // per scheduled sequence: its first row
  std::vector<int32_t> logit_count_;             // per scheduled sequence: its rows (0: none)
  std::vector<int32_t> prompt_index_;            // per scheduled sequence: its first prompt row
  std::vector<int32_t> prompt_count_;            // per scheduled sequence: its prompt rows
  std::vector<int64_t> prompt_position_;         // per scheduled sequence: its first one's position
  int n_embd_;
  std::vector<int32_t> hidden_rows_;   // [max_batch_tokens] batch rows of embedding requests
  std::vector<int32_t> hidden_index_;  // per scheduled sequence: its first hidden row
  std::vector<int32_t> hidden_count_;  // per scheduled sequence: its hidden rows (0: none)
  std::vector<float> hidden_;          // [max_batch_tokens, n_embd]
  // enable_mtp_catch_up: every token's final hidden state, [max_batch_tokens, n_embd], and
  // where each scheduled sequence's positions lie in the batch (at most two entries each).
  bool mtp_ = false;
  bool mtp_catch_up_ = true;
  int hidden_width_ = 0;             // of token_hidden_'s rows
  std::vector<float> token_hidden_;  // [max_batch_tokens, hidden_width_]
  // enable_eagle3: the head, its cache, the target layers' inputs [max_batch_tokens, layers x
  // n_embd], and the catch-up's batch (tokens shifted by one position) with its g rows.
  model::Model* head_ = nullptr;
  kv::KvCache* head_cache_ = nullptr;
  std::vector<float> features_;
  std::vector<int32_t> head_tokens_, head_positions_;
  std::vector<model::BatchSequence> head_sequences_;
  std::vector<float> head_hidden_;  // [max_batch_tokens, hidden_width_]
  void eagle3_catch_up(const model::Batch& batch);
  struct EntryRange {
    int64_t first_position = 0, first_row = 0, count = 0;
  };
  std::vector<std::array<EntryRange, 2>> entry_ranges_;  // [max_seqs]
  // [max_logit_rows, n_vocab], in huge pages: the rows the output matmul stores together lie
  // n_vocab floats apart (192 KiB for a 49K vocabulary), so in 4 KiB pages each is a page of its
  // own.
  HugePageBuffer logits_memory_;
  std::span<float> logits_;
};

}  // namespace inferd::engine
