// DraftModel: a small model of the same vocabulary that proposes draft tokens for speculative
// decoding (`--spec draft --draft-model FILE`). It keeps its own KV cache (one block pool,
// blocks sized as the target's, enough for every running sequence at full context, so it never
// runs short) and its own batched forward: each engine step it catches every drafting sequence
// up on the tokens the target accepted, then runs k greedy steps for all of them together.
// Greedy drafts are one-hot proposals, so verification keeps sampling exact
// (engine/speculative.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sequence.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/vocab.h"
#include "util/thread_pool.h"

namespace inferd::engine {

class DraftModel {
 public:
  // Opens and loads `path`. Its vocabulary must be the target's, token for token; a different
  // one is an inferd::Error naming the first difference.
  DraftModel(const std::string& path, const tokenizer::Vocab& target_vocab, int64_t context,
             int max_seqs, int block_size, int64_t max_batch_tokens, ThreadPool& pool);
  ~DraftModel();

  // A sequence's state in the draft cache: its tokens as the draft model last saw them, how
  // many of them have K/V there, and its block tables. Made with reserve() at admission.
  struct State {
    Sequence seq;
  };
  void reserve(State& state, int64_t max_tokens) const;
  // Frees the state's blocks (a finished or preempted sequence).
  void release(State& state);

  // One proposal per entry: up to `want` greedy tokens following `tokens`, written to `out`.
  struct Job {
    State* state;
    std::span<const int32_t> tokens;  // the sequence's real tokens
    int64_t want;            // 0: only catch up (all but the last token: a prompt, computed
                             // in the step that computes it for the target)
    std::span<int32_t> out;  // [want]
    int64_t proposed = 0;    // set by propose()
  };
  // Catches each state up on its tokens (the part of what it drafted before that the target
  // kept stays computed), then drafts for all jobs together, one batched step per token.
  void propose(std::span<Job> jobs);

  // Mean seconds of one batched draft step (for the engine's cost model); 0 before the first.
  double step_seconds() const { return step_seconds_; }
  const model::ModelConfig& config() const { return model_->config(); }
  uint64_t file_bytes() const { return file_.file_size(); }

 private:
  gguf::GgufFile file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<ModelRunner> runner_;
  int block_size_;
  int64_t max_batch_tokens_;
  std::vector<ScheduledSequence> batch_;  // [max_seqs]
  std::vector<size_t> batch_job_;         // [max_seqs] job of each batch entry
  double step_seconds_ = 0;
};

}  // namespace inferd::engine
