// The CUDA executor against the CPU decoder on whole models: the files named in
// INFERD_CUDA_TEST_MODELS (colon-separated; scripts/gpu-check writes random-weight ones of each
// family). Each file is run by both from the same prompt (a 40-token prefill: the cuBLAS
// route), then greedily (the matrix-vector route). The greedy tokens must be the same, or
// part only where the CPU's two candidates nearly tie; every comparison is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/device_memory.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/registry.h"
#include "util/thread_pool.h"

namespace inferd::model {
namespace {

std::vector<std::string> test_models() {
  std::vector<std::string> paths;
  const char* env = std::getenv("INFERD_CUDA_TEST_MODELS");
  if (env == nullptr) return paths;
  std::stringstream in(env);
  for (std::string p; std::getline(in, p, ':');)
    if (!p.empty()) paths.push_back(p);
  return paths;
}

// One sequence of one model and its cache.
struct ModelRun {
  ModelRun(const gguf::GgufFile& file, Device device, int64_t context) {
    ModelOptions options;
    options.max_batch_tokens = 64;
    options.max_context = context;
    options.device = device;
    model = load_model(file, options);
    cache = std::make_unique<kv::KvCache>(model->kv_config(int32_t(context / 16)));
    tables = cache->allocate_sequence(context);
  }

  // Runs `tokens` at positions [pos, pos + n); returns the last token's logits.
  std::vector<float> step(const std::vector<int32_t>& tokens, int32_t pos) {
    std::vector<int32_t> positions(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = pos + int32_t(i);
    const BatchSequence seq{0, int64_t(tokens.size()), &tables};
    const int32_t last = int32_t(tokens.size()) - 1;
    std::vector<float> logits(size_t(model->config().n_vocab));
    const int64_t bf16_from = int64_t(tokens.size()) >= kBf16PromptTokens ? 0 : int64_t(tokens.size());
    model->forward({tokens, positions, {&seq, 1}, {&last, 1}, bf16_from}, *cache, logits.data(), pool);
    return logits;
  }

  std::unique_ptr<Model> model;
  std::unique_ptr<kv::KvCache> cache;
  kv::BlockTables tables;
  ThreadPool pool{4, false};
};

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

double stddev(const std::vector<float>& v) {
  double m = 0, s = 0;
  for (const float x : v) m += x;
  m /= double(v.size());
  for (const float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()));
}

TEST(CudaDecoder, GreedyTokensMatchTheCpu) {
  const std::vector<std::string> paths = test_models();
  if (paths.empty()) GTEST_SKIP() << "INFERD_CUDA_TEST_MODELS names no model";
  constexpr int kPrompt = 40, kSteps = 32;
  constexpr int64_t kContext = 256;
  // The CPU's logit of its own greedy token minus its logit of the CUDA's choice, at a step
  // where they differ, in units of the rms difference between the engines' logits there: below
  // this, a near-tie.
  constexpr double kNearTie = 4.0;
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    const gguf::GgufFile file = gguf::GgufFile::open(path);
    ModelRun cpu(file, Device::kCpu, kContext), gpu(file, Device::kCuda, kContext);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> token(0, cpu.model->config().n_vocab - 1);
    std::vector<int32_t> prompt(kPrompt);
    for (int32_t& t : prompt) t = token(rng);
    std::vector<float> lc = cpu.step(prompt, 0), lg = gpu.step(prompt, 0);
    double max_diff = 0, rms_diff = 0;
    for (size_t i = 0; i < lc.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(lc[i] - lg[i])));
      rms_diff += double(lc[i] - lg[i]) * (lc[i] - lg[i]);
    }
    rms_diff = std::sqrt(rms_diff / double(lc.size()));
    const double sd = stddev(lc);
    std::printf("[gpu-check] %s: prefill logits |cpu - cuda| rms %.4g, max %.4g (%.3g and %.3g of "
                "their std %.4g)\n",
                path.c_str(), rms_diff, max_diff, rms_diff / sd, max_diff / sd, sd);
    // The engines round activations differently (module comment); a wrong kernel moves logits
    // by a good part of their spread.
    EXPECT_LT(rms_diff / sd, 0.05) << "prefill logits part beyond rounding";
    {
      // The cuBLAS route without F16 copies of the weights (dequantized slice by slice) gives
      // the same products.
      setenv("INFERD_CUDA_F16_WEIGHTS", "0", 1);
      ModelRun sliced(file, Device::kCuda, kContext);
      unsetenv("INFERD_CUDA_F16_WEIGHTS");
      const std::vector<float> ls = sliced.step(prompt, 0);
      for (size_t i = 0; i < ls.size(); ++i)
        ASSERT_NEAR(ls[i], lg[i], 1e-4 * sd) << "logit " << i << " without F16 copies";
    }
    int same = 0;
    for (int s = 0; s < kSteps; ++s) {
      const int32_t tc = argmax(lc), tg = argmax(lg);
      if (tc != tg) {
        // The engines round differently (activation quantization per 32 values here, per 256
        // for the CPU's K-quant kernels; bf16 against f16 prompts), so their logits differ by a
        // noise of some rms; a choice within a few times that noise is a near-tie.
        double noise = 0;
        for (size_t i = 0; i < lc.size(); ++i) noise += double(lc[i] - lg[i]) * (lc[i] - lg[i]);
        noise = std::sqrt(noise / double(lc.size()));
        const double gap = lc[size_t(tc)] - lc[size_t(tg)];
        std::printf("[gpu-check] %s: greedy parts at step %d: cpu %d, cuda %d, cpu gap %.4g = %.3g "
                    "x the rms difference of the two engines' logits (%.3g)\n",
                    path.c_str(), s, tc, tg, gap, gap / noise, noise);
        EXPECT_LT(gap, kNearTie * noise) << "the greedy tokens part where the CPU's choice is clear";
        break;
      }
      ++same;
      lc = cpu.step({tc}, kPrompt + s);
      lg = gpu.step({tg}, kPrompt + s);
    }
    std::printf("[gpu-check] %s: %d of %d greedy tokens identical\n", path.c_str(), same, kSteps);
  }
}

