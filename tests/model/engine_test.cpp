// The engine with the real model: greedy runs are deterministic and batch-independent,
// seeded sampling reproduces, stop strings never reach the output, limits give clear errors.
#include <gtest/gtest.h>

#include "model_fixture.h"
#include "util/error.h"

namespace inferd::testing {
namespace {

class EngineTest : public ModelTest {
 protected:
  engine::Engine make_engine(int max_seqs = 4, int64_t context = 1024, DType kv_type = DType::F16,
                             int64_t max_batched_tokens = 256) {
    engine::EngineConfig config;
    config.threads = 2;
    config.context = context;
    config.max_seqs = max_seqs;
    config.max_batched_tokens = max_batched_tokens;
    config.kv_key_type = kv_type;
    config.kv_value_type = kv_type;
    return engine::Engine(*file_, config);
  }

  std::shared_ptr<CollectOutput> submit(engine::Engine& e, const std::string& prompt,
                                        int64_t max_tokens, sampling::SamplingParams params,
                                        std::vector<std::string> stop = {}) {
    engine::Request r;
    r.prompt = e.tokenizer().encode(prompt, true, true);
    r.sampling = params;
    r.max_tokens = max_tokens;
    r.stop = std::move(stop);
    return submit_request(e, std::move(r));
  }

  // Runs each prompt alone (24 greedy tokens), then all of them together: every output must be
  // the same both times, and no KV block may stay in use.
  void expect_batched_equals_alone(engine::Engine& e, const std::vector<std::string>& prompts) {
    std::vector<std::string> alone;
    for (const auto& p : prompts) {
      auto out = submit(e, p, 24, greedy());
      e.run_until_idle();
      alone.push_back(out->text_);
    }
    std::vector<std::shared_ptr<CollectOutput>> together;
    for (const auto& p : prompts) together.push_back(submit(e, p, 24, greedy()));
    e.run_until_idle();
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(together[i]->text_, alone[i]) << prompts[i];
    EXPECT_EQ(e.kv_cache().used_blocks(), 0);
  }

