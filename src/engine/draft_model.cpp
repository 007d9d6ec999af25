#include "engine/draft_model.h"

#include <algorithm>
#include <chrono>

#include "kernels/kernels.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::engine {

namespace {

void check_same_vocabulary(const tokenizer::Vocab& target, const tokenizer::Vocab& draft,
                           const std::string& path) {
  if (target.size() != draft.size()) {
    fail("draft model {}: its vocabulary has {} tokens, the target's {}", path, draft.size(),
         target.size());
  }
  for (int32_t id = 0; id < target.size(); ++id) {
    if (target.text(id) != draft.text(id)) {
      fail("draft model {}: token {} is '{}', the target's is '{}': the vocabularies differ", path,
           id, draft.text(id), target.text(id));
    }
  }
}

}  // namespace

DraftModel::DraftModel(const std::string& path, const tokenizer::Vocab& target_vocab,
                       int64_t context, int max_seqs, int block_size, int64_t max_batch_tokens,
                       ThreadPool& pool)
    : file_(gguf::GgufFile::open(path)),
      block_size_(block_size),
      max_batch_tokens_(max_batch_tokens) {
  check_same_vocabulary(target_vocab, tokenizer::Vocab::from_gguf(file_), path);
  model::ModelOptions options;
  options.max_batch_tokens = max_batch_tokens;
  options.max_context = context;
  model_ = model::load_model(file_, options);
  if (model_->has_recurrent_state())
    fail("draft model {}: a hybrid (recurrent) model cannot draft yet: its state cannot be "
         "rolled back after a rejected draft",
         path);
  if (model_->config().n_vocab != target_vocab.size()) {
    fail("draft model {}: {} output rows for a vocabulary of {}", path, model_->config().n_vocab,
         target_vocab.size());
  }
  const int64_t blocks_per_seq = (context + block_size - 1) / block_size + 1;
  kv::KvCacheConfig kv = model_->kv_config(static_cast<int32_t>(blocks_per_seq * max_seqs),
                                           block_size, DType::F16, DType::F16);
  kv.sliding_layers.clear();  // every position kept: rollbacks never need a freed block
  cache_ = std::make_unique<kv::KvCache>(kv);
  runner_ = std::make_unique<ModelRunner>(*model_, *cache_, pool, max_batch_tokens, max_seqs);
  batch_.reserve(static_cast<size_t>(max_seqs));
  batch_job_.reserve(static_cast<size_t>(max_seqs));
}

DraftModel::~DraftModel() = default;

void DraftModel::reserve(State& state, int64_t max_tokens) const {
  state.seq.tokens.reserve(static_cast<size_t>(max_tokens));
  const auto blocks = static_cast<size_t>(max_tokens / block_size_ + 2);
  for (std::vector<int32_t>& table : state.seq.block_tables) table.reserve(blocks);
}

void DraftModel::release(State& state) {
  kv::release_blocks(cache_->groups(), state.seq.block_tables);
  state.seq.num_computed = 0;
  state.seq.tokens.clear();
}

void DraftModel::propose(std::span<Job> jobs) {
  // Catch up: keep what the draft computed of the tokens the target kept, append the rest.
  for (Job& job : jobs) {
    job.proposed = 0;
    Sequence& seq = job.state->seq;
    const size_t n = std::min(seq.tokens.size(), job.tokens.size());
    const size_t common =
        std::mismatch(seq.tokens.begin(), seq.tokens.begin() + static_cast<int64_t>(n),
                      job.tokens.begin())
            .first -
        seq.tokens.begin();
    seq.tokens.resize(common);
    seq.tokens.insert(seq.tokens.end(), job.tokens.begin() + static_cast<int64_t>(common),
                      job.tokens.end());
    seq.num_computed = std::min<int64_t>(seq.num_computed, static_cast<int64_t>(common));
    if (seq.num_computed == seq.num_tokens()) seq.num_computed -= 1;  // its logits are needed
  }
  // Round r computes every job's uncomputed tokens (round 0: the catch-up, within the step
  // budget; a job whose catch-up does not fit computes a chunk of it and drafts nothing this
  // time) and appends the argmax. A job that wants no drafts (a prompt's catch-up) leaves its
  // last token for the first proposal, which needs its logits, and needs none itself.
  // Only rounds of one token per sequence are timed: the cost model wants a drafted token's
  // cost, and a catch-up over a new prompt is a prefill.
  double drafting_seconds = 0;
  int drafting_rounds = 0;
  for (int64_t r = 0;; ++r) {
    batch_.clear();
    batch_job_.clear();
    int64_t budget = max_batch_tokens_;
    bool catch_up_only = false;
    for (size_t j = 0; j < jobs.size(); ++j) {
      Job& job = jobs[j];
      Sequence& seq = job.state->seq;
      const bool drafts = job.want > 0;
      if (drafts ? job.proposed != r || job.proposed >= job.want : r > 0) continue;
      int64_t n = seq.num_uncomputed() - (drafts ? 0 : 1);
      if (n <= 0) continue;
      catch_up_only |= !drafts;
      if (n > budget) {
        if (r > 0 || budget == 0) continue;
        n = budget;
        job.proposed = -1;  // a chunk of its catch-up only
      }
      const int64_t blocks = (seq.num_computed + n + block_size_ - 1) / block_size_;
      if (!kv::grow_tables(cache_->groups(), seq.block_tables, blocks)) continue;
      budget -= n;
      batch_.push_back({&seq, n});
      batch_job_.push_back(j);
    }
    if (batch_.empty()) break;
    const auto started = std::chrono::steady_clock::now();
    runner_->run(batch_);
    if (!catch_up_only && std::all_of(batch_.begin(), batch_.end(), [](const ScheduledSequence& s) {
          return s.num_new_tokens == 1;
        })) {
      drafting_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ++drafting_rounds;
    }
    for (size_t i = 0; i < batch_.size(); ++i) {
      Job& job = jobs[batch_job_[i]];
      Sequence& seq = *batch_[i].seq;
      seq.num_computed += batch_[i].num_new_tokens;
      if (!runner_->wants_logits(i)) continue;
      const std::span<float> logits = runner_->logits_for(i);
      const auto token = static_cast<int32_t>(
          kernels::active_kernels().argmax(logits.data(), static_cast<int64_t>(logits.size())));
      seq.tokens.push_back(token);
      job.out[static_cast<size_t>(job.proposed++)] = token;
    }
  }
  for (Job& job : jobs) job.proposed = std::max<int64_t>(job.proposed, 0);
  if (drafting_rounds > 0) {
    const double seconds = drafting_seconds / drafting_rounds;
    step_seconds_ = step_seconds_ == 0 ? seconds : step_seconds_ + 0.1 * (seconds - step_seconds_);
  }
}

}  // namespace inferd::engine
