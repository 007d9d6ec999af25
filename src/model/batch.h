// Batch: one forward step's tokens from any number of sequences, flattened (ragged).
// Each token carries its position and the KV slot it writes; each sequence its block table.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

namespace inferd::model {

// The tokens of prompts at least this long may be computed with the kernels' bf16 route (AMX-BF16
// where the CPU has it): faster, and decided by the prompt alone, so a sequence gets the same
// results whatever it is batched with. Generated tokens and short prompts take the int8 kernels,
// which give a row the same bits at any batch size.
constexpr int64_t kBf16PromptTokens = 32;

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
  // Rows [bf16_rows_begin, n_tokens) are tokens of long prompts (kBf16PromptTokens); the rows
  // before it take the int8 kernels.
  int64_t bf16_rows_begin = std::numeric_limits<int64_t>::max();

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace inferd::model
