// LoRA adapters (model/lora.h) on SmolLM2: a random adapter written here, byte for byte the same
// every run, against llama.cpp's top log-probabilities with the same adapter
// (tests/golden/generation/smollm2-lora*.json, recorded with llama-server --lora on the file this
// test writes; make-golden says how). The adapter moves the distribution far more than float
// noise, so the test can tell a right adapter from a wrong one or none; and the loader refuses
// what it does not implement, by name.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "golden_util.h"
#include "inferd/engine.h"
#include "model/model.h"
#include "model/registry.h"
#include "model_fixture.h"
#include "sampling/rng.h"
#include "util/error.h"

namespace inferd::testing {
namespace {

constexpr int kRank = 8;
constexpr float kAlpha = 16.0f;

struct AdapterSpec {
  std::string architecture = "llama";
  std::vector<std::string> targets = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                      "ffn_gate", "ffn_up", "ffn_down"};
  bool drop_one_b = false;   // a lora_a without its lora_b
  std::string extra_tensor;  // a tensor that is not a lora pair
  bool alora = false;        // adapter.alora.invocation_tokens
  int rank_of_b = kRank;     // lora_b's rank (a mismatch when not kRank)
};

// Uniform values in [-0.06, 0.06] from a seeded generator, with alpha / rank = 2: strong enough
// that the adapter moves the top log-probabilities 5x further from llama.cpp's than float noise
// does (0.02 moved them barely past it: such a test cannot tell an adapter from none).
std::vector<float> random_values(sampling::Rng& rng, size_t n) {
  std::vector<float> out(n);
  for (float& v : out) v = (rng.uniform() * 2.0f - 1.0f) * 0.06f;
  return out;
}

std::string write_adapter(const gguf::GgufFile& model, const std::string& path,
                          const AdapterSpec& spec = {}) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", spec.architecture);
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  w.set_f32("adapter.lora.alpha", kAlpha);
  if (spec.alora) w.set_i32s("adapter.alora.invocation_tokens", {1, 2});
  sampling::Rng rng(2026);
  bool dropped = false;
  for (const gguf::TensorInfo& t : model.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    bool target = false;
    for (const std::string& s : spec.targets)
      target = target || t.name.find("." + s + ".weight") != std::string::npos;
    if (!target) continue;
    const uint64_t in = t.shape[0], out = t.shape[1];
    const std::vector<float> a = random_values(rng, in * kRank);
    const std::vector<float> b = random_values(rng, uint64_t(spec.rank_of_b) * out);
    w.add_tensor(t.name + ".lora_a", DType::F32, {in, uint64_t{kRank}},
                 std::span(reinterpret_cast<const uint8_t*>(a.data()), a.size() * sizeof(float)));
    if (spec.drop_one_b && !dropped) {
      dropped = true;
      continue;
    }
    w.add_tensor(t.name + ".lora_b", DType::F32, {uint64_t(spec.rank_of_b), out},
                 std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size() * sizeof(float)));
  }
  if (!spec.extra_tensor.empty()) {
    const std::vector<float> v(576, 1.0f);
    w.add_tensor(spec.extra_tensor, DType::F32, {576},
                 std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
  }
  w.write(path);
  return path;
}

// An adapter of SmolLM2's token embeddings, which the decoder does not adapt.
std::string write_embedding_adapter(const std::string& path) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  const std::vector<float> a(576 * 2, 0.01f), b(2 * 49152, 0.01f);
  w.add_tensor("token_embd.weight.lora_a", DType::F32, {576, 2},
               std::span(reinterpret_cast<const uint8_t*>(a.data()), a.size() * sizeof(float)));
  w.add_tensor("token_embd.weight.lora_b", DType::F32, {2, 49152},
               std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size() * sizeof(float)));
  w.write(path);
  return path;
}

class LoraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path()))
      GTEST_SKIP() << "model not found at " << model_path() << " (run scripts/fetch-model)";
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(model_path()));
  }
  std::string temp(const std::string& name) const { return ::testing::TempDir() + name; }
  std::unique_ptr<model::Model> load(const std::vector<model::LoraSpec>& lora) const {
    model::ModelOptions options{2048, 2048};
    options.lora = lora;
    return model::load_model(*file_, options);
  }
  std::string refusal(const AdapterSpec& spec) const {
    const std::string path = write_adapter(*file_, temp("inferd-lora-refused.gguf"), spec);
    try {
      load({{path, 1.0f}});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::unique_ptr<gguf::GgufFile> file_;
};

// The mean and largest |ours - llama.cpp's| over the golden top-10 log-probabilities (those
// above -8), along llama.cpp's greedy tokens.
std::pair<double, float> distance_to(const nlohmann::json& golden, model::Model& model) {
  std::vector<float> diffs;
  for (const auto& c : golden["cases"]) {
    const auto& top = c["top_logprobs"];
    if (top.empty()) continue;
    const auto lps = logprobs_along(model, c["prompt_ids"].get<std::vector<int32_t>>(),
                                    c["generated_ids"].get<std::vector<int32_t>>(), top.size());
    for (size_t p = 0; p < top.size(); ++p)
      for (const auto& entry : top[p])
        if (entry[1].get<float>() >= -8.0f)
          diffs.push_back(std::fabs(lps[p][static_cast<size_t>(entry[0].get<int32_t>())] -
                                    entry[1].get<float>()));
  }
  if (diffs.empty()) return {0.0, 0.0f};
  return {std::accumulate(diffs.begin(), diffs.end(), 0.0) / double(diffs.size()),
          *std::max_element(diffs.begin(), diffs.end())};
}

TEST_F(LoraTest, TopLogprobsMatchLlamaCppWithTheSameAdapter) {
  // (Written first: make-golden records llama.cpp with this file.)
  const std::string path = write_adapter(*file_, temp("smollm2-random-lora.gguf"));
  const nlohmann::json golden = load_json("tests/golden/generation/smollm2-lora.json");
  const nlohmann::json golden_fa = load_json("tests/golden/generation/smollm2-lora-fa-on.json");
  ASSERT_FALSE(golden.is_null() || golden_fa.is_null()) << "missing LoRA golden data";
  const auto adapted = load({{path, 1.0f}});
  const auto [mean, largest] = distance_to(golden, *adapted);
  const std::vector<float> self = llama_self_noise(golden, golden_fa);
  const double self_mean = std::accumulate(self.begin(), self.end(), 0.0) / double(self.size());
  const float self_max = *std::max_element(self.begin(), self.end());
  // Without the adapter, or with it at half its scale, the same numbers are far off.
  const auto plain = load({});
  const auto [plain_mean, plain_max] = distance_to(golden, *plain);
  const auto halved = load({{path, 0.5f}});
  const auto [half_mean, half_max] = distance_to(golden, *halved);
  std::printf(
      "[ golden   ] with the adapter: mean |diff| %.4f, max %.4f; without: %.4f, %.4f; at half "
      "scale: %.4f, %.4f; llama.cpp with itself: %.4f, %.4f (%s)\n",
      mean, largest, plain_mean, plain_max, half_mean, half_max, self_mean, self_max, path.c_str());
  EXPECT_LT(mean, 1.25 * self_mean);
  EXPECT_LT(largest, 1.5f * self_max);
  EXPECT_GT(plain_mean, 4 * self_mean);
  EXPECT_GT(half_mean, 2 * self_mean);
}

TEST_F(LoraTest, RefusesWhatItDoesNotImplementByName) {
  AdapterSpec spec;
  spec.architecture = "qwen2";
  EXPECT_NE(refusal(spec).find("qwen2"), std::string::npos);
  spec = {};
  spec.drop_one_b = true;
  EXPECT_NE(refusal(spec).find("lora_b"), std::string::npos);
  spec = {};
  spec.extra_tensor = "blk.0.attn_norm.weight";  // llama.cpp skips adapter norms; they matter
  EXPECT_NE(refusal(spec).find("blk.0.attn_norm.weight"), std::string::npos);
  spec = {};
  spec.alora = true;
  EXPECT_NE(refusal(spec).find("alora"), std::string::npos);
  spec = {};
  spec.rank_of_b = 4;
  EXPECT_NE(refusal(spec).find("rank"), std::string::npos);
  // A pair for a weight the decoder does not adapt (the token embeddings).
  {
    const std::string path = write_embedding_adapter(temp("inferd-lora-embd.gguf"));
    try {
      load({{path, 1.0f}});
      ADD_FAILURE() << "an adapter of the token embeddings was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
    }
  }
  // The model itself is not an adapter.
  try {
    load({{model_path(), 1.0f}});
    ADD_FAILURE() << "a model was taken as an adapter";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("general.type"), std::string::npos) << e.what();
  }
}

