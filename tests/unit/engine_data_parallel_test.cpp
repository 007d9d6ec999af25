// Data parallelism through the engine (model/data_parallel.h), on the tiny random model (dense;
// with 8 experts of which each token runs 2, spread over the ranks; the tiny hybrid with its
// recurrent states and prefix snapshots) split over 2 ranks that
// are threads of this process (dist::ThreadGroup; rank 1 in dist::run_worker as under mpirun).
// The scheduler's steps as they come: six sampled requests of different prompt lengths, a beam
// search of width 3 and 3 sampled choices of one prompt (their forks' copy-on-write of a first
// block takes its rank along), and a prompt sent again (a prefix-cache hit continues on the rank
// that holds the cached blocks): every token and log-probability is what one process gives, and
// both ranks ran tokens.
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator.h"
#include "dist/model_parallel.h"
#include "engine/engine.h"
#include "thread_ranks.h"
#include "tiny_engine.h"
#include "tiny_hybrid.h"

namespace inferd::engine {
namespace {

using testing::Rank1;

// The parameter: experts (0: dense; -1: the tiny hybrid, recurrent layers and their snapshots;
// -2: dense with a 4-bit KV cache, whose exact copies live in state slots and snapshots).
constexpr int kHybrid = -1, kQuantizedCache = -2;
class EngineDataParallelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::vector<uint8_t> bytes;
    if (GetParam() == kHybrid) {
      testing::TinyHybridSpec spec;
      spec.with_tokenizer = true;
      spec.seed = 13;
      bytes = testing::make_tiny_hybrid(spec);
    } else {
      testing::TinyLlamaSpec spec;
      spec.n_layers = 3;
      spec.n_vocab = 24;
      spec.with_tokenizer = true;
      spec.seed = 13;
      if (GetParam() == kQuantizedCache) spec.n_embd = 128;  // head size 32, as Q4_0 needs
      spec.n_experts = std::max(GetParam(), 0);
      spec.n_experts_used = GetParam() > 0 ? 2 : 0;
      bytes = testing::make_tiny_llama(spec);
    }
    model_ = std::make_unique<testing::TempModelFile>(bytes, "inferd-engine-dp");
    file_ = model_->file.get();
  }
  EngineConfig config(dist::Communicator* data) const {
    EngineConfig c;
    c.threads = 1;
    c.pin_threads = false;
    c.context = 128;
    c.max_seqs = 8;
    c.max_batched_tokens = 64;
    if (GetParam() == kQuantizedCache) c.kv_key_type = c.kv_value_type = DType::Q4_0;
    if (data != nullptr) {
      c.data_parallel = 2;
      c.data_ranks = data;
      c.expert_parallel = GetParam() > 0;
    }
    return c;
  }
  static std::vector<std::shared_ptr<Collect>> submit(Engine& engine) {
    std::vector<std::shared_ptr<Collect>> outs;
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> prompt{1};
      for (int k = 1; k < 3 + 5 * i; ++k) prompt.push_back(3 + (k * 7 + i) % 21);
      Request r = seeded_request(std::move(prompt), 10 + i, 100 + static_cast<uint64_t>(i));
      r.logprobs = 0;
      outs.push_back(std::make_shared<Collect>());
      r.output = outs.back();
      engine.add_request(std::move(r));
    }
    Request beams;
    beams.prompt = {1, 5, 9, 13, 4};
    beams.max_tokens = 8;
    beams.beam_width = 3;
    beams.beam_results = 2;
    outs.push_back(std::make_shared<Collect>());
    beams.output = outs.back();
    engine.add_request(std::move(beams));
    Request choices = seeded_request({1, 7, 3, 3, 8, 12}, 9, 42);
    add_choice_outputs(choices, 3, outs);
    engine.add_request(std::move(choices));
    engine.run_until_idle();
    // The longest prompt again, once its blocks are cached: a prefix hit.
    std::vector<int32_t> prompt{1};
    for (int k = 1; k < 3 + 5 * 5; ++k) prompt.push_back(3 + (k * 7 + 5) % 21);
    Request again = seeded_request(std::move(prompt), 6, 7);
    outs.push_back(std::make_shared<Collect>());
    again.output = outs.back();
    engine.add_request(std::move(again));
    engine.run_until_idle();
    return outs;
  }
  std::unique_ptr<testing::TempModelFile> model_;
  gguf::GgufFile* file_ = nullptr;
};

