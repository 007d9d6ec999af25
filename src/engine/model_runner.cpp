#include "engine/model_runner.h"

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace inferd::engine {

ModelRunner::ModelRunner(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
                         int64_t max_batch_tokens, int max_seqs, int max_draft,
                         int64_t max_prompt_rows, bool bf16_prompts)
    : bf16_prompts_(bf16_prompts),
      model_(model),
      cache_(cache),
      pool_(pool),
      n_vocab_(model.config().n_vocab),
      n_embd_(model.config().n_embd) {
  const auto tokens = static_cast<size_t>(max_batch_tokens);
  const auto seqs = static_cast<size_t>(max_seqs);
  tokens_.resize(tokens);
  positions_.resize(tokens);
  sequences_.resize(2 * seqs);  // a sequence may give one entry to each kernel route
  // A row per sequence, and one per draft token: never more than the step's tokens.
  const size_t max_rows =
      std::min(seqs * static_cast<size_t>(1 + std::max(0, max_draft)), std::max(seqs, tokens));
  logit_rows_.resize(max_rows + static_cast<size_t>(std::max<int64_t>(0, max_prompt_rows)));
  logit_index_.resize(seqs);
  logit_count_.resize(seqs);
  prompt_index_.resize(seqs);
  prompt_count_.resize(seqs);
  prompt_position_.resize(seqs);
  // Hidden states for every token a step may hold, so embedding requests never allocate.
  hidden_rows_.resize(tokens);
  hidden_index_.resize(seqs);
  hidden_count_.resize(seqs);
  hidden_.resize(tokens * static_cast<size_t>(n_embd_));
  // The prompt-logprob rows are not faulted in: most servers never see such a request.
  const size_t n_logits = logit_rows_.size() * static_cast<size_t>(n_vocab_);
  logits_memory_ = HugePageBuffer(n_logits * sizeof(float));
  logits_memory_.prefault(max_rows * static_cast<size_t>(n_vocab_) * sizeof(float));
  logits_ = {reinterpret_cast<float*>(logits_memory_.data()), n_logits};
}

void ModelRunner::run(std::span<const ScheduledSequence> scheduled) {
  launch(scheduled, 0);
  finish();
}

void ModelRunner::launch(std::span<const ScheduledSequence> scheduled, int slot) {
  if (slot_ >= 0) fail("model runner: a step launched before the last one finished");
  if (scheduled.size() > logit_index_.size())
    fail("model runner: {} sequences in one step", scheduled.size());
  size_t t = 0, entries = 0, rows = 0, hidden = 0;
  if (mtp_) {
    for (size_t i = 0; i < scheduled.size(); ++i) entry_ranges_[i] = {};
  }
  // Appends positions [begin, end) of sequence i as one batch entry; logits where the entry
  // reaches the end of the known tokens (the next one is sampled), and for each draft token.
  const auto add = [&](size_t i, int64_t begin, int64_t end) {
    if (begin >= end) return;
    const Sequence& seq = *scheduled[i].seq;
    if (t + static_cast<size_t>(end - begin) > tokens_.size())
      fail("model runner: step exceeds the token budget");
    // The MTP block pairs the first token with the hidden state of the position before it: the
    // sequence's own, when that is the one it holds (a cached prefix or a recomputed one has
    // none: zeros; another entry of this batch may hold it, which the model looks for).
    const float* prev_hidden =
        mtp_ && begin > 0 && begin == seq.num_computed && seq.mtp_hidden_pos == begin - 1
            ? seq.mtp_hidden.data()
            : nullptr;
    const std::vector<float>& lora = seq.request.lora_scales;
    sequences_[entries++] = {static_cast<int64_t>(t),
                             static_cast<int64_t>(t) + (end - begin),
                             &seq.block_tables,
                             seq.state_slot,
                             prev_hidden,
                             lora.empty() ? nullptr : lora.data()};
    if (mtp_) {
      std::array<EntryRange, 2>& ranges = entry_ranges_[i];
      (ranges[0].count == 0 ? ranges[0] : ranges[1]) = {begin, static_cast<int64_t>(t), end - begin};
    }
    const int64_t first_logit = seq.num_tokens() - 1 - seq.num_draft;
    if (seq.request.embed) {
      // A prompt alone: one entry per step, so its rows are consecutive and in position order.
      if (hidden_count_[i] > 0) fail("model runner: an embedding request split in one step");
      hidden_index_[i] = static_cast<int32_t>(hidden);
      hidden_count_[i] = static_cast<int32_t>(end - begin);
      for (int64_t pos = begin; pos < end; ++pos, ++t) {
        tokens_[t] = seq.tokens[static_cast<size_t>(pos)];
        positions_[t] = static_cast<int32_t>(pos);
        hidden_rows_[hidden++] = static_cast<int32_t>(t);
      }
      return;
    }
    // Prompt-logprob rows: one run of positions, all in this entry (a prompt's positions are
    // never split between the two kernel routes).
    const int64_t prompt_rows = seq.prompt_logit_rows(begin, end);
    const int64_t prompt_first = std::max(begin, seq.prompt_logprobs_next);
    if (prompt_rows > 0) {
      prompt_index_[i] = static_cast<int32_t>(rows);
      prompt_count_[i] = static_cast<int32_t>(prompt_rows);
      prompt_position_[i] = prompt_first;
    }
    for (int64_t pos = begin; pos < end; ++pos, ++t) {
      tokens_[t] = seq.tokens[static_cast<size_t>(pos)];
      positions_[t] = static_cast<int32_t>(pos);
      if (pos >= prompt_first && pos < prompt_first + prompt_rows) {
        if (rows == logit_rows_.size()) fail("model runner: more prompt-logprob rows than it has");
        logit_rows_[rows++] = static_cast<int32_t>(t);
        continue;
      }
      if (pos < first_logit) continue;
      if (rows == logit_rows_.size()) fail("model runner: more logit rows than drafts allow");
      if (logit_count_[i]++ == 0) logit_index_[i] = static_cast<int32_t>(rows);
      logit_rows_[rows++] = static_cast<int32_t>(t);
    }
  };
  // Where the tokens of a long prompt end in a step's range [begin, end): those before it are
  // computed on the bf16 route, the rest (generated tokens, short prompts) on the int8 kernels.
  const auto prompt_end = [&](size_t i, int64_t begin, int64_t end) {
    const Sequence& seq = *scheduled[i].seq;
    if (!bf16_prompts_ || seq.num_prompt_tokens < model::kBf16PromptTokens) return begin;
    return std::clamp(seq.num_prompt_tokens, begin, end);
  };
  // int8 rows first, then the long prompts' rows, so each matmul splits the batch in two; a
  // sequence recomputed after preemption may give one entry to each side (its KV is written for
  // every row of a layer before attention reads it, so the order of entries does not matter; a
  // hybrid model's recurrent layers sort a sequence's entries by position themselves).
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const int64_t begin = scheduled[i].seq->num_computed;
    const int64_t end = begin + scheduled[i].num_new_tokens;
    logit_count_[i] = 0;
    hidden_count_[i] = 0;
    prompt_count_[i] = 0;
    add(i, prompt_end(i, begin, end), end);
  }
  const size_t bf16_rows_begin = t;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const int64_t begin = scheduled[i].seq->num_computed;
    const int64_t end = begin + scheduled[i].num_new_tokens;
    add(i, begin, prompt_end(i, begin, end));
  }
  model::Batch batch{{tokens_.data(), t},
                     {positions_.data(), t},
                     {sequences_.data(), entries},
                     {logit_rows_.data(), rows},
                     static_cast<int64_t>(bf16_rows_begin),
                     {hidden_rows_.data(), hidden},
                     hidden_.data()};
  if (head_ != nullptr) {
    batch.feature_layers = head_->feature_layers();
    batch.features = features_.data();
  } else if (mtp_) {
    batch.token_hidden = token_hidden_.data();
    batch.mtp_catch_up = mtp_catch_up_;
  }
  batch_ = batch;
  model_.launch_forward(batch_, cache_, logits_.data(), pool_, slot);
  slot_ = slot;
}

