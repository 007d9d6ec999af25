#include "model/batch.h"

#include "util/error.h"

namespace inferd::model {

void check_batch(const Batch& batch, int n_vocab, int64_t max_positions) {
  const int64_t T = batch.num_tokens();
  if (std::ssize(batch.positions) != T)
    fail("batch has {} positions for its {} tokens", batch.positions.size(), T);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t token = batch.tokens[static_cast<size_t>(t)];
    if (token < 0 || token >= n_vocab)
      fail("token id {} is outside the vocabulary of {}", token, n_vocab);
    const int32_t pos = batch.positions[static_cast<size_t>(t)];
    if (pos < 0 || pos >= max_positions)
      fail("position {} is beyond the context of {}", pos, max_positions);
  }
  int64_t covered = 0;
  for (const BatchSequence& seq : batch.sequences) {
    if (seq.token_begin < 0 || seq.token_end > T || seq.token_begin > seq.token_end ||
        seq.block_tables == nullptr)
      fail("batch sequence [{}, {}) of a {}-token batch has no tokens or no blocks",
           seq.token_begin, seq.token_end, T);
    covered += seq.token_end - seq.token_begin;
  }
  if (covered != T) fail("batch sequences cover {} of its {} tokens", covered, T);
  for (const int32_t r : batch.logit_rows)
    if (r < 0 || r >= T) fail("logit row {} is not a batch token", r);
  for (const int32_t r : batch.hidden_rows)
    if (r < 0 || r >= T) fail("hidden-state row {} is not a batch token", r);
}

int64_t row_before(const Batch& batch, const BatchSequence& seq, int64_t t) {
  if (t > seq.token_begin) return t - 1;
  const int32_t before = batch.positions[static_cast<size_t>(t)] - 1;
  for (const BatchSequence& other : batch.sequences) {
    if (other.block_tables != seq.block_tables || &other == &seq) continue;
    for (int64_t u = other.token_begin; u < other.token_end; ++u)
      if (batch.positions[static_cast<size_t>(u)] == before) return u;
  }
  return -1;
}

int64_t kv_slot(const std::vector<int32_t>& table, int64_t pos, int64_t block_size, size_t group) {
  const auto i = static_cast<size_t>(pos / block_size);
  if (i >= table.size() || table[i] == kv::kNoBlock)
    fail("no KV block for position {} in KV group {}", pos, group);
  return int64_t{table[i]} * block_size + pos % block_size;
}

}  // namespace inferd::model
