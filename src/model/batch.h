// Batch: one forward step's tokens from any number of sequences, flattened (ragged).
// Each token carries its position and the KV slot it writes; each sequence its block table.
#pragma once

#include <cstdint>
#include <span>

namespace inferd::model {

struct BatchSequence {
  int64_t token_begin = 0;  // this sequence's tokens are [token_begin, token_end) of the batch
  int64_t token_end = 0;
  std::span<const int32_t> block_table;  // KV blocks holding positions 0.. of this sequence
};

struct Batch {
  std::span<const int32_t> tokens;     // [n_tokens]
  std::span<const int32_t> positions;  // [n_tokens] position of each token in its sequence
  std::span<const int64_t> slots;      // [n_tokens] KV slot = block * block_size + offset
  std::span<const BatchSequence> sequences;
  std::span<const int32_t> logit_rows;  // batch token indices whose logits are wanted, in order

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace inferd::model