void ModelRunner::finish() {
  if (slot_ < 0) fail("model runner: no step to finish");
  const int slot = std::exchange(slot_, -1);
  model_.finish_forward(batch_, logits_.data(), pool_, slot);
  if (head_ != nullptr) {
    head_->encode_features(features_.data(), batch_.num_tokens(), token_hidden_.data(), pool_);
    if (mtp_catch_up_) eagle3_catch_up(batch_);
  }
}

void ModelRunner::eagle3_catch_up(const model::Batch& batch) {
  const auto n = static_cast<size_t>(hidden_width_);
  size_t rows = 0, entries = 0;
  // g of the position before token t's: this step's row of it, or the sequence's mtp_hidden;
  // nullptr (zeros) when neither holds it.
  const auto g_of = [&](const model::BatchSequence& seq, int64_t t) -> const float* {
    const int64_t row = model::row_before(batch, seq, t);
    return row >= 0 ? &token_hidden_[static_cast<size_t>(row) * n] : seq.mtp_prev_hidden;
  };
  for (const model::BatchSequence& seq : batch.sequences) {
    const size_t first = rows;
    for (int64_t t = seq.token_begin; t < seq.token_end; ++t) {
      const int32_t pos = batch.positions[static_cast<size_t>(t)];
      if (pos == 0) continue;  // no g before the first token: nothing to pair it with
      head_tokens_[rows] = batch.tokens[static_cast<size_t>(t)];
      head_positions_[rows] = pos - 1;
      float* g = &head_hidden_[rows * n];
      if (const float* from = g_of(seq, t)) {
        std::copy_n(from, n, g);
      } else {
        std::fill_n(g, n, 0.0f);
      }
      ++rows;
    }
    if (rows > first)
      head_sequences_[entries++] = {static_cast<int64_t>(first), static_cast<int64_t>(rows),
                                    seq.block_tables, -1, nullptr};
  }
  if (rows == 0) return;
  const model::Batch shifted{{head_tokens_.data(), rows},
                             {head_positions_.data(), rows},
                             {head_sequences_.data(), entries},
                             {}};
  head_->forward_mtp(shifted, head_hidden_.data(), *head_cache_, nullptr, nullptr, pool_);
}

