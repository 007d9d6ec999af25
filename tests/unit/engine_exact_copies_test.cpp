// A 4-bit KV cache with exact copies (kv/kv_cache.h) behind the engine, with prefix caching: a
// sequence that resumes a cached prefix must read that prefix's first and latest blocks as
// exactly as the sequence that wrote them did, so that a second chat turn gets the tokens and
// log-probabilities it gets with no cache at all. The copies live in state slots, which a
// finished sequence gives back; its copies at a block end are kept in a snapshot slot indexed
// by that block's hash, as a hybrid model's recurrent state is.
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tiny_engine.h"
#include "tiny_model.h"

namespace inferd::engine {
namespace {

class ExactCopiesEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyLlamaSpec spec;
    spec.n_embd = 128;  // head size 32: Q4_0 keeps a scale per 32 dimensions
    spec.n_vocab = 48;
    spec.with_tokenizer = true;
    spec.seed = 17;
    bytes_ = testing::make_tiny_llama(spec);
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes_));
  }
  static EngineConfig config(int max_seqs, bool prefix_cache) {
    EngineConfig c = tiny_engine_config(max_seqs, prefix_cache);
    c.kv_key_type = c.kv_value_type = DType::Q4_0;
    return c;
  }
  static Request greedy(std::vector<int32_t> p, std::shared_ptr<Collect> out,
                        int64_t max_tokens = 24) {
    Request r = greedy_request(std::move(p), std::move(out), max_tokens);
    r.logprobs = 0;  // each token's log-probability: equal bits, not only equal tokens
    return r;
  }
  struct Turn {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    int64_t cached = 0;
    bool operator==(const Turn& o) const { return tokens == o.tokens && logprobs == o.logprobs; }
  };
  // Two turns of one conversation on one engine: the second turn's prompt is the first's with
  // its answer and a next message.
  std::pair<Turn, Turn> conversation(const EngineConfig& c) {
    Engine engine(*file_, c);
    const std::vector<int32_t> first = walk_prompt(45, 5);
    auto a = std::make_shared<Collect>();
    engine.add_request(greedy(first, a));
    engine.run_until_idle();
    std::vector<int32_t> second = first;
    second.insert(second.end(), a->tokens_.begin(), a->tokens_.end());
    for (int i = 0; i < 9; ++i) second.push_back(3 + (i * 11) % 43);
    auto b = std::make_shared<Collect>();
    engine.add_request(greedy(second, b));
    engine.run_until_idle();
    EXPECT_EQ(engine.kv_cache().used_blocks(), 0);
    if (const kv::BlockPool* slots = engine.kv_cache().state_pool()) {
      EXPECT_EQ(slots->num_used(), 0) << "a state slot was not given back";
    }
    if (const kv::BlockPool* snapshots = engine.kv_cache().snapshot_pool()) {
      EXPECT_EQ(snapshots->num_used(), 0) << "a snapshot slot was not given back";
    }
    return {{a->tokens_, a->logprobs_, a->result_.stats.cached_tokens},
            {b->tokens_, b->logprobs_, b->result_.stats.cached_tokens}};
  }

  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::GgufFile> file_;
};

TEST_F(ExactCopiesEngineTest, ASecondTurnReadsItsPrefixAsTheFirstTurnDid) {
  const auto [first_off, second_off] = conversation(config(2, false));
  const auto [first_on, second_on] = conversation(config(2, true));
  EXPECT_EQ(first_on, first_off);
  EXPECT_EQ(second_on, second_off);
  // The first turn computed positions 0..67 (45 + 24 - 1): its last block end is 64.
  EXPECT_EQ(second_on.cached, 64);
  EXPECT_EQ(second_off.cached, 0);
  // Without the copies the same conversation reads 4-bit keys throughout, and its
  // log-probabilities differ: the comparison above is a real one.
  EngineConfig plain = config(2, false);
  plain.kv_exact_recent = 0;
  EXPECT_NE(conversation(plain).second.logprobs, second_off.logprobs);
}

