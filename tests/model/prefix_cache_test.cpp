// Prefix caching through the engine, on the real models: outputs with the cache on equal those
// with it off (greedy, the same requests: repeated prompts, a shared system prompt, multi-turn
// histories, a sliding-window model), the reported cached tokens, and salts that never share.
#include <filesystem>

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "util/paths.h"

namespace inferd::testing {
namespace {

class PrefixCacheTest : public ::testing::TestWithParam<NamedModel> {
 protected:
  void SetUp() override {
    const std::string path = GetParam().path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found at " << path;
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(path));
  }

  // Steps of 96 tokens by default: prompts in several chunks. Every row on the int8 kernels:
  // with the bf16 route (AMX-BF16 CPUs) a chat turn's history computed from scratch takes it
  // for the earlier answers' tokens, which the cached history holds as generated (int8) K/V, so
  // the two would differ by rounding (EngineConfig::bf16_prompts).
  engine::Engine make_engine(bool prefix_caching, int64_t max_batched_tokens = 96,
                             DType kv_type = DType::F16) const {
    engine::EngineConfig config;
    config.bf16_prompts = false;
    config.kv_key_type = config.kv_value_type = kv_type;
    config.threads = 2;
    config.context = 2048;
    config.max_seqs = 4;
    config.max_batched_tokens = max_batched_tokens;
    config.prefix_caching = prefix_caching;
    return engine::Engine(*file_, config);
  }

  struct Output {
    std::vector<int32_t> tokens;
    int64_t cached = 0;
  };
  // Greedy, one request at a time (so that each can find what the earlier ones left).
  static Output run(engine::Engine& e, const std::vector<int32_t>& prompt, int64_t max_tokens,
                    const std::string& salt = "") {
    auto out = submit_greedy(e, prompt, max_tokens, false, salt);
    e.run_until_idle();
    EXPECT_EQ(out->finishes_, 1);
    return {out->result_.output_tokens, out->result_.stats.cached_tokens};
  }