void ModelRunner::enable_eagle3(model::Model& head, kv::KvCache& head_cache) {
  head_ = &head;
  head_cache_ = &head_cache;
  mtp_ = true;
  hidden_width_ = head.config().n_embd;
  const size_t tokens = tokens_.size();
  features_.resize(tokens * head.feature_layers().size() * static_cast<size_t>(n_embd_));
  token_hidden_.resize(tokens * static_cast<size_t>(hidden_width_));
  head_hidden_.resize(tokens * static_cast<size_t>(hidden_width_));
  head_tokens_.resize(tokens);
  head_positions_.resize(tokens);
  head_sequences_.resize(sequences_.size());
  entry_ranges_.resize(logit_index_.size());
}

void ModelRunner::enable_mtp_catch_up() {
  if (!model_.config().mtp) fail("model runner: the model runs no multi-token-prediction block");
  mtp_ = true;
  hidden_width_ = n_embd_;
  token_hidden_.resize(tokens_.size() * static_cast<size_t>(n_embd_));
  entry_ranges_.resize(logit_index_.size());
}

std::span<const float> ModelRunner::token_hidden(size_t i, int64_t pos) const {
  if (!mtp_ || i >= entry_ranges_.size()) return {};
  for (const EntryRange& r : entry_ranges_[i]) {
    if (pos >= r.first_position && pos < r.first_position + r.count) {
      const auto row = static_cast<size_t>(r.first_row + pos - r.first_position);
      const auto n = static_cast<size_t>(hidden_width_);
      return {token_hidden_.data() + row * n, n};
    }
  }
  return {};
}

std::span<const float> ModelRunner::hidden_for(size_t i) const {
  const auto n = static_cast<size_t>(n_embd_);
  return {hidden_.data() + static_cast<size_t>(hidden_index_[i]) * n,
          static_cast<size_t>(hidden_count_[i]) * n};
}

std::span<float> ModelRunner::prompt_logits_for(size_t i, int32_t row) {
  if (row < 0 || row >= prompt_count_[i]) fail("model runner: no prompt row {} for {}", row, i);
  const auto index = static_cast<size_t>(prompt_index_[i] + row);
  return {logits_.data() + index * static_cast<size_t>(n_vocab_), static_cast<size_t>(n_vocab_)};
}

std::span<float> ModelRunner::logits_for(size_t i, int32_t row) {
  if (row < 0 || row >= logit_count_[i]) fail("model runner: no logits row {} for {}", row, i);
  const auto index = static_cast<size_t>(logit_index_[i] + row);
  return {logits_.data() + index * static_cast<size_t>(n_vocab_), static_cast<size_t>(n_vocab_)};
}

}  // namespace inferd::engine
