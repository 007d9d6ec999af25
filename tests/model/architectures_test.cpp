// Every architecture inferd runs, on small random-weight models (tests/golden/architectures),
// against llama.cpp on the same files: the next-token distribution along llama.cpp's greedy
// continuation of random prompts, in Q8_0 and in the Q4_K_M mix.
//
// Tolerance, as in the golden test of the real model: llama.cpp against itself with flash
// attention on vs off is the spread of two correct float orders. Our top-10 log-probabilities
// must stay within 1.25x of its mean difference and 1.5x of its largest, each plus a floor
// (0.005 and 0.02 nats) for models where llama.cpp's two paths happen to agree almost exactly.
// Files with K-quant matrices get 2x and 2.5x. They were set when llama.cpp rounded the
// activations to 8 bits per 256 values (Q8_K) and inferd per 32, a difference of method that
// llama.cpp's two attention paths share and so do not show (measured then: mean 1.2-1.6x, max
// 1.2-2.1x of llama.cpp's own spread, with every top-1 token equal). inferd now rounds them as
// Q8_K too (kernels/packed.h, uses_q8k_activations); the allowance was kept, since the
// engines still sum the products in different orders. For those files the test also checks which engine is nearer
// to the unquantized model (inferd's float path on the F16 file): inferd must be, within 5%.
// a top-1 token may differ from llama.cpp's only where the two candidates are closer than
// llama.cpp's largest difference with itself (a near-tie). A missing family feature (a mask,
// a norm, a bias, a rotation) moves log-probabilities by whole nats.
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "model/registry.h"
#include "util/error.h"
#include "util/paths.h"
#include "util/thread_pool.h"

namespace inferd::testing {
namespace {

// A routing margin (model/batch.h) below this, in logits, is a near-tie between two experts.
constexpr float kRoutingNearTie = 0.03f;

class ArchitectureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchitectureTest, NextTokenDistributionMatchesLlamaCpp) {
  const std::string name = GetParam();
  // The hybrid families' F16 files are checked against llama.cpp's F32 run of the same weights
  // (make-golden's HYBRID_TYPES): in F16 llama.cpp rounds the activations of every product to
  // fp16 and the recurrent state carries that rounding through the whole sequence, while
  // inferd's F16 path rounds nothing, so llama.cpp's F32 run is what it must equal.
  const bool recurrent = name.starts_with("qwen35") || name.starts_with("qwen3next");
  const bool f16_against_f32 = recurrent && name.ends_with(".F16");
  const std::string golden_name =
      f16_against_f32 ? name.substr(0, name.size() - 3) + "F32" : name;
  const nlohmann::json golden = load_json("tests/golden/architectures/" + golden_name + ".json");
  const nlohmann::json golden_fa =
      load_json("tests/golden/architectures/" + golden_name + "-fa-on.json");
  ASSERT_FALSE(golden.is_null()) << "missing tests/golden/architectures/" << golden_name << ".json";
  ASSERT_FALSE(golden_fa.is_null()) << "missing the flash-attention run of " << golden_name;
  std::string model_name = golden["model"].get<std::string>();
  if (f16_against_f32) model_name.replace(model_name.rfind(".F32."), 5, ".F16.");
  const std::string path = cache_dir() + "/golden-models/" + model_name;
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " is absent (tests/golden/architectures/make-golden --models-only)";
  const auto file = gguf::GgufFile::open(path);
  auto model = model::load_model(file, {1024, 1024});
  // The same weights before quantization, computed by inferd in float (its F16 path rounds no
  // activations): the closest thing to the exact answer, to tell which engine is nearer to it.
  // NAME-seedS.TYPE.gguf -> NAME-seedS.F16.gguf
  const std::string stem = path.substr(0, path.size() - std::string(".gguf").size());
  const std::string f16_path = stem.substr(0, stem.rfind('.')) + ".F16.gguf";
  std::optional<gguf::GgufFile> f16_file;
  std::unique_ptr<model::Model> f16_model;
  if (std::filesystem::exists(f16_path)) {
    f16_file.emplace(gguf::GgufFile::open(f16_path));
    f16_model = model::load_model(*f16_file, {1024, 1024});
  }
  double ours_to_f16 = 0, theirs_to_f16 = 0;

