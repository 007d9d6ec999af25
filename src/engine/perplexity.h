// Perplexity of a model on a text, defined as llama-perplexity defines it so the numbers can
// be compared: the token stream is cut into chunks of n_ctx tokens, each chunk is evaluated
// from an empty cache (its first token replaced by BOS when the vocabulary adds BOS), and
// only the second half of each chunk is scored: positions [n_ctx/2, n_ctx - 1) predict the
// token that follows them. PPL = exp(mean negative log-likelihood over all scored tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace inferd::engine {

struct PerplexityResult {
  int64_t num_tokens = 0;  // tokens in the text
  int64_t num_chunks = 0;
  int64_t num_scored = 0;  // tokens whose likelihood was counted
  double ppl = 0;
  double ppl_stderr = 0;  // standard error of the estimate, as llama-perplexity prints it
  std::vector<double> ppl_after_chunk;  // running estimate after each chunk
};

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;   // tokens per forward pass; must fit the model's workspace
  int64_t max_chunks = 0;  // 0: all whole chunks
  int32_t bos_id = -1;     // >= 0: replaces the first token of every chunk
  DType kv_key_type = DType::F16;
  DType kv_value_type = DType::F16;
  int kv_exact_recent = kv::kDefaultExactRecentTokens;  // (kv/kv_cache.h, exact copies)
};

// Evaluates `tokens`; `on_chunk(i, running_ppl)` is called after each chunk (may be empty).
// Fewer than 2 * n_ctx tokens is an inferd::Error (llama-perplexity requires the same).
PerplexityResult perplexity(model::Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace inferd::engine
