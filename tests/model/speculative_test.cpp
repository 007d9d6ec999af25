// Speculative decoding on the real models: greedy text with n-gram drafts, and with a draft
// model, is the same as without, token for token, on 50 prompts (input-grounded ones, where
// n-gram drafts are right, and open-ended ones, where most are wrong).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "util/paths.h"

namespace inferd::testing {
namespace {

// 50 prompts from five kinds: copy a list, rename in code, quote a passage, continue a
// numbered list, and open questions.
std::vector<std::string> prompts() {
  const char* words[] = {"apple",  "river", "stone",  "cloud",  "lamp",   "garden", "bridge",
                         "violin", "paper", "candle", "winter", "harbor", "forest", "mirror"};
  std::vector<std::string> out;
  for (int i = 0; i < 10; ++i) {
    std::string list;
    for (int j = 0; j < 8; ++j) list += std::string(words[(i * 3 + j * 5) % 14]) + ", ";
    out.push_back("Copy this list exactly: " + list + "\nCopy: ");
    out.push_back("Rename the function compute_" + std::string(words[i]) +
                  " to calc in this code and print the whole code.\n\ndef compute_" + words[i] +
                  "(values):\n    result = 0\n    for v in values:\n        result += v * " +
                  std::to_string(i + 2) + "\n    return result\n\nprint(compute_" + words[i] +
                  "([1, 2, 3]))\n\nNew code:\n");
    out.push_back("Passage: The " + std::string(words[i + 1]) +
                  " was old and the village kept it with care. Every spring the children "
                  "painted it, and every autumn the rain washed the paint away.\n\nQuestion: "
                  "what did the children do every spring? Answer with a quote from the "
                  "passage.\nAnswer: \"");
    out.push_back("Continue the list:\n1. " + std::string(words[i]) + "\n2. " + words[i + 1] +
                  "\n3. " + words[i + 2] + "\n4.");
    out.push_back("Tell me something interesting about " + std::string(words[i + 3]) + "s.");
  }
  return out;
}

class SpeculativeModelTest : public ::testing::TestWithParam<NamedModel> {
 protected:
  void SetUp() override {
    const std::string path = GetParam().path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not found at " << path;
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(path));
  }
  engine::Engine make_engine(bool spec, int max_seqs) const {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = 1024;
    config.max_seqs = max_seqs;
    config.max_batched_tokens = 256;
    if (spec) {
      config.spec.method = engine::SpecMethod::kNgram;
      config.spec.num_tokens = 5;
      if (max_seqs > 1) {  // drafts in batched steps too, as many as allowed
        config.spec.max_step_rows = 0;
        config.spec.row_cost = 0;
        config.spec.measure_row_cost = false;
      }
    }
    return engine::Engine(*file_, config);
  }
  // Greedy outputs of `count` prompts, all queued at once.
  std::vector<std::vector<int32_t>> run(engine::Engine& e, size_t count,
                                        engine::SpecDecodeStats* stats = nullptr) const {
    std::vector<std::shared_ptr<CollectOutput>> outs;
    const std::vector<std::string> texts = prompts();
    for (size_t i = 0; i < count; ++i)
      outs.push_back(submit_greedy(e, e.tokenizer().encode(texts[i], true, false), 48));
    e.run_until_idle();
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& out : outs) {
      EXPECT_EQ(out->finishes_, 1);
      tokens.push_back(out->result_.output_tokens);
    }
    if (stats != nullptr) *stats = e.spec_decode_stats();
    return tokens;
  }
  std::unique_ptr<gguf::GgufFile> file_;
};

TEST_P(SpeculativeModelTest, GreedyTextIsTheSameWithNgramDrafts) {
  engine::Engine off = make_engine(false, 8), on = make_engine(true, 8);
  engine::SpecDecodeStats stats;
  const auto expected = run(off, 50);
  const auto got = run(on, 50, &stats);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "prompt " << i;
  // Drafts were verified, and the input-grounded prompts gave many right ones.
  EXPECT_GT(stats.num_drafts, 100);
  EXPECT_GT(stats.num_accepted_tokens, 200);
  // One at a time, with the default policy (row cost measured, drafts where they pay).
  engine::Engine alone = make_engine(true, 1);
  const auto single = run(alone, 10, &stats);
  for (size_t i = 0; i < single.size(); ++i) EXPECT_EQ(single[i], expected[i]) << "prompt " << i;
  EXPECT_GT(stats.num_accepted_tokens, 20);
}

TEST(SpeculativeDraftModelTest, GreedyTextIsTheSameWithADraftModel) {
  // SmolLM2 Q4_1 drafted by its own Q4_K_M re-quantization (scripts/make-test-quants): the
  // same vocabulary, a different model, so drafts are often but not always right.
  const std::string draft = cache_dir() + "/models/quants/SmolLM2-135M-Instruct.Q4_K_M.gguf";
  if (!std::filesystem::exists(model_path()) || !std::filesystem::exists(draft))
    GTEST_SKIP() << "needs " << model_path() << " and " << draft << " (scripts/make-test-quants)";
  const gguf::GgufFile file = gguf::GgufFile::open(model_path());
  const std::vector<std::string> texts = prompts();
  std::vector<std::vector<int32_t>> results[2];
  engine::SpecDecodeStats stats;
  for (const bool spec : {false, true}) {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = 1024;
    config.max_seqs = 8;
    config.max_batched_tokens = 256;
    if (spec) {
      config.spec.method = engine::SpecMethod::kDraftModel;
      config.spec.draft_model = draft;
      config.spec.num_tokens = 4;
      config.spec.max_step_rows = 0;
      config.spec.row_cost = 0;
      config.spec.measure_row_cost = false;
    }
    engine::Engine e(file, config);
    std::vector<std::shared_ptr<CollectOutput>> outs;
    for (const std::string& text : texts)
      outs.push_back(submit_greedy(e, e.tokenizer().encode(text, true, false), 32));
    e.run_until_idle();
    for (const auto& out : outs) results[spec].push_back(out->result_.output_tokens);
    stats = e.spec_decode_stats();
  }
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(results[1][i], results[0][i]) << "prompt " << i;
  EXPECT_GT(stats.num_accepted_tokens, stats.num_draft_tokens / 3);
  EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens);
}

INSTANTIATE_TEST_SUITE_P(Models, SpeculativeModelTest, ::testing::ValuesIn(kEngineTestModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace inferd::testing
