#include "engine/model_runner.h"

#include "util/error.h"

namespace inferd::engine {

ModelRunner::ModelRunner(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
                         int64_t max_batch_tokens, int max_seqs)
    : model_(model), cache_(cache), pool_(pool), n_vocab_(model.config().n_vocab) {
  const auto tokens = static_cast<size_t>(max_batch_tokens);
  const auto seqs = static_cast<size_t>(max_seqs);
  tokens_.resize(tokens);
  positions_.resize(tokens);
  slots_.resize(tokens);
  sequences_.resize(seqs);
  logit_rows_.resize(seqs);
  logit_index_.resize(seqs);
  logits_.resize(seqs * static_cast<size_t>(n_vocab_));
}

void ModelRunner::run(std::span<const ScheduledSequence> scheduled) {
  if (scheduled.size() > sequences_.size())
    fail("model runner: {} sequences in one step", scheduled.size());
  const int block_size = cache_.block_size();
  size_t t = 0;
  size_t rows = 0;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const Sequence& seq = *scheduled[i].seq;
    const int64_t begin = seq.num_computed;
    const int64_t end = begin + scheduled[i].num_new_tokens;
    if (t + static_cast<size_t>(end - begin) > tokens_.size())
      fail("model runner: step exceeds the token budget");
    sequences_[i] = {static_cast<int64_t>(t), static_cast<int64_t>(t) + (end - begin),
                     seq.block_table};
    for (int64_t pos = begin; pos < end; ++pos, ++t) {
      tokens_[t] = seq.tokens[static_cast<size_t>(pos)];
      positions_[t] = static_cast<int32_t>(pos);
      slots_[t] = int64_t{seq.block_table[static_cast<size_t>(pos / block_size)]} * block_size +
                  pos % block_size;
    }
    // Logits only where the step reaches the end of the known tokens: the next one is sampled.
    logit_index_[i] = end == seq.num_tokens() ? static_cast<int32_t>(rows) : -1;
    if (end == seq.num_tokens()) logit_rows_[rows++] = static_cast<int32_t>(t - 1);
  }
  model::Batch batch{{tokens_.data(), t},
                     {positions_.data(), t},
                     {slots_.data(), t},
                     {sequences_.data(), scheduled.size()},
                     {logit_rows_.data(), rows}};
  model_.forward(batch, cache_, logits_.data(), pool_);
}

std::span<float> ModelRunner::logits_for(size_t i) {
  return {logits_.data() + static_cast<size_t>(logit_index_[i]) * static_cast<size_t>(n_vocab_),
          static_cast<size_t>(n_vocab_)};
}

}  // namespace inferd::engine