  static sampling::SamplingParams greedy() {
    sampling::SamplingParams p;
    p.temperature = 0;
    return p;
  }
};

TEST_F(EngineTest, GreedyIsCoherentAndRepeatable) {
  auto e = make_engine();
  auto a = submit(e, "The capital of France is", 12, greedy());
  e.run_until_idle();
  auto b = submit(e, "The capital of France is", 12, greedy());
  e.run_until_idle();
  EXPECT_NE(a->text_.find("Paris"), std::string::npos) << a->text_;
  EXPECT_EQ(a->text_, b->text_);
  EXPECT_EQ(a->result_.output_tokens, b->result_.output_tokens);
  EXPECT_EQ(a->finishes_, 1);
  EXPECT_EQ(a->result_.stats.completion_tokens, 12);
  EXPECT_EQ(engine::finish_reason_name(a->result_.finish_reason), "length");
}

TEST_F(EngineTest, ConcurrentGreedyEqualsAlone) {
  auto e = make_engine(4);
  const std::vector<std::string> prompts = {
      "Once upon a time", "def fibonacci(n):", "The three primary colors are", "In 1492,"};
  expect_batched_equals_alone(e, prompts);
}

// With a Q8_0 or Q4_0 KV cache the engine still answers the factual prompt, and a request's
// greedy output does not depend on what it is batched with (each token's K/V is quantized on its
// own, and a row's attention sums do not depend on the rows beside it).
TEST_F(EngineTest, QuantizedCacheGreedyIsCoherentAndEqualsAlone) {
  for (const DType type : {DType::Q8_0, DType::Q4_0}) {
    SCOPED_TRACE(dtype_name(type));
    auto e = make_engine(4, 1024, type);
    auto fact = submit(e, "The capital of France is", 12, greedy());
    e.run_until_idle();
    EXPECT_NE(fact->text_.find("Paris"), std::string::npos) << fact->text_;
    const std::vector<std::string> prompts = {"Once upon a time",
                                              "def fibonacci(n):", "The three primary colors are"};
    expect_batched_equals_alone(e, prompts);
  }
}

// With a Q4_0 cache and its exact copies (kv/kv_cache.h), a request's greedy output does not
// depend on how its prompt is cut into steps (steps of 256 tokens against 7, so that prompt
// blocks are staged across steps and the copies come from the ring), nor on the requests beside
// it; and 3 greedy choices of one prompt (forks: each child copies its parent's copies) agree.
TEST_F(EngineTest, QuantizedCacheWithExactCopiesIsFreeOfPromptSteps) {
  const std::string prompt =
      "In the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon";
  auto whole = make_engine(4, 1024, DType::Q4_0, 256);
  auto stepped = make_engine(4, 1024, DType::Q4_0, 7);
  ASSERT_TRUE(whole.kv_cache().has_exact_copies());
  auto a = submit(whole, prompt, 24, greedy());
  whole.run_until_idle();
  auto b = submit(stepped, prompt, 24, greedy());
  auto beside = submit(stepped, "def fibonacci(n):", 24, greedy());
  stepped.run_until_idle();
  EXPECT_EQ(b->result_.output_tokens, a->result_.output_tokens);
  engine::Request r;
  r.prompt = stepped.tokenizer().encode(prompt + " the", true, true);
  r.sampling = greedy();
  r.max_tokens = 24;
  std::vector<std::shared_ptr<CollectOutput>> choices;
  for (int i = 0; i < 3; ++i) {
    choices.push_back(std::make_shared<CollectOutput>());
    if (i == 0) {
      r.output = choices.back();
    } else {
      r.more_outputs.push_back(choices.back());
    }
  }
  stepped.add_request(std::move(r));
  stepped.run_until_idle();
  for (const auto& choice : choices) {
    EXPECT_EQ(choice->finishes_, 1);
    EXPECT_EQ(choice->result_.output_tokens, choices[0]->result_.output_tokens);
  }
  EXPECT_FALSE(choices[0]->result_.output_tokens.empty());
  EXPECT_EQ(stepped.kv_cache().used_blocks(), 0);
}

TEST_F(EngineTest, SeededSamplingReproduces) {
  auto e = make_engine();
  sampling::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto a = submit(e, "Write a story about a dragon.", 40, p);
  auto b = submit(e, "Write a story about a dragon.", 40, p);
  p.seed = 43;
  auto c = submit(e, "Write a story about a dragon.", 40, p);
  e.run_until_idle();
  EXPECT_EQ(a->result_.output_tokens, b->result_.output_tokens);
  EXPECT_NE(a->result_.output_tokens, c->result_.output_tokens);
}

TEST_F(EngineTest, StopStringsNeverAppear) {
  auto e = make_engine();
  // Greedy output of this prompt contains "Paris"; stop on it and on a multi-token string.
  auto free_run = submit(e, "The capital of France is", 30, greedy());
  e.run_until_idle();
  ASSERT_NE(free_run->text_.find("Paris"), std::string::npos);
  for (std::string stop : {"Paris", "aris.", " P", "\n\n"}) {
    auto out = submit(e, "The capital of France is", 30, greedy(), {stop, "zzzz"});
    e.run_until_idle();
    const size_t where = free_run->text_.find(stop);
    if (where == std::string::npos) continue;
    EXPECT_EQ(out->text_, free_run->text_.substr(0, where)) << "stop " << stop;
    EXPECT_EQ(out->text_.find(stop), std::string::npos);
    EXPECT_EQ(engine::finish_reason_name(out->result_.finish_reason), "stop");
  }
}

TEST_F(EngineTest, TooLongPromptIsAClearError) {
  auto e = make_engine(1, 64);
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "word ";
  try {
    submit(e, prompt, 16, greedy());
    FAIL() << "a prompt longer than the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the context of 64"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(e.idle());
  auto ok = submit(e, "Hello", 8, greedy());  // the engine is still usable
  e.run_until_idle();
  EXPECT_EQ(ok->finishes_, 1);
}

TEST_F(EngineTest, CancelFreesBlocks) {
  auto e = make_engine();
  auto out = submit(e, "Tell me about the ocean.", 200, greedy());
  for (int i = 0; i < 5; ++i) e.step();
  EXPECT_GT(e.kv_cache().used_blocks(), 0);
  out->cancel_ = true;
  e.step();
  EXPECT_EQ(e.kv_cache().used_blocks(), 0);
  EXPECT_EQ(engine::finish_reason_name(out->result_.finish_reason), "cancelled");
  EXPECT_TRUE(e.idle());
}

TEST_F(EngineTest, PreemptionKeepsGreedyOutputs) {
  // A cache too small for four 100-token sequences at once forces preemption and recompute.
  engine::EngineConfig config;
  config.threads = 2;
  config.context = 128;
  config.max_seqs = 4;
  config.kv_blocks = 12;  // 192 slots for up to 4 x 128
  engine::Engine small(*file_, config);
  auto big = make_engine(1, 128);
  const std::vector<std::string> prompts = {"The sun", "Rivers flow", "Mountains are",
                                            "Cities grow"};
  std::vector<std::string> alone;
  for (const auto& p : prompts) {
    auto out = submit(big, p, 60, greedy());
    big.run_until_idle();
    alone.push_back(out->text_);
  }
  std::vector<std::shared_ptr<CollectOutput>> outs;
  for (const auto& p : prompts) outs.push_back(submit(small, p, 60, greedy()));
  small.run_until_idle();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outs[i]->text_, alone[i]) << prompts[i];
  EXPECT_EQ(small.kv_cache().used_blocks(), 0);
}

}  // namespace
}  // namespace inferd::testing