  const std::vector<float> self = llama_self_noise(golden, golden_fa);
  ASSERT_FALSE(self.empty());
  const float self_max = *std::max_element(self.begin(), self.end());
  const float self_prob_max = llama_self_prob_noise(golden, golden_fa);
  const double self_mean = std::accumulate(self.begin(), self.end(), 0.0) / double(self.size());
  std::vector<float> ours;
  float max_prob_diff = 0;  // of the top-10 probabilities
  int positions = 0, same_top1 = 0, routing_ties = 0;
  for (const auto& c : golden["cases"]) {
    const auto& top = c["top_logprobs"];
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto generated = c["generated_ids"].get<std::vector<int32_t>>();
    std::vector<float> margins, earlier_margins;
    const auto lps = logprobs_along(*model, prompt, generated, top.size(), &margins, DType::F16,
                                    &earlier_margins);
    const auto f16_lps = f16_model ? logprobs_along(*f16_model, prompt, generated, top.size())
                                   : std::vector<std::vector<float>>();
    for (size_t p = 0; p < top.size(); ++p) {
      if (top[p].empty()) continue;  // llama-server sent no probabilities there (make-golden)
      if (margins[p] < kRoutingNearTie) {  // the engines may run different experts here
        ++routing_ties;
        continue;
      }
      const std::vector<float>& lp = lps[p];
      const auto best = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
      const int32_t theirs = top[p][0][0];
      ++positions;
      if (best == theirs) {
        ++same_top1;
      } else {
        const float gap = lp[static_cast<size_t>(best)] - lp[static_cast<size_t>(theirs)];
        // A hybrid mixture of experts carries every earlier token's expert choice in its
        // state, and one near-tie there, decided differently by the two engines' roundings,
        // moves later positions by more than llama.cpp's own spread. A mixture of experts with
        // attention only does the same through the keys and values of an earlier token whose
        // routing nearly tied (random weights give many: up to 7 in one of gemma4moe Q4_K_M's
        // longer prompts). There the two answers differ in rounding, not in method: inferd's
        // must then be as near to the unquantized model's as llama.cpp's is (summed over
        // llama.cpp's top 10), or nearer.
        const bool earlier_routing_tie = earlier_margins[p] < kRoutingNearTie;
        if (gap >= self_max && (recurrent || earlier_routing_tie) && f16_model) {
          double ours_off = 0, theirs_off = 0;
          for (const auto& entry : top[p]) {
            const auto id = static_cast<size_t>(entry[0].get<int32_t>());
            ours_off += std::fabs(lp[id] - f16_lps[p][id]);
            theirs_off += std::fabs(entry[1].get<float>() - f16_lps[p][id]);
          }
          std::printf("[ arch     ] %-14s top-1 parts at position %zu by %.3f: off the F16 model "
                      "inferd %.3f, llama.cpp %.3f\n",
                      name.c_str(), p, gap, ours_off, theirs_off);
          EXPECT_LE(ours_off, 1.05 * theirs_off) << name << ": position " << p;
        } else {
          EXPECT_LT(gap, self_max) << name << ": top-1 " << best << " vs llama.cpp's " << theirs
                                   << " at position " << p << " is not a near-tie";
        }
      }
      for (const auto& entry : top[p]) {
        const float expected = entry[1];
        const auto id = static_cast<size_t>(entry[0].get<int32_t>());
        if (expected < -8.0f) continue;
        ours.push_back(std::fabs(lp[id] - expected));
        max_prob_diff = std::max(max_prob_diff, std::fabs(std::exp(lp[id]) - std::exp(expected)));
        if (f16_model) {
          ours_to_f16 += std::fabs(lp[id] - f16_lps[p][id]);
          theirs_to_f16 += std::fabs(expected - f16_lps[p][id]);
        }
      }
    }
  }
  ASSERT_FALSE(ours.empty());
  // Routing near-ties are rare: most positions must be compared.
  EXPECT_LE(routing_ties * 5, positions + routing_ties) << name << ": " << routing_ties
                                                        << " positions at routing near-ties";
  const float our_max = *std::max_element(ours.begin(), ours.end());
  const double our_mean = std::accumulate(ours.begin(), ours.end(), 0.0) / double(ours.size());
  std::printf(
      "[ arch     ] %-14s top-1 %d/%d; %zu top-10 logprobs: mean |diff| %.4f, max %.4f; llama.cpp "
      "fa on vs off: mean %.4f, max %.4f; largest probability difference %.4f (llama.cpp's "
      "own %.4f); %d positions skipped at routing near-ties\n",
      name.c_str(), same_top1, positions, ours.size(), our_mean, our_max, self_mean, self_max,
      max_prob_diff, self_prob_max, routing_ties);
  // Top-10 probabilities within 0.05 of llama.cpp's, or within twice its own spread where that
  // is wider: its two attention paths alone differ by 0.04-0.14 on some files (the Q8_0 files
  // of llama3, mistral and mixtral, gpt-oss in MXFP4), where inferd is 0.06-0.14 off.
  EXPECT_LT(max_prob_diff, std::max(0.05f, 2.0f * self_prob_max)) << name;
  // The quantized files of the hybrid families get the K-quant files' margins, for the same
  // reason: the two engines round activations differently (llama.cpp in fp16 or Q8_K, inferd
  // in 32-value blocks), which its two attention paths share and so do not show, and the
  // recurrent state sums that difference over every earlier token. They must then be at least
  // as near as llama.cpp to the unquantized model.
  const bool quantized = !name.ends_with(".F16") && !name.ends_with(".F32");
  const bool relaxed = name.find("_K") != std::string::npos || (recurrent && quantized);
  EXPECT_LT(our_mean, (relaxed ? 2.0 : 1.25) * self_mean + 0.005) << name;
  EXPECT_LT(our_max, (relaxed ? 2.5f : 1.5f) * self_max + 0.02f) << name;
  if (f16_model) {
    const double n = static_cast<double>(ours.size());
    std::printf("[ arch     ] %-14s mean |diff| to the F16 model: inferd %.4f, llama.cpp %.4f\n",
                name.c_str(), ours_to_f16 / n, theirs_to_f16 / n);
    if (relaxed) {
      EXPECT_LT(ours_to_f16, 1.05 * theirs_to_f16) << name;
    }
  }
}

// A Q4_0 KV cache with its exact copies (kv/kv_cache.h), on every architecture whose head sizes
// take Q4_0: the logits after each step of a prompt fed in steps of 5 tokens equal, bit for bit,
// those at the same positions of the prompt in one step (the copies come from the staged blocks
// in one, from the sequence's ring in the other), and they differ from the logits without copies
// (the copies are read). The hybrids' recurrent layers are left out: their chunked delta rule
// is not bit-exact across step cuts with an F16 cache either.
TEST_P(ArchitectureTest, QuantizedCacheWithExactCopiesIsFreeOfPromptSteps) {
  const std::string name = GetParam();
  if (name.starts_with("qwen35") || name.starts_with("qwen3next")) GTEST_SKIP() << "recurrent";
  const nlohmann::json golden = load_json("tests/golden/architectures/" + name + ".json");
  ASSERT_FALSE(golden.is_null()) << name;
  const std::string path = cache_dir() + "/golden-models/" + golden["model"].get<std::string>();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const auto file = gguf::GgufFile::open(path);
  auto model = model::load_model(file, {1024, 1024});
  const auto& c = golden["cases"][0];
  std::vector<int32_t> tokens = c["prompt_ids"].get<std::vector<int32_t>>();
  const auto generated = c["generated_ids"].get<std::vector<int32_t>>();
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model->config().n_vocab, step = 5;
  ThreadPool pool(2);
  // The logits of every step's last token, the prompt fed in steps of `size` tokens.
  const auto run = [&](int64_t size, int exact_recent) {
    kv::KvCache cache(model->kv_config(static_cast<int32_t>((n + 15) / 16), 16, DType::Q4_0,
                                       DType::Q4_0, 1, exact_recent));
    const kv::BlockTables tables = cache.allocate_sequence(n);
    const int32_t slot = cache.allocate_state();
    std::vector<float> out, logits(static_cast<size_t>(n * n_vocab));
    for (int64_t start = 0; start < n; start += size) {
      const int64_t count = std::min(size, n - start);
      std::vector<int32_t> pos, rows;
      for (int64_t i = 0; i < count; ++i) {
        pos.push_back(static_cast<int32_t>(start + i));
        if ((start + i + 1) % step == 0 || start + i == n - 1) rows.push_back(static_cast<int32_t>(i));
      }
      model::BatchSequence seq{0, count, &tables, slot};
      model::Batch batch{{tokens.data() + start, static_cast<size_t>(count)}, pos, {&seq, 1}, rows};
      model->forward(batch, cache, logits.data(), pool);
      out.insert(out.end(), logits.begin(), logits.begin() + static_cast<int64_t>(rows.size()) * n_vocab);
    }
    return out;
  };
  try {
    kv::KvCache probe(model->kv_config(1, 16, DType::Q4_0, DType::Q4_0));
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  const auto whole = run(n, kv::kDefaultExactRecentTokens);
  EXPECT_EQ(run(step, kv::kDefaultExactRecentTokens), whole) << name;
  EXPECT_NE(run(n, 0), whole) << name;
}

std::vector<std::string> golden_names() {
  std::vector<std::string> out;
  for (const char* family : {"llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"})
    for (const char* type : {"Q8_0", "Q4_K_M"}) out.push_back(std::string(family) + "." + type);
  // Mixtures of experts, also in F16 (make-golden's MOE_TYPES).
  for (const char* family : {"mixtral", "qwen2moe", "qwen3moe", "glm4moe", "deepseek2", "deepseek2lite"})
    for (const char* type : {"F16", "Q8_0", "Q4_K_M"})
      out.push_back(std::string(family) + "." + type);
  for (const char* type : {"F16", "MXFP4_MOE"}) out.push_back(std::string("gpt-oss.") + type);
  // Gemma 4 (per-layer embeddings, shared KV, two head sizes; experts beside a dense MLP), in
  // F16 too.
  for (const char* family : {"gemma4", "gemma4moe"})
    for (const char* type : {"F16", "Q8_0", "Q4_K_M"}) out.push_back(std::string(family) + "." + type);
  // The hybrid families (Gated DeltaNet): F32 too, and F16 against llama.cpp's F32 run.
  for (const char* family : {"qwen35", "qwen35moe", "qwen3next"})
    for (const char* type : {"F32", "F16", "Q8_0", "Q4_K_M"})
      out.push_back(std::string(family) + "." + type);
  // The i-quant file types (make-golden's IQUANT_TYPES): llama3's seven files hold every i-quant
  // block type between them; qwen3moe's experts take IQ2_S and IQ3_S (its 1-2-bit files route
  // too many positions at near-ties to compare, and its IQ3_XXS file has positions just past the
  // near-tie bound whose experts the two engines choose differently: make-golden's docstring).
  for (const char* type : {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_M", "IQ3_XXS", "IQ3_S"})
    out.push_back(std::string("llama3.") + type);
  for (const char* type : {"IQ2_M", "IQ3_S"})
    out.push_back(std::string("qwen3moe.") + type);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Golden, ArchitectureTest, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return param_test_name(info.param); });

}  // namespace
}  // namespace inferd::testing
