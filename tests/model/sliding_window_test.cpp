// Sliding-window layers with bounded KV memory, on the real Gemma 3 270M (window 512 on 15 of
// its 18 layers): the blocks the scheduler frees behind the window change nothing in the output
// (same tokens as with --swa-full, alone or batched), and the KV cache in use stays within the
// window's bound while a full-attention cache grows with the sequence.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "util/paths.h"

namespace inferd::testing {
namespace {

class SlidingWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = gemma3_path();
    if (std::filesystem::exists(path)) file_ = new gguf::GgufFile(gguf::GgufFile::open(path));
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  void SetUp() override {
    if (file_ == nullptr) GTEST_SKIP() << "Gemma 3 270M not in the cache (run scripts/fetch-model)";
  }

  static engine::Engine make_engine(bool swa_full, int max_seqs, int64_t max_batched_tokens) {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = 2048;
    config.max_seqs = max_seqs;
    config.max_batched_tokens = max_batched_tokens;
    config.swa_full = swa_full;
    return engine::Engine(*file_, config);
  }

  // The first `n` tokens of the golden text, from offset `skip` words on.
  static std::vector<int32_t> text_tokens(const engine::Engine& e, int n, int skip) {
    std::ifstream in(source_dir() + "/tests/golden/perplexity/genesis-kjv.txt");
    std::stringstream text;
    text << in.rdbuf();
    std::istringstream words(text.str());
    std::string word, out;
    for (int i = 0; words >> word; ++i) {
      if (i >= skip) out += word + " ";
    }
    std::vector<int32_t> ids = e.tokenizer().encode(out, true, true);
    EXPECT_GE(std::ssize(ids), n) << "golden text too short";
    ids.resize(static_cast<size_t>(n));
    return ids;
  }

  // Greedy continuations of `prompts`, all submitted at once.
  static std::vector<std::vector<int32_t>> generate(
      engine::Engine& e, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    std::vector<std::shared_ptr<CollectOutput>> outs;
    for (const auto& prompt : prompts) outs.push_back(submit_greedy(e, prompt, max_tokens, true));
    e.run_until_idle();
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& out : outs) tokens.push_back(out->result_.output_tokens);
    return tokens;
  }

  static gguf::GgufFile* file_;
};

gguf::GgufFile* SlidingWindowTest::file_ = nullptr;

TEST_F(SlidingWindowTest, FreedBlocksChangeNothingAndBoundTheMemory) {
  // Steps of 128 tokens: several prefill chunks, each after blocks were freed.
  engine::Engine bounded = make_engine(false, 1, 128), full = make_engine(true, 1, 128);
  ASSERT_EQ(bounded.kv_cache().groups().size(), 2u);
  ASSERT_EQ(full.kv_cache().groups().size(), 1u);
  const int window = bounded.model_config().sliding_window;
  ASSERT_EQ(window, 512);
  const int n_prompt = 1400, n_gen = 24;  // well past the window
  const std::vector<int32_t> prompt = text_tokens(bounded, n_prompt, 0);
  EXPECT_EQ(generate(bounded, {prompt}, n_gen), generate(full, {prompt}, n_gen));

  // Full attention: every layer holds every position. Bounded: the 3 full-attention layers do,
  // the 15 sliding ones hold the window plus one step's tokens (the scheduler's bound).
  const kv::KvCache& cache = bounded.kv_cache();
  const int64_t positions = n_prompt + n_gen - 1, block = cache.block_size();
  const int64_t blocks = (positions + block - 1) / block;
  const kv::KvGroup& global = cache.groups()[0];
  const kv::KvGroup& sliding = cache.groups()[1];
  EXPECT_EQ(global.n_layers, 3);
  EXPECT_EQ(sliding.n_layers, 15);
  const int64_t sliding_bound = (128 + window - 1 + block - 1) / block + 1;
  EXPECT_EQ(full.peak_kv_bytes(), blocks * int64_t(full.kv_cache().groups()[0].block_bytes));
  EXPECT_LE(bounded.peak_kv_bytes(),
            blocks * int64_t(global.block_bytes) + sliding_bound * int64_t(sliding.block_bytes));
  EXPECT_LT(bounded.peak_kv_bytes(), full.peak_kv_bytes());
  EXPECT_EQ(cache.used_blocks(), 0);
}

TEST_F(SlidingWindowTest, BatchedLongSequencesMatchAlone) {
  // Three sequences past the window share the sliding pool; each must decode as it does alone,
  // although batched their prompts are cut into other chunks (a token's attention does not
  // depend on its tile: kernels_attention_test).
  engine::Engine e = make_engine(false, 3, 128);
  const std::vector<std::vector<int32_t>> prompts = {
      text_tokens(e, 700, 0), text_tokens(e, 620, 300), text_tokens(e, 540, 900)};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(generate(e, {p}, 16)[0]);
  EXPECT_EQ(generate(e, prompts, 16), alone);
  EXPECT_EQ(e.kv_cache().used_blocks(), 0);
}

}  // namespace
}  // namespace inferd::testing