// The last position's logits of each prompt, all run in one batch, prompt i with lora_scales[i]
// (nullptr: the adapters' own).
std::vector<std::vector<float>> batch_last_logits(model::Model& model,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<const float*>& scales) {
  int32_t blocks = 0;
  std::vector<int32_t> tokens, positions, rows;
  for (const auto& p : prompts) blocks += static_cast<int32_t>((p.size() + 15) / 16);
  kv::KvCache cache(
      model.kv_config(blocks, 16, DType::F16, DType::F16, static_cast<int32_t>(prompts.size())));
  std::vector<kv::BlockTables> tables;
  std::vector<model::BatchSequence> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    tables.push_back(cache.allocate_sequence(static_cast<int64_t>(prompts[i].size())));
    const auto begin = static_cast<int64_t>(tokens.size());
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      tokens.push_back(prompts[i][j]);
      positions.push_back(static_cast<int32_t>(j));
    }
    rows.push_back(static_cast<int32_t>(tokens.size() - 1));
    seqs.push_back({begin, static_cast<int64_t>(tokens.size()), nullptr, -1, nullptr, scales[i]});
  }
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].block_tables = &tables[i];
  const auto n_vocab = static_cast<size_t>(model.config().n_vocab);
  std::vector<float> logits(rows.size() * n_vocab);
  ThreadPool pool(2);
  const model::Batch batch{tokens, positions, seqs, rows};
  model.forward(batch, cache, logits.data(), pool);
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < rows.size(); ++r)
    out.emplace_back(logits.begin() + static_cast<long>(r * n_vocab),
                     logits.begin() + static_cast<long>((r + 1) * n_vocab));
  return out;
}

// Requests with different adapters share a step (llama-server's per-request `lora`, vLLM's
// adapter by model name): each sequence's rows take its own scales, bit for bit what a model
// loaded with those scales gives it alone.
TEST_F(LoraTest, EachSequenceOfABatchTakesItsOwnScales) {
  const std::string path = write_adapter(*file_, temp("smollm2-random-lora.gguf"));
  const auto adapted = load({{path, 1.0f}});
  const auto plain = load({});
  const auto halved = load({{path, 0.5f}});
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 504, 3458, 282, 4649, 314}, {1, 11620, 2114, 253, 655}, {1, 504, 3458, 282, 4649, 314}};
  const float off = 0.0f, half = 0.5f;
  const auto mixed = batch_last_logits(*adapted, prompts, {&off, &half, nullptr});
  EXPECT_EQ(mixed[0], batch_last_logits(*plain, {prompts[0]}, {nullptr})[0]);
  EXPECT_EQ(mixed[1], batch_last_logits(*halved, {prompts[1]}, {nullptr})[0]);
  EXPECT_EQ(mixed[2], batch_last_logits(*adapted, {prompts[2]}, {nullptr})[0]);
  // (and the adapter does move them: the same prompt with and without it)
  EXPECT_NE(mixed[0], mixed[2]);
  // The batch's 17 tokens go through the pairs a few tokens at a time on each thread; a prompt
  // alone (at most 16) has every pair's outputs split over the threads. Both give the same
  // bits, also where two adapters add into one weight's outputs (in the same order).
  const auto twice = load({{path, 0.5f}, {path, 0.25f}});
  const auto two = batch_last_logits(*twice, prompts, {nullptr, nullptr, nullptr});
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(two[i], batch_last_logits(*twice, {prompts[i]}, {nullptr})[0]) << i;
}

class LoraEngineTest : public LoraTest {
 protected:
  engine::Engine make_engine(const std::vector<model::LoraSpec>& lora) const {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = 512;
    config.max_seqs = 4;
    config.lora = lora;
    return engine::Engine(*file_, config);
  }
  // 40 tokens: two whole blocks the prefix cache could hand on.
  static std::vector<int32_t> long_prompt() {
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 39; ++i) prompt.push_back(504 + 37 * i);
    return prompt;
  }
  struct Expected {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
  };
  // The prompt's greedy tokens and their logprobs on an engine of its own with these adapters.
  Expected alone(const std::vector<model::LoraSpec>& lora,
                 const std::vector<int32_t>& prompt) const {
    engine::Engine e = make_engine(lora);
    auto out = submit(e, prompt, {});
    e.run_until_idle();
    return Expected{out->result_.output_tokens, out->logprobs_};
  }
  // A greedy request with each token's logprob, at `scales` (empty: the adapters' own).
  static std::shared_ptr<CollectOutput> submit(engine::Engine& e,
                                               const std::vector<int32_t>& prompt,
                                               std::vector<float> scales) {
    engine::Request r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = 12;
    r.logprobs = 0;
    r.lora_scales = std::move(scales);
    return submit_request(e, std::move(r));
  }
};

