// A hybrid model (tiny random qwen35, tiny_hybrid.h) behind the engine: every sequence holds a
// recurrent state slot beside its KV blocks, and what the engine does with sequences keeps
// greedy outputs exact: batching with others, prefill in chunks of any size, preemption and
// recomputation, n > 1 choices forked with a copy of the state, n-gram speculation (the state
// rolled back after a rejected draft), prefix caching (resumed from state snapshots at block
// ends).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tiny_engine.h"
#include "tiny_hybrid.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

class HybridEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyHybridSpec spec;
    spec.with_tokenizer = true;
    spec.seed = 11;
    bytes_ = testing::make_tiny_hybrid(spec);
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes_));
  }
  static EngineConfig config(int max_seqs) { return tiny_engine_config(max_seqs); }
  // The greedy tokens of each prompt, all submitted at once to an engine with `c`.
  std::vector<std::vector<int32_t>> run(const EngineConfig& c,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        int64_t* preemptions = nullptr, int64_t max_tokens = 24) {
    Engine engine(*file_, c);
    std::vector<std::shared_ptr<Collect>> outs;
    for (const auto& p : prompts) {
      outs.push_back(std::make_shared<Collect>());
      engine.add_request(greedy_request(p, outs.back(), max_tokens));
    }
    engine.run_until_idle();
    EXPECT_EQ(engine.kv_cache().used_blocks(), 0);
    EXPECT_EQ(engine.kv_cache().state_pool()->num_used(), 0) << "a state slot was not given back";
    if (const kv::BlockPool* snapshots = engine.kv_cache().snapshot_pool()) {
      EXPECT_EQ(snapshots->num_used(), 0) << "a snapshot slot was not given back";
    }
    if (preemptions) *preemptions = engine.num_preemptions();
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& o : outs) tokens.push_back(o->result_.output_tokens);
    return tokens;
  }
  std::vector<std::vector<int32_t>> prompts(int n) {
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) out.push_back(walk_prompt(20 + 13 * i, i));
    return out;
  }

  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::GgufFile> file_;
};

TEST_F(HybridEngineTest, ASequenceAloneOrAmongOthersGetsTheSameTokens) {
  const auto all = prompts(8);
  const auto together = run(config(8), all);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(run(config(1), {all[i]})[0], together[i]) << "prompt " << i;
    EXPECT_EQ(together[i].size(), 24u);
  }
}

TEST_F(HybridEngineTest, PrefillInChunksOfAnySizeGivesTheSameTokens) {
  const auto all = prompts(4);
  const auto whole = run(config(4), all);
  for (const int64_t chunk : {7, 16, 33}) {
    EngineConfig c = config(4);
    c.max_batched_tokens = chunk;
    EXPECT_EQ(run(c, all), whole) << "steps of " << chunk << " tokens";
  }
}

TEST_F(HybridEngineTest, PreemptedSequencesAreRecomputedExactly) {
  const auto all = prompts(6);
  const auto ample = run(config(6), all);
  EngineConfig tight = config(6);
  tight.kv_blocks = 16;  // one sequence of 256 tokens; six of up to ~110 need more
  int64_t preemptions = 0;
  EXPECT_EQ(run(tight, all, &preemptions), ample);
  EXPECT_GT(preemptions, 0);
}

TEST_F(HybridEngineTest, ChoicesForkWithACopyOfTheState) {
  const std::vector<int32_t> p = walk_prompt(45, 3);
  const auto sampled = [&](uint64_t seed) { return seeded_request(p, 16, seed); };
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t i = 0; i < 3; ++i) {
    Engine e(*file_, config(3));
    auto out = std::make_shared<Collect>();
    Request r = sampled(40 + i);
    r.output = out;
    e.add_request(std::move(r));
    e.run_until_idle();
    alone.push_back(out->result_.output_tokens);
  }
  EXPECT_NE(alone[0], alone[1]);
  for (const int max_seqs : {3, 1}) {  // forked; and one after another
    Engine e(*file_, config(max_seqs));
    std::vector<std::shared_ptr<Collect>> outs;
    Request r = sampled(40);
    add_choice_outputs(r, 3, outs);
    e.add_request(std::move(r));
    e.run_until_idle();
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(outs[i]->result_.output_tokens, alone[i]) << "choice " << i << ", " << max_seqs;
  }
}

