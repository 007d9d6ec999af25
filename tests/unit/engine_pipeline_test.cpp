// Several steps in flight under pipeline parallelism (Engine::step_pipelined, vLLM's virtual
// engines), on the tiny random model split over 2 ranks that are threads of this process
// (dist::ThreadGroup; rank 1 in dist::run_worker as under mpirun): requests sampled with seeds
// give the tokens one process gives, while steps really overlap (a step launched before the one
// before it finished); a request cancelled while its step is in flight ends cancelled and the
// others are unchanged; one step at a time (steps_in_flight 1) overlaps none.
#include <cstdio>
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

namespace inferd::engine {
namespace {

using testing::Rank1;  // (thread_ranks.h)

class EnginePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyLlamaSpec spec;
    spec.n_layers = 4;
    spec.n_vocab = 24;
    spec.with_tokenizer = true;
    spec.seed = 11;
    model_ = std::make_unique<testing::TempModelFile>(testing::make_tiny_llama(spec),
                                                      "inferd-engine-pipeline");
    file_ = model_->file.get();
  }
  static EngineConfig config(dist::Communicator* pipeline, int steps_in_flight = 0) {
    EngineConfig c;
    c.threads = 1;
    c.pin_threads = false;
    c.context = 128;
    c.max_seqs = 8;
    c.max_batched_tokens = 64;
    if (pipeline != nullptr) {
      c.pipeline_parallel = 2;
      c.pipeline_ranks = pipeline;
      c.steps_in_flight = steps_in_flight;
    }
    return c;
  }
  // Six requests of different prompt lengths, each sampled with its own seed; the i-th is
  // cancelled after `cancel_after` polls when i == cancelled.
  static std::vector<std::shared_ptr<Collect>> run(Engine& engine, int cancelled = -1,
                                                   int cancel_after = -1) {
    std::vector<std::shared_ptr<Collect>> outs;
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> prompt{1};  // BOS, then a walk over the ordinary tokens
      for (int k = 1; k < 3 + 5 * i; ++k) prompt.push_back(3 + (k * 7 + i) % 21);
      Request r = seeded_request(std::move(prompt), 10 + i, 100 + static_cast<uint64_t>(i));
      r.logprobs = 0;  // (each token to on_token)
      auto out = std::make_shared<Collect>(i == cancelled ? cancel_after : -1);
      r.output = out;
      outs.push_back(out);
      engine.add_request(std::move(r));
    }
    engine.run_until_idle();
    return outs;
  }
  std::unique_ptr<testing::TempModelFile> model_;
  gguf::GgufFile* file_ = nullptr;
};

TEST_F(EnginePipelineTest, StepsInFlightGiveOneProcesssTokens) {
  Engine one(*file_, config(nullptr));
  const auto expected = run(one);
  Rank1 rank1;
  {
    Engine split(*file_, config(rank1.rank0()));
    const auto got = run(split);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(expected[i]->tokens_.size(), static_cast<size_t>(10 + i));
      EXPECT_EQ(got[i]->tokens_, expected[i]->tokens_) << "request " << i;
      EXPECT_EQ(got[i]->result_.finish_reason, FinishReason::kLength) << "request " << i;
    }
    // Six sequences in two steps of three that follow each other through the ranks.
    EXPECT_GT(split.overlapped_steps(), 10) << "steps did not overlap";
    // And the engine goes on after the pipeline drained.
    const auto again = run(split);
    for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i]->tokens_, expected[i]->tokens_);
  }
  {
    Engine serial(*file_, config(rank1.rank0(), 1));
    const auto got = run(serial);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i]->tokens_, expected[i]->tokens_);
    EXPECT_EQ(serial.overlapped_steps(), 0);
  }
}

TEST_F(EnginePipelineTest, CancelledWhileInFlightLeavesTheOthers) {
  Engine one(*file_, config(nullptr));
  const auto expected = run(one);
  Rank1 rank1;
  Engine split(*file_, config(rank1.rank0()));
  const auto got = run(split, /*cancelled=*/2, /*cancel_after=*/5);
  EXPECT_EQ(got[2]->result_.finish_reason, FinishReason::kCancelled);
  ASSERT_LT(got[2]->tokens_.size(), expected[2]->tokens_.size());
  EXPECT_TRUE(std::equal(got[2]->tokens_.begin(), got[2]->tokens_.end(), expected[2]->tokens_.begin()));
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == 2) continue;
    EXPECT_EQ(got[i]->tokens_, expected[i]->tokens_) << "request " << i;
  }
  EXPECT_TRUE(split.idle());
  EXPECT_EQ(split.kv_cache().used_bytes(), 0) << "blocks left held";
}

// Sequences that fork run in steps in flight as in one step at a time: a beam search of width
// 3 (whose beams the steps' shares may part, each beam reporting in its own step) and 3 sampled
// choices of one prompt, beside two plain requests, all at once.
TEST_F(EnginePipelineTest, BeamsAndChoicesInStepsInFlight) {
  const auto submit = [](Engine& engine) {
    std::vector<std::shared_ptr<Collect>> outs;
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
    for (int i = 0; i < 2; ++i) {
      Request r = seeded_request({1, 20, 6, static_cast<int32_t>(10 + i)}, 7 + i, 7 + static_cast<uint64_t>(i));
      outs.push_back(std::make_shared<Collect>());
      r.output = outs.back();
      engine.add_request(std::move(r));
    }
    engine.run_until_idle();
    return outs;
  };
  Engine one(*file_, config(nullptr));
  const auto expected = submit(one);
  Rank1 rank1;
  Engine split(*file_, config(rank1.rank0()));
  const auto got = submit(split);
  ASSERT_EQ(got[0]->result_.beams.size(), 2u);
  ASSERT_EQ(expected[0]->result_.beams.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(got[0]->result_.beams[b].tokens, expected[0]->result_.beams[b].tokens) << "beam " << b;
    EXPECT_DOUBLE_EQ(got[0]->result_.beams[b].cum_logprob, expected[0]->result_.beams[b].cum_logprob);
  }
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_FALSE(expected[i]->result_.output_tokens.empty()) << "output " << i;
    EXPECT_EQ(got[i]->result_.output_tokens, expected[i]->result_.output_tokens) << "output " << i;
  }
  EXPECT_NE(expected[1]->result_.output_tokens, expected[2]->result_.output_tokens);  // (seeds)
  EXPECT_GT(split.overlapped_steps(), 0);
}

}  // namespace
}  // namespace inferd::engine
