// Prompt logprobs (Request::prompt_logprobs, vLLM's prompt_logprobs, OpenAI's echo with
// logprobs): each prompt token's log-probability, rank and the most likely tokens at its place.
// The reference is the engine's own generation logprobs: the distribution a request with the
// prompt's first k tokens reports for its first output token is the one prompt token k is
// scored under.
#include <cmath>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tiny_engine.h"
#include "tiny_model.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

constexpr int kTop = 20;  // the most alternatives a request may ask for

// Collect, keeping the first output token's alternatives whole.
class CollectTop final : public OutputChannel {
 public:
  void on_text(std::string_view) override {}
  void on_token(int32_t, float, std::span<const sampling::TokenLogprob> top) override {
    if (first_.empty())
      for (const sampling::TokenLogprob& t : top) first_[t.token] = t.logprob;
  }
  void on_finish(const RequestResult& result) override { result_ = result; }
  std::map<int32_t, float> first_;
  RequestResult result_;
};

class PromptLogprobsTest : public TinyEngineFixture {
 protected:
  // BOS, then a walk over the vocabulary's ordinary tokens (3..23) from `offset`.
  static std::vector<int32_t> walk(int n, int offset) {
    std::vector<int32_t> out{1};
    for (int i = 1; i < n; ++i) out.push_back(3 + (i * 5 + offset * 3 + i * i % 7) % 21);
    return out;
  }
  // The model's distribution after `prefix`: its kTop most likely tokens, from a greedy request
  // that reports its first token's alternatives.
  static std::map<int32_t, float> next_distribution(Engine& engine, std::vector<int32_t> prefix) {
    auto out = std::make_shared<CollectTop>();
    Request r = greedy_request(std::move(prefix), nullptr, 1);
    r.output = out;
    r.logprobs = kTop;
    engine.add_request(std::move(r));
    engine.run_until_idle();
    EXPECT_EQ(out->first_.size(), static_cast<size_t>(kTop));
    return out->first_;
  }
  // A request with prompt logprobs (k alternatives) that generates `max_tokens` greedily.
  RequestResult score(Engine& engine, const std::vector<int32_t>& prompt, int k,
                      int64_t max_tokens = 1) {
    auto out = std::make_shared<Collect>();
    Request r = greedy_request(prompt, out, max_tokens);
    r.prompt_logprobs = k;
    engine.add_request(std::move(r));
    engine.run_until_idle();
    EXPECT_EQ(out->result_.finish_reason, FinishReason::kLength) << out->result_.error;
    return out->result_;
  }
  // Each prompt token's entry against the distribution of the prefix before it.
  void expect_matches_generation(Engine& engine, const std::vector<int32_t>& prompt,
                                 const RequestResult& result, int k) {
    ASSERT_EQ(result.prompt_logprobs.size(), prompt.size());
    EXPECT_EQ(result.prompt_logprobs[0].token, prompt[0]);
    EXPECT_TRUE(std::isnan(result.prompt_logprobs[0].logprob));
    EXPECT_TRUE(result.prompt_logprobs[0].top.empty());
    for (size_t p = 1; p < prompt.size(); ++p) {
      SCOPED_TRACE(::testing::Message() << "prompt token " << p);
      const PromptTokenLogprob& entry = result.prompt_logprobs[p];
      EXPECT_EQ(entry.token, prompt[p]);
      const std::map<int32_t, float> reference = next_distribution(
          engine, std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<long>(p)));
      ASSERT_EQ(entry.top.size(), static_cast<size_t>(k));
      for (const sampling::TokenLogprob& alt : entry.top) {
        ASSERT_TRUE(reference.count(alt.token)) << "token " << alt.token;
        EXPECT_NEAR(alt.logprob, reference.at(alt.token), 1e-4f);
      }
      for (size_t j = 1; j < entry.top.size(); ++j)
        EXPECT_GE(entry.top[j - 1].logprob, entry.top[j].logprob);
      // Rank: 1 + the tokens the reference finds more likely (clear margins only).
      int above = 0;
      for (const auto& [token, logprob] : reference) above += logprob > entry.logprob ? 1 : 0;
      if (reference.count(entry.token)) {
        EXPECT_NEAR(entry.logprob, reference.at(entry.token), 1e-4f);
        EXPECT_EQ(entry.rank, above + 1);
      } else {
        EXPECT_GT(entry.rank, kTop);
      }
      if (k > 0 && entry.rank == 1) {
        EXPECT_EQ(entry.top[0].token, entry.token);
      }
    }
  }
};

TEST_F(PromptLogprobsTest, EachPromptTokenIsScoredUnderTheDistributionBeforeIt) {
  auto e = engine(4);
  const std::vector<int32_t> p = prompt(23);
  for (const int k : {0, 3, kTop}) {
    SCOPED_TRACE(::testing::Message() << "k = " << k);
    const RequestResult result = score(*e, p, k);
    expect_matches_generation(*e, p, result, k);
    EXPECT_EQ(result.stats.cached_tokens, 0);
    EXPECT_EQ(result.output_tokens.size(), 1u);
  }
}