// The same prompt twice (a "regenerate"): the second resumes at the prompt's last full block
// from the copies the first left there, and reads its prefix as a request with no cache does.
// The first's prefill does not stop at that block end to keep them (a hybrid model's does).
TEST_F(ExactCopiesEngineTest, ARepeatedPromptResumesFromItsPromptsCopies) {
  const std::vector<int32_t> p = walk_prompt(45, 9);
  Engine on(*file_, config(2, true)), off(*file_, config(2, false));
  std::vector<std::shared_ptr<Collect>> outs;
  for (Engine* e : {&on, &on, &off}) {
    outs.push_back(std::make_shared<Collect>());
    e->add_request(greedy(p, outs.back(), 8));
    e->run_until_idle();
  }
  ASSERT_FALSE(outs[0]->step_tokens_.empty());
  EXPECT_EQ(outs[0]->step_tokens_.front(), 1u) << "the prompt took more than one step";
  EXPECT_EQ(outs[1]->result_.stats.cached_tokens, 32);
  EXPECT_EQ(outs[1]->tokens_, outs[2]->tokens_);
  EXPECT_EQ(outs[1]->logprobs_, outs[2]->logprobs_);
}

// Prompt-lookup drafts: steps that verify them skip block ends, and rejected ones leave
// positions behind in the copies past the accepted ones. A snapshot is kept for the last block
// end a step passed and loaded only where a prefix ends, so conversations of repetitive text,
// two turns each, still get the greedy tokens of no drafts and no cache.
TEST_F(ExactCopiesEngineTest, DraftsAndTheCacheKeepTheTurnsExact) {
  const auto conversations = [&](const EngineConfig& c, SpecDecodeStats* stats) {
    Engine engine(*file_, c);
    std::vector<std::vector<int32_t>> answers;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> history{1};
      for (int k = 0; k < 30; ++k) history.push_back(3 + (k % (5 + i)) * 4);
      for (int turn = 0; turn < 2; ++turn) {
        auto out = std::make_shared<Collect>();
        engine.add_request(greedy(history, out, 40));
        engine.run_until_idle();
        answers.push_back(out->tokens_);
        history.insert(history.end(), out->tokens_.begin(), out->tokens_.end());
        for (int k = 0; k < 7; ++k) history.push_back(3 + (k % 3) * 4);
      }
    }
    if (stats) *stats = engine.spec_decode_stats();
    EXPECT_EQ(engine.kv_cache().used_blocks(), 0);
    return answers;
  };
  const auto plain = conversations(config(2, false), nullptr);
  EngineConfig drafts = config(2, true);
  drafts.spec.method = SpecMethod::kNgram;
  drafts.spec.num_tokens = 4;
  SpecDecodeStats stats;
  EXPECT_EQ(conversations(config(2, true), nullptr), plain) << "the cache alone";
  EXPECT_EQ(conversations(drafts, &stats), plain) << "drafts and the cache";
  EXPECT_GT(stats.num_draft_tokens, 0);
  EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens) << "no draft was rejected";
}

// Two requests that share only their first blocks (a system prompt, say): no snapshot ends
// where they part, and the second still takes the shared blocks from the cache (read quantized,
// as before there were snapshots) rather than computing them again. The snapshot pool holds
// twice max_seqs slots unless asked otherwise.
TEST_F(ExactCopiesEngineTest, APrefixWithoutASnapshotIsStillTaken) {
  Engine engine(*file_, config(2, true));
  EXPECT_EQ(engine.config().state_snapshots, 4);
  ASSERT_NE(engine.kv_cache().snapshot_pool(), nullptr);
  EXPECT_EQ(engine.kv_cache().snapshot_pool()->num_blocks(), 4);
  const std::vector<int32_t> shared = walk_prompt(40, 3);
  std::vector<std::shared_ptr<Collect>> outs;
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> p = shared;
    for (int j = 0; j < 20; ++j) p.push_back(3 + (j * 5 + 11 * i) % 43);
    outs.push_back(std::make_shared<Collect>());
    engine.add_request(greedy(p, outs.back(), 4));
    engine.run_until_idle();
  }
  EXPECT_EQ(outs[0]->result_.stats.cached_tokens, 0);
  EXPECT_EQ(outs[1]->result_.stats.cached_tokens, 32);  // the shared 40 tokens' two full blocks
  EngineConfig f16 = config(2, true);
  f16.kv_key_type = f16.kv_value_type = DType::F16;
  EXPECT_EQ(Engine(*file_, f16).kv_cache().snapshot_pool(), nullptr) << "no copies, no snapshots";
}

}  // namespace
}  // namespace inferd::engine