  // 640 tokens: longer than Gemma 3's window of 512, so its sliding layers free blocks.
  std::vector<int32_t> long_prompt() const {
    std::string text;
    for (int i = 0; i < 50; ++i)
      text += "A long shared prompt about rivers, mountains, cities and the weather of place " +
              std::to_string(i) + ". ";
    std::vector<int32_t> prompt = engine::Engine(*file_, {}).tokenizer().encode(text, true, true);
    EXPECT_GE(prompt.size(), 640u);
    prompt.resize(640);
    return prompt;
  }

  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::unique_ptr<gguf::GgufFile> file_;
};

TEST_P(PrefixCacheTest, OutputsWithTheCacheEqualOutputsWithout) {
  engine::Engine on = make_engine(true), off = make_engine(false);
  const auto encode = [&](const std::string& text, bool bos) {
    return on.tokenizer().encode(text, bos, true);
  };
  const std::vector<int32_t> system = encode(
      "You are a careful assistant. You answer questions about history, geography and science "
      "in short, precise sentences, and you say so when you are not sure of something. ",
      true);
  std::vector<std::vector<int32_t>> prompts = {
      concat(system, encode("What is the capital of France?", false)),
      concat(system, encode("What is the capital of France?", false)),  // repeated
      concat(system, encode("Why is the sky blue in the daytime?", false)),
  };
  int64_t cached = 0;
  for (const auto& prompt : prompts) {
    const Output a = run(on, prompt, 24), b = run(off, prompt, 24);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(b.cached, 0);
    cached += a.cached;
  }
  EXPECT_GE(cached, 2 * (std::ssize(system) / 16) * 16) << "the system prompt was not reused";

  // Multi-turn: each turn's prompt is the previous prompt, its answer and a new message, so the
  // cached blocks include tokens that were generated one at a time (decode) and are now prompt.
  std::vector<int32_t> history = prompts[0];
  for (const char* message : {" And of Italy?", " Which of the two is older?", " Thank you."}) {
    const Output a = run(on, history, 20), b = run(off, history, 20);
    ASSERT_EQ(a.tokens, b.tokens) << "turn with " << history.size() << " tokens";
    const Output again = run(on, concat(concat(history, a.tokens), encode(message, false)), 1);
    EXPECT_GE(again.cached, std::ssize(history) - 16) << "the history was not reused";
    history = concat(concat(history, a.tokens), encode(message, false));
  }
  EXPECT_EQ(on.kv_cache().used_blocks(), 0);
  EXPECT_GT(on.prefix_cache_stats().hit_tokens, 0);
  EXPECT_EQ(off.prefix_cache_stats().queried_tokens, 0);
}

// A 4-bit cache keeps exact copies of a sequence's first and latest blocks (kv/kv_cache.h). A
// chat turn that resumes the previous turn's history from the cache loads them from the
// snapshot that turn left at its last block end, so it reads every key as a turn computed from
// scratch does: the same tokens with the same log-probabilities, bit for bit.
TEST_P(PrefixCacheTest, QuantizedCacheTurnsEqualTurnsWithoutTheCache) {
  engine::Engine on = make_engine(true, 96, DType::Q4_0), off = make_engine(false, 96, DType::Q4_0);
  const auto encode = [&](const std::string& text, bool bos) {
    return on.tokenizer().encode(text, bos, true);
  };
  const auto run_logprobs = [](engine::Engine& e, const std::vector<int32_t>& prompt) {
    engine::Request r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.logprobs = 0;
    auto out = submit_request(e, std::move(r));
    e.run_until_idle();
    return out;
  };
  std::vector<int32_t> history =
      encode("You are a careful assistant who answers in short sentences. Name three rivers of "
             "Europe and the seas they flow into.",
             true);
  int64_t cached = 0;
  for (const char* message : {" And of Asia?", " Which of them is the longest?", " Thanks."}) {
    const auto a = run_logprobs(on, history), b = run_logprobs(off, history);
    ASSERT_EQ(a->result_.output_tokens, b->result_.output_tokens) << history.size() << " tokens";
    EXPECT_EQ(a->logprobs_, b->logprobs_) << history.size() << " tokens";
    EXPECT_EQ(std::ssize(a->logprobs_), 16);
    cached += a->result_.stats.cached_tokens;
    history = concat(concat(history, a->result_.output_tokens), encode(message, false));
  }
  EXPECT_GT(cached, 0) << "no turn resumed from the cache";
  EXPECT_EQ(on.kv_cache().used_blocks(), 0);
}

TEST_P(PrefixCacheTest, DifferentSaltsNeverShare) {
  engine::Engine e = make_engine(true);
  const std::vector<int32_t> prompt = e.tokenizer().encode(
      "A shared document that two tenants both send, long enough to fill several blocks of the "
      "cache with the same tokens in the same order. It goes on about the weather, the price of "
      "bread and the opening hours of the town library, which change every season.",
      true, true);
  ASSERT_GT(prompt.size(), 32u);
  EXPECT_EQ(run(e, prompt, 4, "tenant-a").cached, 0);
  EXPECT_EQ(run(e, prompt, 4, "tenant-b").cached, 0);
  EXPECT_EQ(run(e, prompt, 4, "").cached, 0);
  EXPECT_GT(run(e, prompt, 4, "tenant-a").cached, 0);
  EXPECT_GT(run(e, prompt, 4, "tenant-b").cached, 0);
  EXPECT_GT(run(e, prompt, 4, "").cached, 0);
}

TEST_P(PrefixCacheTest, ChoicesOfOnePromptComputeItOnce) {
  // Four requests of one 640-token prompt submitted together, with room to prefill all four in
  // one step: the first computes the prompt, the others wait for its blocks and take them from
  // the cache.
  const std::vector<int32_t> prompt = long_prompt();
  int64_t block_bytes = 0;
  size_t n_groups = 0;
  const auto peak_of_four = [&](bool caching, std::vector<std::vector<int32_t>>& outputs) {
    engine::Engine e = make_engine(caching, 4096);  // all four could run in one step
    std::vector<std::shared_ptr<CollectOutput>> outs;
    for (int i = 0; i < 4; ++i) outs.push_back(submit_greedy(e, prompt, 8, true));
    e.run_until_idle();
    for (const auto& out : outs) outputs.push_back(out->result_.output_tokens);
    block_bytes = int64_t(e.kv_cache().groups()[0].block_bytes);
    n_groups = e.kv_cache().groups().size();
    return e.peak_kv_bytes();
  };
  std::vector<std::vector<int32_t>> shared, separate;
  const int64_t shared_bytes = peak_of_four(true, shared);
  const int64_t separate_bytes = peak_of_four(false, separate);
  EXPECT_EQ(shared, separate);
  for (const auto& out : shared) EXPECT_EQ(out, shared[0]);
  std::printf(
      "[ prefix   ] n = 4 of a 640-token prompt: KV peak %.2f MiB shared, %.2f MiB without\n",
      double(shared_bytes) / 1048576.0, double(separate_bytes) / 1048576.0);
  EXPECT_LT(shared_bytes * 2, separate_bytes);
  if (n_groups == 1) {
    // One copy of the prompt's 39 full blocks (one token is left to compute), plus per choice
    // its last block and the one its 8 new tokens spill into.
    EXPECT_LE(shared_bytes, (640 / 16 - 1 + 4 * 2) * block_bytes);
    EXPECT_GE(separate_bytes, 4 * (640 / 16) * block_bytes);
  }
}

TEST_P(PrefixCacheTest, ChoicesForkFromTheFirstAndEqualSeparateRequests) {
  // n = 4 as one request (the other choices fork from the first when its prompt is done) gives
  // each choice the tokens it gets as a request of its own with its seed, on the full-attention
  // model and on the sliding-window one (whose forks share tables with freed entries).
  const std::vector<int32_t> prompt = long_prompt();
  const auto sampled = [&](uint64_t seed) {
    engine::Request r;
    r.prompt = prompt;
    r.max_tokens = 24;
    r.ignore_eos = true;
    // Wide open sampling: the long repetitive prompt makes the model sure of its next tokens.
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.seed = seed;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t i = 0; i < 4; ++i) {
    engine::Engine e = make_engine(false);
    auto out = submit_request(e, sampled(7 + i));
    e.run_until_idle();
    alone.push_back(out->result_.output_tokens);
  }
  EXPECT_TRUE(alone[0] != alone[1] || alone[0] != alone[2]);  // the seeds matter
  engine::Engine e = make_engine(false);
  engine::Request r = sampled(7);
  std::vector<std::shared_ptr<CollectOutput>> more;
  for (int i = 0; i < 3; ++i) {
    more.push_back(std::make_shared<CollectOutput>());
    r.more_outputs.push_back(more.back());
  }
  auto first = submit_request(e, std::move(r));
  e.run_until_idle();
  EXPECT_EQ(first->result_.output_tokens, alone[0]);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(more[i]->result_.output_tokens, alone[i + 1]) << i;
  EXPECT_EQ(e.kv_cache().used_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheTest, ::testing::ValuesIn(kEngineTestModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace inferd::testing