// n-gram drafts on a hybrid model: the state goes through every draft, and after a rejected
// one it is restored from the step's checkpoint and the kept tokens are computed again. Greedy
// text must be the same as without drafts, with drafts both accepted and rejected.
TEST_F(HybridEngineTest, NgramDraftsKeepGreedyTextExact) {
  // A variant whose sub-layers are damped and whose output is tied to the embeddings: it
  // often repeats what it has seen, so prompt lookup finds drafts, some right and some wrong.
  testing::TinyHybridSpec spec;
  spec.with_tokenizer = true;
  spec.seed = 12;
  spec.tied_output = true;
  spec.output_scale = 0.7f;
  bytes_ = testing::make_tiny_hybrid(spec);
  file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes_));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back({1, 5, 9, 13, 5, 9, 13, 5, 9, int32_t(13 + i)});
  const auto plain = run(config(4), prompts, nullptr, 64);
  for (const int max_seqs : {1, 4}) {
    EngineConfig c = config(max_seqs);
    c.spec.method = SpecMethod::kNgram;
    c.spec.num_tokens = 4;
    Engine engine(*file_, c);
    std::vector<std::shared_ptr<Collect>> outs;
    for (const auto& p : prompts) {
      outs.push_back(std::make_shared<Collect>());
      engine.add_request(greedy_request(p, outs.back(), 64));
    }
    engine.run_until_idle();
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(outs[i]->result_.output_tokens, plain[i]) << "prompt " << i << ", " << max_seqs;
    const SpecDecodeStats& stats = engine.spec_decode_stats();
    EXPECT_GT(stats.num_accepted_tokens, 0);
    EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens) << "no draft was rejected";
    EXPECT_EQ(engine.kv_cache().state_pool()->num_used(), 0);
  }
}

// Prefix caching on a hybrid model resumes from state snapshots at block ends: a second turn
// that repeats the first turn's prompt and answer starts at the first turn's last kept block
// end, and the tokens are the same as with the cache off.
TEST_F(HybridEngineTest, ASecondTurnResumesFromTheFirstTurnsState) {
  const std::vector<int32_t> first = walk_prompt(45, 5);
  const auto turns = [&](bool prefix_cache, int64_t* cached) {
    EngineConfig c = config(2);
    c.prefix_caching = prefix_cache;
    Engine engine(*file_, c);
    EXPECT_EQ(engine.config().prefix_caching, prefix_cache);
    auto a = std::make_shared<Collect>();
    engine.add_request(greedy_request(first, a));
    engine.run_until_idle();
    std::vector<int32_t> second = first;
    second.insert(second.end(), a->result_.output_tokens.begin(), a->result_.output_tokens.end());
    for (int i = 0; i < 9; ++i) second.push_back(3 + (i * 11) % 43);  // the next user message
    auto b = std::make_shared<Collect>();
    engine.add_request(greedy_request(second, b));
    engine.run_until_idle();
    *cached = b->result_.stats.cached_tokens;
    EXPECT_EQ(engine.kv_cache().state_pool()->num_used(), 0);
    return std::make_pair(a->result_.output_tokens, b->result_.output_tokens);
  };
  int64_t cached_on = 0, cached_off = 0;
  const auto on = turns(true, &cached_on), off = turns(false, &cached_off);
  EXPECT_EQ(on, off);
  // The first turn computed positions 0..67 (45 + 24 - 1): its last block end is 64.
  EXPECT_EQ(cached_on, 64);
  EXPECT_EQ(cached_off, 0);
}

// Chat traffic: more conversations than sequences, each turn sent after all the others' turns.
// Every conversation's second turn resumes from its first turn's state: the snapshot pool is
// sized from memory, not from max_seqs (2 x max_seqs slots kept four of these twelve).
// The count can be given, and then it is what the cache has.
TEST_F(HybridEngineTest, EveryConversationResumesWhenThereAreMoreThanSequences) {
  constexpr int kConversations = 12;
  EngineConfig c = config(2);
  c.kv_blocks = 128;  // room for every conversation's attention blocks
  Engine engine(*file_, c);
  EXPECT_GE(engine.config().state_snapshots, 2 * kConversations);
  EXPECT_EQ(engine.kv_cache().snapshot_pool()->num_blocks(), engine.config().state_snapshots);
  std::vector<std::vector<int32_t>> history;
  std::vector<std::shared_ptr<Collect>> firsts;
  for (int i = 0; i < kConversations; ++i) {
    history.push_back(walk_prompt(37, 100 + i * 5));
    history.back()[1] = 3 + i;  // conversations differ from their first block on
    firsts.push_back(std::make_shared<Collect>());
    engine.add_request(greedy_request(history.back(), firsts.back(), 8));
  }
  engine.run_until_idle();
  std::vector<std::shared_ptr<Collect>> seconds;
  for (int i = 0; i < kConversations; ++i) {
    std::vector<int32_t>& h = history[static_cast<size_t>(i)];
    const auto& answer = firsts[static_cast<size_t>(i)]->result_.output_tokens;
    h.insert(h.end(), answer.begin(), answer.end());
    for (int j = 0; j < 6; ++j) h.push_back(3 + (j * 17 + i) % 43);
    seconds.push_back(std::make_shared<Collect>());
    engine.add_request(greedy_request(h, seconds.back(), 8));
  }
  engine.run_until_idle();
  for (int i = 0; i < kConversations; ++i) {
    // The first turn computed 37 + 8 - 1 = 44 positions: its last block end is 32.
    EXPECT_EQ(seconds[static_cast<size_t>(i)]->result_.stats.cached_tokens, 32) << i;
  }
  EngineConfig given = config(2);
  given.state_snapshots = 5;
  Engine small(*file_, given);
  EXPECT_EQ(small.kv_cache().snapshot_pool()->num_blocks(), 5);
  EngineConfig budget = config(2);
  budget.state_cache_bytes = 0;  // at least two per sequence
  EXPECT_EQ(Engine(*file_, budget).kv_cache().snapshot_pool()->num_blocks(), 4);
}