// A prompt longer than the rows a step has for them (64) is scored over several steps, and one
// of them runs beside another request's prompt and decode; with prefix caching on, the second
// time the same prompt is computed again (its cached blocks hold no logits).
TEST_F(PromptLogprobsTest, LongPromptsTakeSeveralStepsAndNeverTheCache) {
  auto e = engine(4);
  const std::vector<int32_t> p = walk(150, 3);
  auto other = std::make_shared<Collect>();
  e->add_request(greedy_request(walk(90, 8), other, 30));
  const RequestResult first = score(*e, p, 2, 4);
  EXPECT_EQ(other->result_.finish_reason, FinishReason::kLength);
  expect_matches_generation(*e, p, first, 2);
  const RequestResult again = score(*e, p, 2, 4);
  EXPECT_EQ(again.stats.cached_tokens, 0);
  ASSERT_EQ(again.prompt_logprobs.size(), first.prompt_logprobs.size());
  for (size_t i = 1; i < p.size(); ++i) {
    EXPECT_EQ(again.prompt_logprobs[i].logprob, first.prompt_logprobs[i].logprob) << i;
    EXPECT_EQ(again.prompt_logprobs[i].rank, first.prompt_logprobs[i].rank) << i;
  }
  EXPECT_EQ(again.output_tokens, first.output_tokens);
  // Without prompt logprobs the same prompt finds its blocks.
  auto plain = std::make_shared<Collect>();
  e->add_request(greedy_request(p, plain, 4));
  e->run_until_idle();
  EXPECT_GT(plain->result_.stats.cached_tokens, 0);
  EXPECT_EQ(plain->result_.output_tokens, first.output_tokens);
  EXPECT_TRUE(plain->result_.prompt_logprobs.empty());
}

// Several requests with prompt logprobs at once share the step's rows; each gets its own.
TEST_F(PromptLogprobsTest, ConcurrentRequestsShareTheRows) {
  auto e = engine(4);
  std::vector<std::vector<int32_t>> prompts = {walk(70, 1), walk(41, 2), walk(100, 4)};
  std::vector<std::shared_ptr<Collect>> outs;
  for (const auto& p : prompts) {
    outs.push_back(std::make_shared<Collect>());
    Request r = greedy_request(p, outs.back(), 3);
    r.prompt_logprobs = 1;
    e->add_request(std::move(r));
  }
  e->run_until_idle();
  auto alone = engine(4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    const RequestResult reference = score(*alone, prompts[i], 1, 3);
    const RequestResult& got = outs[i]->result_;
    ASSERT_EQ(got.prompt_logprobs.size(), prompts[i].size());
    for (size_t j = 1; j < prompts[i].size(); ++j) {
      EXPECT_NEAR(got.prompt_logprobs[j].logprob, reference.prompt_logprobs[j].logprob, 1e-4f);
      ASSERT_EQ(got.prompt_logprobs[j].top.size(), 1u);
      EXPECT_EQ(got.prompt_logprobs[j].top[0].token, reference.prompt_logprobs[j].top[0].token);
    }
    EXPECT_EQ(got.output_tokens, reference.output_tokens);
  }
}

// n > 1 choices: the first choice's result holds the prompt's logprobs.
TEST_F(PromptLogprobsTest, FirstChoiceHoldsThemWithSeveralChoices) {
  auto e = engine(4);
  const std::vector<int32_t> p = prompt(30);
  Request r = seeded_request(p, 5, 7);
  r.prompt_logprobs = 0;
  std::vector<std::shared_ptr<Collect>> outs;
  add_choice_outputs(r, 3, outs);
  e->add_request(std::move(r));
  e->run_until_idle();
  const RequestResult reference = score(*e, p, 0);
  ASSERT_EQ(outs[0]->result_.prompt_logprobs.size(), p.size());
  for (size_t j = 1; j < p.size(); ++j)
    EXPECT_NEAR(outs[0]->result_.prompt_logprobs[j].logprob, reference.prompt_logprobs[j].logprob,
                1e-4f);
  for (size_t i = 1; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i]->result_.finish_reason, FinishReason::kLength);
    EXPECT_EQ(outs[i]->result_.output_tokens.size(), 5u);
    EXPECT_TRUE(outs[i]->result_.prompt_logprobs.empty());  // (not entries left unfilled)
  }
}

TEST_F(PromptLogprobsTest, OutOfRangeAndBeamRequestsAreRefused) {
  auto e = engine(4);
  Request r = greedy_request(prompt(8), std::make_shared<Collect>(), 2);
  r.prompt_logprobs = kTop + 1;
  EXPECT_THROW(e->add_request(r), Error);
  r.prompt_logprobs = -2;
  EXPECT_THROW(e->add_request(r), Error);
  r.prompt_logprobs = 1;
  r.beam_width = 2;
  EXPECT_THROW(e->add_request(r), Error);
  r.beam_width = 0;
  r.embed = Pooling::kMean;
  EXPECT_THROW(e->add_request(r), Error);
  EXPECT_TRUE(e->idle());
}

}  // namespace
}  // namespace inferd::engine
