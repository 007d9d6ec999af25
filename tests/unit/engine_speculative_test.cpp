// Speculative decoding through the engine, on the tiny random model: with n-gram drafts the
// output is the same as without, token for token, greedy and seeded sampling alike, alone and
// batched, through preemption, with logprobs; drafts are really taken (the model loops, so
// prompt lookup finds them); rejected drafts leave the prefix cache and the pool consistent.
// Prompt lookup itself on hand-made sequences.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/draft_model.h"
#include "engine/speculative.h"
#include "gguf/gguf.h"
#include "tiny_engine.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace inferd::engine {
namespace {

std::vector<int32_t> ngram(std::vector<int32_t> tokens, int min_n, int max_n, size_t k,
                           int64_t resume = -1) {
  std::vector<int32_t> out(k);
  out.resize(propose_ngram(tokens, min_n, max_n, out, resume).count);
  return out;
}

TEST(NgramLookup, TakesWhatFollowedTheMostRecentLongestMatch) {
  // Suffix "1 2 3": matched at the start (followed by 7 8) and, longer, "9 1 2 3" later.
  EXPECT_EQ(ngram({9, 1, 2, 3, 7, 8, 5, 9, 1, 2, 3, 4, 4, 0, 9, 1, 2, 3}, 1, 4, 3),
            (std::vector<int32_t>{4, 4, 0}));
  // Two matches of the same length: the most recent wins.
  EXPECT_EQ(ngram({1, 2, 5, 1, 2, 6, 1, 2}, 2, 2, 1), (std::vector<int32_t>{6}));
  // Shorter than prompt_lookup_min: nothing.
  EXPECT_TRUE(ngram({1, 2, 3, 4, 3}, 2, 4, 3).empty());
  EXPECT_EQ(ngram({1, 2, 3, 4, 3}, 1, 4, 3), (std::vector<int32_t>{4, 3, 4}));
  // What follows may run into the end: a repeating pattern continues with its period.
  EXPECT_EQ(ngram({5, 6, 5, 6}, 2, 3, 4), (std::vector<int32_t>{5, 6, 5, 6}));
  EXPECT_EQ(ngram({7, 7, 7}, 1, 2, 3), (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(ngram({1, 2, 3, 9, 1, 2, 3}, 2, 3, 5), (std::vector<int32_t>{9, 1, 2, 3, 9}));
  // At most k, and nothing from a sequence too short or with no repeat.
  EXPECT_EQ(ngram({1, 2, 3, 4, 5, 1, 2}, 1, 3, 2), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(ngram({1}, 1, 3, 2).empty());
  EXPECT_TRUE(ngram({1, 2, 3, 4}, 1, 3, 2).empty());
  EXPECT_TRUE(ngram({1, 2, 1, 2}, 1, 3, 0).empty());
}

TEST(NgramLookup, GoesOnNearWhereTheTextWasCopyingFrom) {
  // A passage 10 11 12 13 14 15 16 17, quoted with 12 replaced by 99: after "10 11 99 13" the
  // suffix "13" is one token long; near the copy position (index 2, where 12 was) it continues
  // with 14 15 16.
  const std::vector<int32_t> text{10, 11, 12, 13, 14, 15, 16, 17, 5, 10, 11, 99, 13};
  EXPECT_EQ(ngram(text, 1, 4, 3, 2), (std::vector<int32_t>{14, 15, 16}));
  std::vector<int32_t> out(3);
  const NgramProposal near = propose_ngram(text, 1, 4, out, 2);
  EXPECT_TRUE(near.near);
  EXPECT_EQ(near.source, 4);
  EXPECT_EQ(near.match, 1);
  // Without a copy position, a 1-token match is below prompt_lookup_min 2: nothing.
  EXPECT_TRUE(ngram(text, 2, 4, 3).empty());
  // ... but near the copy position a single token is enough.
  EXPECT_EQ(ngram(text, 2, 4, 3, 2), (std::vector<int32_t>{14, 15, 16}));
  // Too far from the copy position: the ordinary lookup (none here).
  EXPECT_TRUE(ngram(text, 2, 4, 3, 2 + kNgramNearWindow + 2).empty());
  // A longer match elsewhere wins over a shorter one near: "1 2 3" earlier, "3" near.
  const std::vector<int32_t> two{1, 2, 3, 7, 8, 9, 3, 4, 6, 1, 2, 3};
  const NgramProposal far = propose_ngram(two, 1, 4, out, 6);
  EXPECT_FALSE(far.near);
  EXPECT_EQ(far.source, 3);
  EXPECT_EQ(far.match, 3);
  // Two near matches of one length: the nearer one.
  const std::vector<int32_t> twice{3, 4, 5, 3, 6, 7, 3, 8, 9, 0, 3};
  EXPECT_EQ(propose_ngram(twice, 1, 4, out, 5).source, 4);
  EXPECT_EQ(propose_ngram(twice, 1, 4, out, 1).source, 1);
}

TEST(NgramLookup, CopyPositionFollowsTheCheckedProposal) {
  // The proposal continued from index 4; two drafts kept, then the model's own token.
  NgramProposal p{3, 4, 2, false};
  // The model went on with the source (tokens[6] == 16): copying goes on after it.
  EXPECT_EQ(
      next_copy_position(std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 9, 14, 15, 16}, p, 2), 7);
  // It chose another token: the text diverged at index 6.
  EXPECT_EQ(
      next_copy_position(std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 9, 14, 15, 42}, p, 2), 6);
  // No proposal: nowhere.
  EXPECT_EQ(next_copy_position(std::vector<int32_t>{1, 2, 3}, NgramProposal{}, 0), -1);
  // Kinds: near or not, by match length, the longest together.
  EXPECT_EQ(ngram_kind({1, 0, 1, false}), 0);
  EXPECT_EQ(ngram_kind({1, 0, 5, false}), kNgramMatchKinds - 1);
  EXPECT_EQ(ngram_kind({1, 0, 40, true}), kNgramKinds - 1);
  EXPECT_EQ(ngram_kind({1, 0, 2, true}), kNgramMatchKinds + 1);
}

TEST(SpeculativeConfig, BadSettingsAreErrors) {
  SpeculativeConfig c;
  c.num_tokens = 17;
  EXPECT_THROW(c.validate(), Error);
  c = {};
  c.prompt_lookup_min = 4;
  c.prompt_lookup_max = 3;
  EXPECT_THROW(c.validate(), Error);
  EXPECT_EQ(parse_spec_method("ngram"), SpecMethod::kNgram);
  EXPECT_EQ(parse_spec_method("eagle3"), SpecMethod::kEagle3);
  EXPECT_THROW(parse_spec_method("eagle"), Error);
  c = {};
  c.method = SpecMethod::kEagle3;  // the head's file is missing
  EXPECT_THROW(c.validate(), Error);
}

TEST(SpeculativeConfig, VllmJsonForm) {
  SpeculativeConfig c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 4,
          "prompt_lookup_min": 3})",
      {});
  EXPECT_EQ(c.method, SpecMethod::kNgram);
  EXPECT_EQ(c.num_tokens, 6);
  EXPECT_EQ(c.prompt_lookup_min, 3);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  c = parse_speculative_config(R"({"model": "draft.gguf", "num_speculative_tokens": 3})", {});
  EXPECT_EQ(c.method, SpecMethod::kDraftModel);
  EXPECT_EQ(c.draft_model, "draft.gguf");
  // Only max given: min follows it down (as vLLM), the other settings are kept.
  c = parse_speculative_config(R"({"method": "eagle3", "model": "head.gguf"})", {});
  EXPECT_EQ(c.method, SpecMethod::kEagle3);
  EXPECT_EQ(c.draft_model, "head.gguf");
  c = parse_speculative_config(R"({"method": "ngram", "prompt_lookup_max": 1})", {});
  EXPECT_EQ(c.prompt_lookup_min, 1);
  for (const char* bad : {R"({"method": "eagle"})", R"({"num_speculative_tokens": "4"})",
                          R"({"acceptance_method": "typical"})", R"([1, 2])", "{oops",
                          R"({"method": "draft_model"})", R"({"method": "eagle3"})",
                          R"({"num_speculative_tokens": 99})"}) {
    EXPECT_THROW(parse_speculative_config(bad, {}), Error) << bad;
  }
}

