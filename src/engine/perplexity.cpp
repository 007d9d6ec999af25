#include "engine/perplexity.h"

#include <cmath>

#include "model/batch.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

// -log p(target) under softmax(logits), in double like the reference does.
double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max_logit);
  return -(double(logits[static_cast<size_t>(target)]) - max_logit - std::log(sum));
}

}  // namespace

PerplexityResult perplexity(model::Model& model, ThreadPool& pool, std::span<const int32_t> tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t n_ctx = options.n_ctx;
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_ctx < 4) fail("perplexity: context {} is too small", n_ctx);
  if (n_tokens < 2 * n_ctx) {
    fail("perplexity: the text has {} tokens; a context of {} needs at least {}", n_tokens, n_ctx,
         2 * n_ctx);
  }
  const int64_t n_vocab = model.config().n_vocab;
  const int block_size = 16;
  const auto blocks = static_cast<int32_t>((n_ctx + block_size - 1) / block_size);
  kv::KvCache cache(
      model.kv_config(blocks, block_size, options.kv_key_type, options.kv_value_type, 1,
                      options.kv_exact_recent));
  const kv::BlockTables tables = cache.allocate_sequence(n_ctx);
  // Hybrid models, quantized caches with exact copies; -1 otherwise.
  const int32_t state_slot = cache.allocate_state();

  const int64_t first = n_ctx / 2;
  const int64_t n_batch = std::min(options.n_batch, n_ctx);
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx)), positions(static_cast<size_t>(n_batch));
  std::vector<int32_t> rows(static_cast<size_t>(n_batch));
  std::vector<float> logits(static_cast<size_t>(n_batch * n_vocab));

  PerplexityResult result;
  result.num_tokens = n_tokens;
  result.num_chunks = n_tokens / n_ctx;
  if (options.max_chunks > 0) result.num_chunks = std::min(result.num_chunks, options.max_chunks);
  double nll = 0, nll2 = 0;
  for (int64_t c = 0; c < result.num_chunks; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (options.bos_id >= 0) chunk[0] = options.bos_id;
    for (int64_t start = 0; start < n_ctx; start += n_batch) {
      const int64_t count = std::min(n_batch, n_ctx - start);
      size_t num_rows = 0;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t pos = start + i;
        positions[static_cast<size_t>(i)] = static_cast<int32_t>(pos);
        if (pos >= first && pos < n_ctx - 1) rows[num_rows++] = static_cast<int32_t>(i);
      }
      model::BatchSequence seq{0, count, &tables, state_slot};  // position 0 resets the state
      model::Batch batch{{chunk.data() + start, static_cast<size_t>(count)},
                         {positions.data(), static_cast<size_t>(count)},
                         {&seq, 1},
                         {rows.data(), num_rows},
                         // a chunk of text is a prompt: long ones take the bf16 route
                         n_ctx >= model::kBf16PromptTokens ? 0 : count};
      model.forward(batch, cache, logits.data(), pool);
      for (size_t r = 0; r < num_rows; ++r) {
        const int64_t pos = start + rows[r];
        const double v = negative_log_likelihood(
            {logits.data() + r * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)},
            tokens[static_cast<size_t>(c * n_ctx + pos + 1)]);
        nll += v;
        nll2 += v * v;
        result.num_scored += 1;
      }
    }
    const double running = std::exp(nll / double(result.num_scored));
    result.ppl_after_chunk.push_back(running);
    if (on_chunk) on_chunk(c, running);
  }
  const double mean = nll / double(result.num_scored);
  const double variance = nll2 / double(result.num_scored) - mean * mean;
  result.ppl = std::exp(mean);
  result.ppl_stderr =
      variance > 0 ? std::sqrt(variance / double(result.num_scored - 1)) * result.ppl : 0.0;
  return result;
}

}  // namespace inferd::engine
