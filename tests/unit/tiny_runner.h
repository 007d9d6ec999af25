// What the forward tests of the dense and the mixture-of-experts decoder share: Runner (a
// model's logits for one sequence fed in chunks, from an empty cache) and expect_load_error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/registry.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace inferd::testing {

// Runs `tokens` of one sequence through the model in pieces of `chunk` tokens, starting at an
// empty cache, and returns the logits after the last token.
class Runner {
 public:
  // exact_recent: a quantized cache's exact copies (kv/kv_cache.h), 0: none.
  Runner(model::Model& model, int32_t num_blocks, DType kv_type = DType::F16,
         int exact_recent = kv::kDefaultExactRecentTokens)
      : model_(model),
        cache_(model.kv_config(num_blocks, 4, kv_type, kv_type, 1, exact_recent)),
        pool_(2) {}

  kv::BlockTables new_sequence(int64_t max_tokens) { return cache_.allocate_sequence(max_tokens); }

  std::vector<float> run(const std::vector<int32_t>& tokens, int64_t chunk) {
    const kv::BlockTables tables = new_sequence(static_cast<int64_t>(tokens.size()));
    // Hybrid models and exact copies; -1 otherwise.
    const int32_t state_slot = cache_.allocate_state();
    std::vector<float> logits(static_cast<size_t>(model_.config().n_vocab));
    for (int64_t start = 0; start < static_cast<int64_t>(tokens.size()); start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - start);
      std::vector<int32_t> pos, rows{static_cast<int32_t>(n - 1)};
      for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(start + i));
      model::BatchSequence seq{0, n, &tables, state_slot};
      model::Batch batch{{tokens.data() + start, static_cast<size_t>(n)}, pos, {&seq, 1}, rows};
      model_.forward(batch, cache_, logits.data(), pool_);
    }
    if (state_slot >= 0) cache_.state_pool()->release(state_slot);
    return logits;
  }

  model::Model& model_;
  kv::KvCache cache_;
  ThreadPool pool_;
};

// A writer holding `file`'s metadata and tensors, less the keys and tensors `drop` names.
template <typename Drop>
gguf::GgufWriter copy_of(const gguf::GgufFile& file, Drop drop) {
  gguf::GgufWriter w;
  for (const auto& [key, value] : file.metadata())
    if (!drop(key)) w.set(key, value);
  for (const gguf::TensorInfo& t : file.tensors())
    if (!drop(t.name))
      w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.num_bytes));
  return w;
}

// Loading `bytes` must fail with an error that contains `needle`.
inline void expect_load_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto file = gguf::GgufFile::parse(bytes);
  try {
    model::load_model(file, {});
    ADD_FAILURE() << "loaded; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace inferd::testing