class SpeculativeEngineTest : public TinyEngineFixture {
 protected:
  static EngineConfig spec_config(int max_seqs, int k, bool prefix_cache = true) {
    EngineConfig c = config(max_seqs, prefix_cache);
    if (k > 0) {
      c.spec.method = SpecMethod::kNgram;
      c.spec.num_tokens = k;
      c.spec.prompt_lookup_min = 1;
      c.spec.max_step_rows = 0;  // drafts in every step, however many sequences run
      c.spec.row_cost = 0;       // as many as k every step, whatever the acceptance
      c.spec.measure_row_cost = false;
    }
    return c;
  }
  // Prompts of many lengths and contents (some end inside a block, some on its boundary).
  static std::vector<std::vector<int32_t>> prompts(int count) {
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < count; ++i) {
      std::vector<int32_t> p{1};
      const int len = 3 + (i * 13) % 40;
      for (int j = 1; j < len; ++j) p.push_back(3 + (j * (i + 2) + i) % 21);
      out.push_back(std::move(p));
    }
    return out;
  }
  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> logprobs;
    std::vector<std::string> texts;
    SpecDecodeStats stats;
  };
  // All prompts submitted at once; their results in order.
  Run run(const EngineConfig& c, const std::vector<std::vector<int32_t>>& ps, float temperature,
          int64_t max_tokens = 40, bool logprobs = false) {
    auto e = engine(c);
    std::vector<std::shared_ptr<Collect>> outs;
    for (size_t i = 0; i < ps.size(); ++i) {
      outs.push_back(std::make_shared<Collect>());
      Request r;
      r.prompt = ps[i];
      r.max_tokens = max_tokens;
      r.sampling.temperature = temperature;
      r.sampling.seed = 1000 + i;
      r.logprobs = logprobs ? 2 : -1;
      r.output = outs.back();
      e->add_request(std::move(r));
    }
    e->run_until_idle();
    EXPECT_EQ(e->kv_cache().used_blocks(), 0);
    Run result;
    for (const auto& o : outs) {
      EXPECT_NE(o->result_.finish_reason, FinishReason::kError) << o->result_.error;
      result.tokens.push_back(o->result_.output_tokens);
      result.logprobs.push_back(o->logprobs_);
      result.texts.push_back(o->text_);
    }
    result.stats = e->spec_decode_stats();
    return result;
  }
};