TEST_P(EngineDataParallelTest, GivesOneProcesssTokens) {
  Engine one(*file_, config(nullptr));
  const auto expected = submit(one);
  Rank1 rank1;
  int64_t rank1_sent = 0;
  {
    Engine split(*file_, config(rank1.rank0()));
    const auto got = submit(split);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_FALSE(expected[i]->result_.output_tokens.empty() && expected[i]->result_.beams.empty()) << i;
      EXPECT_EQ(got[i]->tokens_, expected[i]->tokens_) << "output " << i;
      EXPECT_EQ(got[i]->logprobs_, expected[i]->logprobs_) << "output " << i;
      EXPECT_EQ(got[i]->result_.output_tokens, expected[i]->result_.output_tokens) << "output " << i;
    }
    ASSERT_EQ(got[6]->result_.beams.size(), 2u);
    for (size_t b = 0; b < 2; ++b) {
      EXPECT_EQ(got[6]->result_.beams[b].tokens, expected[6]->result_.beams[b].tokens) << "beam " << b;
      EXPECT_DOUBLE_EQ(got[6]->result_.beams[b].cum_logprob, expected[6]->result_.beams[b].cum_logprob);
    }
    EXPECT_GT(got.back()->result_.stats.cached_tokens, 0) << "the prompt sent again found no cached prefix";
    EXPECT_TRUE(split.idle());
    EXPECT_EQ(split.kv_cache().used_bytes(), 0) << "blocks left held";
    rank1_sent = rank1.rank1()->bytes_sent();
  }
  // Rank 1 sent rank 0 the final rows of sequences it ran (and, with experts, its tokens' records).
  EXPECT_GT(rank1_sent, 0) << "rank 1 ran no sequence";
}

// Two ranks that each computed the same first block: a sequence whose first 16 tokens A already
// has (block 0 indexed on A's rank) but with a prompt of exactly those 16 (too short to take a
// cached block: one token is always computed) computes its own copy on the next rank, and then
// its later blocks there, indexed under the same chained hashes. A third request over its whole
// text finds block 0 on A's rank and block 1 on the other: the prefix cache takes only the first
// (the rank of its first block must hold every block it reads), and the tokens are one process's.
TEST_P(EngineDataParallelTest, PrefixHitsTakeOnlyTheirRanksBlocks) {
  const auto submit = [](Engine& engine) {
    std::vector<int32_t> first{1};
    for (int k = 1; k < 16; ++k) first.push_back(3 + (k * 5) % 21);
    std::vector<std::shared_ptr<Collect>> outs;
    const auto run = [&](std::vector<int32_t> prompt, int64_t n, uint64_t seed) {
      Request r = seeded_request(std::move(prompt), n, seed);
      r.logprobs = 0;  // (each token to on_token)
      outs.push_back(std::make_shared<Collect>());
      r.output = outs.back();
      engine.add_request(std::move(r));
      engine.run_until_idle();
      return outs.back();
    };
    std::vector<int32_t> a = first;
    a.insert(a.end(), {4, 6, 8, 10});
    run(a, 4, 1);                                   // rank 0: block 0 indexed
    const auto b = run(first, 20, 2);               // 16 tokens: its own block 0, on rank 1
    std::vector<int32_t> c = first;
    c.insert(c.end(), b->tokens_.begin(), b->tokens_.end());
    c.push_back(7);
    run(c, 6, 3);                                   // block 0 (rank 0) and block 1 (rank 1) cached
    return outs;
  };
  Engine one(*file_, config(nullptr));
  const auto expected = submit(one);
  Rank1 rank1;
  Engine split(*file_, config(rank1.rank0()));
  const auto got = submit(split);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i]->tokens_, expected[i]->tokens_) << "request " << i;
  EXPECT_EQ(expected[2]->result_.stats.cached_tokens, 32) << "one process: both blocks cached";
  EXPECT_EQ(got[2]->result_.stats.cached_tokens, 16) << "the other rank's block taken";
}

INSTANTIATE_TEST_SUITE_P(DenseExpertsHybrid, EngineDataParallelTest,
                         ::testing::Values(0, 8, kHybrid, kQuantizedCache), [](const auto& info) {
                           return std::string(info.param > 0             ? "experts"
                                              : info.param == kHybrid    ? "hybrid"
                                              : info.param == kQuantizedCache ? "q4_0_cache"
                                                                         : "dense");
                         });

}  // namespace
}  // namespace inferd::engine