// The engine runs requests with different scales together, each as an engine loaded with its
// scales runs it alone; the prefix cache hands a prompt's blocks only to requests of the same
// scales (a scale-0 request after an adapted one gets the plain model's logprobs, bit for bit).
TEST_F(LoraEngineTest, RequestsChooseTheirScalesAndCacheApart) {
  const std::string path = write_adapter(*file_, temp("smollm2-random-lora.gguf"));
  const std::vector<int32_t> prompt = long_prompt();
  const Expected plain = alone({}, prompt), half = alone({{path, 0.5f}}, prompt),
                 full = alone({{path, 1.0f}}, prompt);
  ASSERT_NE(plain.logprobs, full.logprobs);

  engine::Engine e = make_engine({{path, 1.0f}});
  // Together in one engine's steps.
  auto a = submit(e, prompt, {0.0f});
  auto b = submit(e, prompt, {0.5f});
  auto c = submit(e, prompt, {});
  e.run_until_idle();
  EXPECT_EQ(a->result_.output_tokens, plain.tokens);
  EXPECT_EQ(a->logprobs_, plain.logprobs);
  EXPECT_EQ(b->result_.output_tokens, half.tokens);
  EXPECT_EQ(b->logprobs_, half.logprobs);
  EXPECT_EQ(c->result_.output_tokens, full.tokens);
  EXPECT_EQ(c->logprobs_, full.logprobs);

  // One after another: the same scales share the cached blocks (the adapter's own, given or
  // not; -0 as 0), other scales do not.
  auto off = submit(e, prompt, {-0.0f});
  e.run_until_idle();
  EXPECT_EQ(off->result_.stats.cached_tokens, 32);
  EXPECT_EQ(off->logprobs_, plain.logprobs);
  auto own = submit(e, prompt, {1.0f});
  e.run_until_idle();
  EXPECT_EQ(own->result_.stats.cached_tokens, 32);
  EXPECT_EQ(own->logprobs_, full.logprobs);
  auto quarter = submit(e, prompt, {0.25f});
  e.run_until_idle();
  EXPECT_EQ(quarter->result_.stats.cached_tokens, 0);
  EXPECT_NE(quarter->logprobs_, full.logprobs);

  // The library's SamplingParams::lora_scales: scale 0 is the plain model's text.
  inferd::EngineOptions options;
  options.threads = 2;
  options.context = 512;
  options.lora_adapters = {{path, 1.0f}};
  inferd::Engine api(model_path(), options);
  inferd::SamplingParams params = inferd::SamplingParams::greedy();
  params.max_tokens = 12;
  params.lora_scales = {0.0f};
  EXPECT_EQ(api.generate_tokens({prompt}, params)[0].outputs[0].token_ids, plain.tokens);
  params.lora_scales = {};
  EXPECT_EQ(api.generate_tokens({prompt}, params)[0].outputs[0].token_ids, full.tokens);

  // A scale per adapter, each a number.
  for (const std::vector<float>& bad :
       {std::vector<float>{1.0f, 1.0f}, std::vector<float>{std::nanf("")}}) {
    engine::Request r;
    r.prompt = prompt;
    r.lora_scales = bad;
    r.output = std::make_shared<CollectOutput>();
    try {
      e.add_request(std::move(r));
      ADD_FAILURE() << "LoRA scales of size " << bad.size() << " taken";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("LoRA scale"), std::string::npos) << err.what();
    }
  }
}

// vLLM's LoRARequest: an adapter loaded into an engine that runs, when a request first names
// it, at scale 0 for the requests that give none; a file that fails leaves the engine as it was.
TEST_F(LoraEngineTest, AdaptersAddedLaterApplyToTheRequestsThatNameThem) {
  const std::string path = write_adapter(*file_, temp("smollm2-random-lora.gguf"));
  const std::vector<int32_t> prompt = long_prompt();
  const Expected plain = alone({}, prompt), full = alone({{path, 1.0f}}, prompt);
  engine::Engine e = make_engine({});
  auto queued = submit(e, prompt, {});
  EXPECT_THROW(e.add_lora_adapter(path), Error);  // not while a request is queued
  e.run_until_idle();
  EXPECT_EQ(queued->logprobs_, plain.logprobs);
  EXPECT_THROW(e.add_lora_adapter(model_path()), Error);  // not an adapter
  EXPECT_THROW(e.add_lora_adapter(write_embedding_adapter(temp("inferd-lora-embd.gguf"))), Error);
  ASSERT_EQ(e.add_lora_adapter(path), 0u);
  auto with = submit(e, prompt, {1.0f});
  auto without = submit(e, prompt, {});
  e.run_until_idle();
  EXPECT_EQ(with->logprobs_, full.logprobs);
  EXPECT_EQ(without->logprobs_, plain.logprobs);
  // A second adapter (the same file): index 1, a scale each.
  ASSERT_EQ(e.add_lora_adapter(path), 1u);
  EXPECT_THROW(submit(e, prompt, {1.0f}), Error);  // one scale for two adapters
  auto second = submit(e, prompt, {0.0f, 1.0f});
  e.run_until_idle();
  EXPECT_EQ(second->logprobs_, full.logprobs);
}

}  // namespace
}  // namespace inferd::testing