TEST_F(SpeculativeEngineTest, GreedyOutputIsTheSameAsWithoutDrafts) {
  const auto ps = prompts(30);
  for (const int max_seqs : {1, 6}) {
    const Run off = run(spec_config(max_seqs, 0), ps, 0.0f);
    for (const int k : {1, 4, 8}) {
      const Run on = run(spec_config(max_seqs, k), ps, 0.0f);
      EXPECT_EQ(on.tokens, off.tokens) << "max_seqs " << max_seqs << ", k " << k;
      EXPECT_EQ(on.texts, off.texts);
      // The tiny model loops, so drafts are found and many are right.
      EXPECT_GT(on.stats.num_drafts, 100);
      EXPECT_GT(on.stats.num_accepted_tokens, 200);
      EXPECT_EQ(off.stats.num_drafts, 0);
    }
  }
}

TEST_F(SpeculativeEngineTest, SeededSamplingIsTheSameAsWithoutDrafts) {
  // One-hot drafts need no correction: each row is sampled with the request's own sampler,
  // drawing the same random numbers as one token per step would (engine/speculative.h).
  const auto ps = prompts(12);
  const Run off = run(spec_config(4, 0), ps, 0.8f, 40, true);
  const Run on = run(spec_config(4, 4), ps, 0.8f, 40, true);
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_EQ(on.logprobs, off.logprobs);  // bit for bit: the same rows, whatever the batch
  EXPECT_GT(on.stats.num_accepted_tokens, 10);
}

TEST_F(SpeculativeEngineTest, PreemptionDropsDraftsAndRecomputesTheSameOutput) {
  const auto ps = prompts(8);
  const Run off = run(spec_config(8, 0), ps, 0.0f, 60);
  EngineConfig tight = spec_config(8, 6);
  tight.kv_blocks = 20;  // 8 sequences of up to ~100 tokens need more: some are preempted
  const Run on = run(tight, ps, 0.0f, 60);
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_GT(on.stats.num_accepted_tokens, 0);
}

