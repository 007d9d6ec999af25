// Helpers of the tests against llama.cpp's golden data: reading the JSON files and computing
// log-probabilities along a forced continuation.
#pragma once

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model_fixture.h"
#include "util/thread_pool.h"

namespace inferd::testing {

// A file under the source tree as JSON; null when it does not exist.
inline nlohmann::json load_json(const std::string& relative) {
  std::ifstream in(source_dir() + "/" + relative);
  if (!in) return nullptr;
  return nlohmann::json::parse(in);
}

// A test parameter (a golden file's name, NAME.TYPE or a GGUF file name) as a gtest name:
// '.', '-' and '+' become '_'.
inline std::string param_test_name(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  std::replace(name.begin(), name.end(), '-', '_');
  std::replace(name.begin(), name.end(), '+', '_');
  return name;
}

// Log-softmax of one row of logits.
inline std::vector<float> log_softmax(std::span<const float> logits) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max);
  const float lse = max + static_cast<float>(std::log(sum));
  std::vector<float> out(logits.begin(), logits.end());
  for (float& v : out) v -= lse;
  return out;
}

// Runs prompt + forced continuation through the model and returns log-probabilities of the
// next token after the prompt and after each of the first `positions - 1` forced tokens, with
// keys and values cached as `kv_type` (a quantized cache with exact copies of `exact_recent`
// keys, kv/kv_cache.h).
inline std::vector<std::vector<float>> logprobs_along(
    model::Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced,
    size_t positions, std::vector<float>* margins = nullptr, DType kv_type = DType::F16,
    std::vector<float>* earlier_margins = nullptr,
    int exact_recent = kv::kDefaultExactRecentTokens) {
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), forced.begin(), forced.begin() + static_cast<long>(positions - 1));
  const int n = static_cast<int>(tokens.size());
  kv::KvCache cache(model.kv_config((n + 15) / 16, 16, kv_type, kv_type, 1, exact_recent));
  const kv::BlockTables tables = cache.allocate_sequence(n);
  std::vector<int32_t> pos(static_cast<size_t>(n)), rows;
  for (int i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  for (size_t r = 0; r < positions; ++r)
    rows.push_back(static_cast<int32_t>(prompt.size() - 1 + r));
  const int n_vocab = model.config().n_vocab;
  std::vector<float> logits(rows.size() * static_cast<size_t>(n_vocab));
  // (-1 without recurrent layers or exact copies)
  model::BatchSequence seq{0, n, &tables, cache.allocate_state()};
  ThreadPool pool(2);
  model::Batch batch{tokens, pos, {&seq, 1}, rows};
  // Each position's routing margin (model/batch.h), the smallest over the MoE layers of its own
  // token: a near-tie there, where two engines may run different experts, moves the
  // distribution by nats (one in an earlier token reaches it through attention, diluted).
  std::vector<float> token_margins(static_cast<size_t>(n));
  // earlier_margins: the smallest over the tokens before each position's own.
  if (margins != nullptr || earlier_margins != nullptr) batch.routing_margins = token_margins.data();
  model.forward(batch, cache, logits.data(), pool);
  if (margins != nullptr) {
    margins->clear();
    for (const int32_t row : rows) margins->push_back(token_margins[static_cast<size_t>(row)]);
  }
  if (earlier_margins != nullptr) {
    earlier_margins->clear();
    for (const int32_t row : rows) {
      float smallest = std::numeric_limits<float>::infinity();
      for (int32_t i = 0; i < row; ++i) smallest = std::min(smallest, token_margins[static_cast<size_t>(i)]);
      earlier_margins->push_back(smallest);
    }
  }
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    out.push_back(log_softmax(
        {logits.data() + r * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)}));
  }
  return out;
}

// Calls fn(lp_a, lp_b) for each token in the top-10 of both of two llama.cpp runs, over the
// positions both reached with the same tokens.
template <typename Fn>
void for_each_shared_logprob(const nlohmann::json& a, const nlohmann::json& b, Fn fn) {
  for (size_t i = 0; i < a["cases"].size(); ++i) {
    const auto& x = a["cases"][i];
    const auto& y = b["cases"][i];
    for (size_t p = 0; p < x["top_logprobs"].size() && p < y["top_logprobs"].size(); ++p) {
      if (p > 0 && x["generated_ids"][p - 1] != y["generated_ids"][p - 1]) break;
      std::map<int32_t, float> other;
      for (const auto& e : y["top_logprobs"][p]) other[e[0]] = e[1];
      for (const auto& e : x["top_logprobs"][p])
        if (other.count(e[0])) fn(float(e[1]), other[e[0]]);
    }
  }
}

// |difference| of top-10 log-probabilities between two llama.cpp runs (entries below -8 nats,
// the far tail, are skipped).
inline std::vector<float> llama_self_noise(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<float> diffs;
  for_each_shared_logprob(a, b, [&](float x, float y) {
    if (x >= -8.0f) diffs.push_back(std::fabs(x - y));
  });
  return diffs;
}

// The largest |difference| of top-10 probabilities between two llama.cpp runs.
inline float llama_self_prob_noise(const nlohmann::json& a, const nlohmann::json& b) {
  float largest = 0;
  for_each_shared_logprob(a, b, [&](float x, float y) {
    largest = std::max(largest, std::fabs(std::exp(x) - std::exp(y)));
  });
  return largest;
}

}  // namespace inferd::testing