// Many requests sharing prompt prefixes, several at once and with preemption: the cache gives
// the same greedy tokens as no cache, and every slot and block is given back.
TEST_F(HybridEngineTest, PrefixCacheOnEqualsOff) {
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int32_t> shared = walk_prompt(40, 7);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    for (int j = 0; j < 5 + 7 * i; ++j) p.push_back(3 + (j * 13 + i) % 43);
    prompts.push_back(p);
  }
  EngineConfig off = config(3);
  off.prefix_caching = false;
  const auto expected = run(off, prompts);
  for (const int32_t kv_blocks : {0, 16}) {  // 16: too few for three at once, some preempted
    EngineConfig on = config(3);
    on.kv_blocks = kv_blocks;
    EXPECT_EQ(run(on, prompts), expected) << kv_blocks << " blocks";
    // The same prompts again, now that snapshots of their prompts' last full blocks exist.
    Engine engine(*file_, on);
    std::vector<std::shared_ptr<Collect>> outs;
    for (int round = 0; round < 2; ++round) {
      for (const auto& p : prompts) {
        outs.push_back(std::make_shared<Collect>());
        engine.add_request(greedy_request(p, outs.back()));
      }
      engine.run_until_idle();
    }
    int64_t cached = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_EQ(outs[i]->result_.output_tokens, expected[i % prompts.size()]) << i;
      if (i >= prompts.size()) cached += outs[i]->result_.stats.cached_tokens;
    }
    EXPECT_GT(cached, 0) << "the second round found nothing cached";
    EXPECT_EQ(engine.kv_cache().state_pool()->num_used(), 0);
    EXPECT_EQ(engine.kv_cache().used_blocks(), 0);
  }
}

// Prompt logprobs on a hybrid model: the prompt runs in steps of the rows a step has for them
// (64) and stops at its last full block for the state snapshot; each position's most likely
// token and its logprob are what a greedy request stopping there samples first.
TEST_F(HybridEngineTest, PromptLogprobsMatchTheGreedyTokenBeforeEachPosition) {
  const std::vector<int32_t> p = walk_prompt(75, 3);
  Engine engine(*file_, config(2));
  auto out = std::make_shared<Collect>();
  Request r = greedy_request(p, out, 2);
  r.prompt_logprobs = 1;
  engine.add_request(std::move(r));
  engine.run_until_idle();
  const std::vector<PromptTokenLogprob>& scored = out->result_.prompt_logprobs;
  ASSERT_EQ(scored.size(), p.size());
  Engine reference(*file_, tiny_engine_config(2, /*prefix_cache=*/false));
  for (const size_t k : {size_t{1}, size_t{17}, size_t{63}, size_t{64}, size_t{65}, size_t{74}}) {
    auto first = std::make_shared<Collect>();
    Request before =
        greedy_request(std::vector<int32_t>(p.begin(), p.begin() + static_cast<long>(k)), first, 1);
    before.logprobs = 0;
    reference.add_request(std::move(before));
    reference.run_until_idle();
    ASSERT_EQ(first->tokens_.size(), 1u);
    ASSERT_EQ(scored[k].top.size(), 1u) << k;
    EXPECT_EQ(scored[k].top[0].token, first->tokens_[0]) << k;
    EXPECT_NEAR(scored[k].top[0].logprob, first->logprobs_[0], 1e-4f) << k;
  }
}

}  // namespace
}  // namespace inferd::engine