TEST_F(SpeculativeEngineTest, RejectedDraftsLeaveThePrefixCacheConsistent) {
  // The same engine serves the prompts again, each extended by part of its first output: the
  // prefix cache now holds blocks that verified steps wrote (rejected drafts overwritten). A
  // fresh engine without the cache must give the same tokens.
  const auto ps = prompts(10);
  auto e = engine(spec_config(3, 5));
  auto again = ps;
  for (size_t i = 0; i < ps.size(); ++i) {
    auto out = std::make_shared<Collect>();
    Request r;
    r.prompt = ps[i];
    r.max_tokens = 50;
    r.sampling.temperature = 0.0f;
    r.output = out;
    e->add_request(std::move(r));
    e->run_until_idle();
    const auto& t = out->result_.output_tokens;
    again[i].insert(again[i].end(), t.begin(), t.begin() + static_cast<int64_t>(t.size() * 3 / 4));
  }
  std::vector<std::vector<int32_t>> cached, fresh;
  int64_t hits = 0;
  for (const auto& p : again) {
    auto out = std::make_shared<Collect>();
    Request r;
    r.prompt = p;
    r.max_tokens = 20;
    r.sampling.temperature = 0.0f;
    r.output = out;
    e->add_request(std::move(r));
    e->run_until_idle();
    cached.push_back(out->result_.output_tokens);
    hits += out->result_.stats.cached_tokens;
  }
  EXPECT_GT(hits, 200);  // generated blocks were found again
  fresh = run(spec_config(3, 0, false), again, 0.0f, 20).tokens;
  EXPECT_EQ(cached, fresh);
  EXPECT_EQ(e->kv_cache().used_blocks(), 0);
}

TEST_F(SpeculativeEngineTest, DraftsOnlyWhereTheyPay) {
  // A draft row as dear as 5 decode steps never pays: proposals are only checked against the
  // next token. The same text either way.
  const auto ps = prompts(6);
  EngineConfig dear = spec_config(2, 4);
  dear.spec.row_cost = 5;
  const Run none = run(dear, ps, 0.0f);
  EXPECT_EQ(none.stats.num_drafts, 0);
  EngineConfig cheap = spec_config(2, 4);
  cheap.spec.row_cost = 0.05f;
  const Run some = run(cheap, ps, 0.0f);
  EXPECT_GT(some.stats.num_drafts, 20);
  EXPECT_EQ(some.tokens, none.tokens);
}