// Two sequences decoded in one step give what each gives alone (the batched matrix-vector
// kernels and the block tables of two sequences).
TEST(CudaDecoder, BatchedDecodeMatchesSingleSequences) {
  const std::vector<std::string> paths = test_models();
  if (paths.empty()) GTEST_SKIP() << "INFERD_CUDA_TEST_MODELS names no model";
  const gguf::GgufFile file = gguf::GgufFile::open(paths.front());
  ModelOptions options;
  options.max_batch_tokens = 64;
  options.max_context = 128;
  options.device = Device::kCuda;
  std::unique_ptr<Model> model = load_model(file, options);
  kv::KvCache cache(model->kv_config(32));
  kv::BlockTables a = cache.allocate_sequence(64), b = cache.allocate_sequence(64);
  ThreadPool pool(1, false);
  const int n_vocab = model->config().n_vocab;
  std::vector<float> alone(size_t(2 * n_vocab)), together(size_t(2 * n_vocab));
  const std::vector<int32_t> prompt_a = {1, 2, 3, 4, 5}, prompt_b = {9, 8, 7};
  const auto run = [&](const std::vector<int32_t>& tokens, const std::vector<int32_t>& pos,
                       const std::vector<BatchSequence>& seqs, const std::vector<int32_t>& rows,
                       float* out) {
    model->forward({tokens, pos, seqs, rows, int64_t(tokens.size())}, cache, out, pool);
  };
  run(prompt_a, {0, 1, 2, 3, 4}, {{0, 5, &a}}, {4}, alone.data());
  run(prompt_b, {0, 1, 2}, {{0, 3, &b}}, {2}, alone.data());
  run({11}, {5}, {{0, 1, &a}}, {0}, alone.data());
  run({12}, {3}, {{0, 1, &b}}, {0}, alone.data() + n_vocab);
  // The same two decode steps again, together (they overwrite the same slots).
  run({11, 12}, {5, 3}, {{0, 1, &a}, {1, 2, &b}}, {0, 1}, together.data());
  for (size_t i = 0; i < alone.size(); ++i)
    ASSERT_NEAR(together[i], alone[i], 1e-4f * (1.0f + std::fabs(alone[i]))) << "logit " << i;
}

}  // namespace
}  // namespace inferd::model
