// Batch: one forward step's tokens from any number of sequences, flattened (ragged).
// Each token carries its position; each sequence its block tables, which place the K/V of every
// position in every KV group (kv/kv_cache.h).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kv/kv_cache.h"

namespace inferd::model {

// The tokens of prompts at least this long may be computed with the kernels' bf16 route (AMX-BF16
// where the CPU has it): faster, and decided by the prompt alone, so a sequence gets the same
// results whatever it is batched with. Generated tokens and short prompts take the int8 kernels,
// which give a row the same bits at any batch size.
constexpr int64_t kBf16PromptTokens = 32;

struct BatchSequence {
  int64_t token_begin = 0;  // this sequence's tokens are [token_begin, token_end) of the batch
  int64_t token_end = 0;
  // Blocks of positions 0.. of this sequence per KV group; the batch's tokens must have blocks.
  const kv::BlockTables* block_tables = nullptr;
  // Hybrid models: the KV cache's recurrent state slot of this sequence (kv/kv_cache.h), holding
  // its state after the tokens before token_begin. A sequence whose first token here is at
  // position 0 starts from a zero state whatever the slot held.
  int32_t state_slot = -1;
  // Batch::mtp_catch_up: the final hidden state of the position before token_begin, [n_embd];
  // nullptr: zeros (position 0, or a state not known: a prefix found in the cache), unless
  // another entry of the batch with the same block tables holds that position.
  const float* mtp_prev_hidden = nullptr;
  // A model loaded with LoRA adapters (ModelOptions::lora): this sequence's scale of each,
  // [adapters] in their order; nullptr: each adapter's own (LoraSpec::scale).
  const float* lora_scales = nullptr;
};

struct Batch {
  std::span<const int32_t> tokens;     // [n_tokens]
  std::span<const int32_t> positions;  // [n_tokens] position of each token in its sequence
  std::span<const BatchSequence> sequences;
  std::span<const int32_t> logit_rows;  // batch token indices whose logits are wanted, in order
  // Rows [bf16_rows_begin, n_tokens) are tokens of long prompts (kBf16PromptTokens); the rows
  // before it take the int8 kernels.
  int64_t bf16_rows_begin = std::numeric_limits<int64_t>::max();
  // Batch token indices whose final hidden state (the output norm's result, the input of the
  // vocabulary projection) is wanted (embeddings), and where it goes: [hidden_rows.size(), n_embd].
  std::span<const int32_t> hidden_rows{};
  float* hidden = nullptr;
  // Optional, out: [n_tokens] each token's smallest routing margin over the mixture-of-experts
  // layers (model/moe.h), +inf for a dense model. Two engines whose float orders differ may
  // choose different experts where it is near 0 (a near-tie), as they may pick different
  // greedy tokens where two logits nearly tie: the model tests use it to tell those apart.
  float* routing_margins = nullptr;
  // Out, optional: [n_tokens, n_embd] every token's final hidden state (the output norm's
  // result). Required with mtp_catch_up.
  float* token_hidden = nullptr;
  // Out, optional (an EAGLE-3 drafter: Model::feature_layers of its head): the input of each of
  // these layers (the residual stream entering it) for every token,
  // [n_tokens, feature_layers.size() * n_embd], a token's layers side by side in this order.
  std::span<const int> feature_layers{};
  float* features = nullptr;
  // Multi-token prediction (ModelConfig::mtp): after the trunk, the MTP block also runs over
  // every token, paired with the hidden state of the position before it, so that its K/V cover
  // the positions the trunk computed (llama.cpp feeds its MTP context every batch alike).
  bool mtp_catch_up = false;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

// Checks a batch before any executor uses it: every sequence's token range lies in the batch
// and has block tables, the sequences cover every token, token ids are in [0, n_vocab),
// positions in [0, max_positions), and the logit and hidden-state rows are batch tokens. An
// inferd::Error names the first problem.
void check_batch(const Batch& batch, int n_vocab, int64_t max_positions);

// The batch row that holds the position before token t's (t is a token of entry `seq`): the row
// before it in the entry, or that position in another entry of the same sequence (a sequence
// split between the kernel routes); -1 when the batch holds it nowhere (the drafters' catch-up
// then takes the entry's mtp_prev_hidden).
int64_t row_before(const Batch& batch, const BatchSequence& seq, int64_t t);

// The KV slot (block * block_size + offset) of position `pos` through one KV group's block
// table; an inferd::Error when the table has no block there.
int64_t kv_slot(const std::vector<int32_t>& table, int64_t pos, int64_t block_size, size_t group);

}  // namespace inferd::model