// A tiny model of the same vocabulary written to a file, as a draft model.
std::string write_draft_model(uint32_t seed, int n_vocab = 24) {
  testing::TinyLlamaSpec spec;
  spec.n_vocab = n_vocab;
  spec.with_tokenizer = true;
  spec.seed = seed;
  spec.n_layers = 1;
  const std::vector<uint8_t> bytes = testing::make_tiny_llama(spec);
  // A name of this test's own: CTest runs tests as parallel processes, and rewriting a file
  // that another test has mapped truncates it under that test (SIGBUS).
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string path = ::testing::TempDir() + "/inferd-draft-" + test + "-" +
                           std::to_string(seed) + "-" + std::to_string(n_vocab) + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

TEST_F(SpeculativeEngineTest, DraftModelGivesTheSameTextAsWithoutDrafts) {
  const auto ps = prompts(16);
  const Run off = run(spec_config(4, 0), ps, 0.0f);
  const Run sampled_off = run(spec_config(4, 0), ps, 0.9f);
  // Two one-layer random models of the same vocabulary as drafts: one from the target's seed,
  // one from another; many drafts are wrong either way.
  const std::string near = write_draft_model(5);
  const std::string other = write_draft_model(77);
  for (const std::string& path : {near, other}) {
    for (const int max_seqs : {1, 4}) {
      EngineConfig c = spec_config(max_seqs, 4);
      c.spec.method = SpecMethod::kDraftModel;
      c.spec.draft_model = path;
      const Run on = run(c, ps, 0.0f);
      EXPECT_EQ(on.tokens, off.tokens) << path << ", max_seqs " << max_seqs;
      EXPECT_GT(on.stats.num_drafts, 100);
      EXPECT_LT(on.stats.num_accepted_tokens, on.stats.num_draft_tokens);  // rejections seen
      EXPECT_GT(on.stats.num_accepted_tokens, 0);
      EXPECT_EQ(run(c, ps, 0.9f).tokens, sampled_off.tokens) << path;
    }
  }
  // A draft of another vocabulary is refused at load, and so is --spec draft without a file.
  EngineConfig bad = spec_config(2, 4);
  bad.spec.method = SpecMethod::kDraftModel;
  bad.spec.draft_model = write_draft_model(5, 30);
  EXPECT_THROW(engine(bad), Error);
  bad.spec.draft_model.clear();
  EXPECT_THROW(engine(bad), Error);
}

TEST_F(SpeculativeEngineTest, DraftModelCatchesUpOnAPromptWithoutLogits) {
  // A prompt's catch-up (want = 0, engine: in the prompt's own steps) computes all its tokens
  // but the last and proposes nothing; the first proposal after it computes the rest and drafts
  // what a state that never caught up drafts.
  const std::string path = write_draft_model(5);
  const gguf::GgufFile file = gguf::GgufFile::open(path);
  const tokenizer::Vocab vocab = tokenizer::Vocab::from_gguf(file);
  ThreadPool pool(2);
  DraftModel draft(path, vocab, 128, 2, 16, 64, pool);
  const std::vector<int32_t> prompt = prompts(3)[2];  // 29 tokens
  std::vector<int32_t> out(4), fresh_out(4);
  DraftModel::State caught, fresh;
  draft.reserve(caught, 128);
  draft.reserve(fresh, 128);
  DraftModel::Job catch_up{&caught, prompt, 0, {}};
  draft.propose({&catch_up, 1});
  EXPECT_EQ(catch_up.proposed, 0);
  EXPECT_EQ(caught.seq.num_computed, std::ssize(prompt) - 1);
  DraftModel::Job after{&caught, prompt, 4, out};
  DraftModel::Job scratch{&fresh, prompt, 4, fresh_out};
  draft.propose({&after, 1});
  draft.propose({&scratch, 1});
  EXPECT_EQ(after.proposed, 4);
  EXPECT_EQ(scratch.proposed, 4);
  EXPECT_EQ(out, fresh_out);
  EXPECT_EQ(caught.seq.num_computed, std::ssize(prompt) + 3);  // its last draft has no K/V yet
  draft.release(caught);
  draft.release(fresh);
}

TEST_F(SpeculativeEngineTest, PerRequestSettingAndLimits) {
  const auto ps = prompts(4);
  auto e = engine(spec_config(4, 4));
  auto out = std::make_shared<Collect>();
  Request r;
  r.prompt = ps[0];
  r.max_tokens = 30;
  r.sampling.temperature = 0.0f;
  r.spec_tokens = 0;  // this request: off
  r.output = out;
  e->add_request(r);
  e->run_until_idle();
  EXPECT_EQ(e->spec_decode_stats().num_drafts, 0);
  EXPECT_EQ(out->result_.output_tokens.size(), 30u);  // never past max_tokens
  r.spec_tokens = 5;                                  // above the engine's 4
  EXPECT_THROW(e->add_request(r), Error);
  r.spec_tokens = 2;
  r.max_tokens = 7;
  auto out2 = std::make_shared<Collect>();
  r.output = out2;
  e->add_request(r);
  e->run_until_idle();
  EXPECT_EQ(out2->result_.output_tokens.size(), 7u);
  EXPECT_GT(e->spec_decode_stats().num_drafts, 0);
  EXPECT_LE(e->spec_decode_stats().num_draft_tokens, 2 * e->spec_decode_stats().num_drafts);
}

TEST_F(SpeculativeEngineTest, EachStepEndsOnceAfterAllItsTokens) {
  // The server wakes a request's connection at the end of a step: every generated token is
  // reported before a step end, a step that accepted drafts reports several, and a step without
  // drafts exactly one.
  for (const int k : {0, 4}) {
    auto e = engine(spec_config(1, k));
    auto out = std::make_shared<Collect>();
    Request r;
    r.prompt = prompts(3)[2];
    r.max_tokens = 60;
    r.sampling.temperature = 0.0f;
    r.logprobs = 0;
    r.ignore_eos = true;
    r.output = out;
    e->add_request(std::move(r));
    e->run_until_idle();
    ASSERT_EQ(out->result_.finish_reason, FinishReason::kLength);
    size_t reported = 0, most = 0;
    for (const size_t n : out->step_tokens_) {
      reported += n;
      most = std::max(most, n);
    }
    // The last step's tokens end with the request (on_finish), not with a step end.
    EXPECT_GE(reported + static_cast<size_t>(k) + 1, out->tokens_.size()) << "k " << k;
    EXPECT_LT(reported, out->tokens_.size()) << "k " << k;
    if (k == 0) {
      EXPECT_EQ(most, 1u);
      EXPECT_EQ(reported, out->tokens_.size() - 1);
    } else {
      EXPECT_GT(most, 1u);
    }
  }
}

TEST_F(SpeculativeEngineTest, CancelWithDraftsPendingFreesEverything) {
  auto e = engine(spec_config(2, 4));
  auto out = std::make_shared<Collect>(6);
  Request r;
  r.prompt = prompts(1)[0];
  r.max_tokens = 100;
  r.sampling.temperature = 0.0f;
  r.output = out;
  e->add_request(std::move(r));
  e->run_until_idle();
  EXPECT_EQ(out->result_.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(e->kv_cache().used_blocks(), 0);
  EXPECT_LT(out->result_.output_tokens.size(), 100u);
}

}  // namespace
}  // namespace inferd::engine
