#include "engine/mtp_drafter.h"

#include <algorithm>
#include <chrono>

#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::engine {

MtpDrafter::MtpDrafter(model::Model& model, kv::KvCache& cache, ThreadPool& pool, int max_seqs)
    : MtpDrafter(model, cache, cache, pool, max_seqs) {}

MtpDrafter::MtpDrafter(model::Model& model, kv::KvCache& cache, kv::KvCache& tables,
                       ThreadPool& pool, int max_seqs)
    : model_(model),
      cache_(cache),
      tables_(tables),
      position_offset_(model.feature_layers().empty() ? 0 : -1),
      pool_(pool),
      n_embd_(model.config().n_embd),
      n_vocab_(model.config().n_vocab) {
  if (!model.config().mtp && model.feature_layers().empty())
    fail("MTP drafting: the model was loaded without its MTP block");
  const auto seqs = static_cast<size_t>(max_seqs);
  tokens_.resize(seqs);
  positions_.resize(seqs);
  logit_rows_.resize(seqs);
  sequences_.resize(seqs);
  job_of_.resize(seqs);
  row_of_job_.resize(seqs);
  hidden_in_.resize(seqs * static_cast<size_t>(n_embd_));
  hidden_out_.resize(seqs * static_cast<size_t>(n_embd_));
  const size_t n_logits = seqs * static_cast<size_t>(n_vocab_);
  logits_memory_ = HugePageBuffer(n_logits * sizeof(float));
  logits_memory_.prefault();
  logits_ = {reinterpret_cast<float*>(logits_memory_.data()), n_logits};
}

void MtpDrafter::propose(std::span<Job> jobs) {
  if (jobs.size() > tokens_.size()) fail("MTP drafting: {} sequences at once", jobs.size());
  const auto n = static_cast<size_t>(n_embd_);
  const int64_t block_size = cache_.block_size();
  // Round r writes the block's K/V at position num_tokens - 1 + r (+ the offset): cover the last
  // of them, or as many as the blocks the sequence holds already allow.
  for (Job& job : jobs) {
    job.proposed = 0;
    const int64_t first = job.seq->num_tokens() - 1 + position_offset_;
    const int64_t held = std::ssize(job.seq->block_tables[0]) * block_size - first;
    if (!kv::grow_tables(tables_.groups(), job.seq->block_tables,
                         (first + job.want - 1) / block_size + 1))
      job.want = std::clamp<int64_t>(held, 0, job.want);
  }
  double seconds = 0;
  int rounds = 0;
  for (int64_t r = 0;; ++r) {
    size_t rows = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      Job& job = jobs[j];
      if (job.proposed != r || r >= job.want) continue;
      const Sequence& seq = *job.seq;
      const int64_t position = seq.num_tokens() - 1 + r + position_offset_;
      tokens_[rows] = r == 0 ? seq.tokens.back() : job.out[static_cast<size_t>(r - 1)];
      positions_[rows] = static_cast<int32_t>(position);
      logit_rows_[rows] = static_cast<int32_t>(rows);
      sequences_[rows] = {static_cast<int64_t>(rows), static_cast<int64_t>(rows) + 1,
                          &seq.block_tables, -1, nullptr};
      // Round 0 takes the model's hidden state; later rounds the block's own, of the job's row
      // in the round before.
      const float* hidden = r == 0 ? job.hidden : &hidden_out_[row_of_job_[j] * n];
      std::copy_n(hidden, n, &hidden_in_[rows * n]);
      job_of_[rows] = j;
      ++rows;
    }
    if (rows == 0) break;
    const model::Batch batch{{tokens_.data(), rows},
                             {positions_.data(), rows},
                             {sequences_.data(), rows},
                             {logit_rows_.data(), rows}};
    const auto started = std::chrono::steady_clock::now();
    model_.forward_mtp(batch, hidden_in_.data(), cache_, logits_.data(), hidden_out_.data(), pool_);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ++rounds;
    for (size_t row = 0; row < rows; ++row) {
      Job& job = jobs[job_of_[row]];
      const float* logits = logits_.data() + row * static_cast<size_t>(n_vocab_);
      row_of_job_[job_of_[row]] = row;
      job.out[static_cast<size_t>(job.proposed++)] =
          static_cast<int32_t>(kernels::active_kernels().argmax(logits, n_vocab_));
    }
  }
  if (rounds > 0) {
    const double round = seconds / rounds;
    step_seconds_ = step_seconds_ == 0 ? round : step_seconds_ + 0.1 * (round - step_seconds_);
  }
}

}  // namespace inferd::engine
