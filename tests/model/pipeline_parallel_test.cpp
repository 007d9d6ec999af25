// Pipeline parallelism (dist/model_parallel.h) against the whole model: the ranks are threads of
// this process (dist::ThreadGroup), rank 0 loading its run of layers of a random-weight model of
// make-golden (every architecture) or SmolLM2, the others following it in dist::run_worker as
// processes under mpirun do. Three sequences of 37, 90 and 21 tokens go in one step (176 tokens:
// micro-batches that cut a sequence), then a decode step of one token each, then a second
// prompt step for the first sequence (its K/V and recurrent state carried over), then two steps
// in flight at once (Model::launch_forward: the second launched before the first finishes),
// then a whole step again: every logit
// row's top-10 probabilities are within 0.01 of the one-process model's (the bar) and the
// greedy token the same unless the whole model's top two are within that of each other. Each
// rank runs the same kernels over the same rows as the whole model, so the two agree to rounding.
// The bytes the ranks sent are what the split predicts. What the split cannot do is refused by
// name.
#include <array>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/communicator.h"
#include "dist/model_parallel.h"
#include "golden_util.h"
#include "model/registry.h"
#include "rank_memory_check.h"
#include "util/error.h"

namespace inferd::testing {
namespace {

struct Case {
  std::string model;  // NAME-seed7.TYPE.gguf of make-golden, or "smollm2"
  int ranks;
};

// One model's cache and sequences, stepped alike for the whole model and the split one.
class Stepper {
 public:
  Stepper(model::Model& model, int num_sequences) : model_(model) {
    cache_ = std::make_unique<kv::KvCache>(model.kv_config(48, 16, DType::F16, DType::F16, 4));
    for (int s = 0; s < num_sequences; ++s) {
      tables_.push_back(cache_->allocate_sequence(256));
      slots_.push_back(cache_->allocate_state());
      lengths_.push_back(0);
    }
  }
  kv::KvCache& cache() { return *cache_; }
  // Appends tokens[s] to each sequence s (empty: none this step) and returns the logits
  // [rows, n_vocab] of every 8th token and each sequence's last.
  std::vector<float> step(const std::vector<std::vector<int32_t>>& tokens, ThreadPool& pool,
                          int64_t* rows_out) {
    Step& st = steps_[0];
    build(st, tokens);
    model_.forward(st.batch, *cache_, st.logits.data(), pool);
    *rows_out = static_cast<int64_t>(st.rows.size());
    return st.logits;
  }
  // The same in two halves (Model::launch_forward, finish_forward), the step in pipeline slot
  // `slot` while others are in flight.
  void launch(const std::vector<std::vector<int32_t>>& tokens, ThreadPool& pool, int slot) {
    Step& st = steps_[static_cast<size_t>(slot)];
    build(st, tokens);
    model_.launch_forward(st.batch, *cache_, st.logits.data(), pool, slot);
  }
  std::vector<float> finish(ThreadPool& pool, int slot, int64_t* rows_out) {
    Step& st = steps_[static_cast<size_t>(slot)];
    model_.finish_forward(st.batch, st.logits.data(), pool, slot);
    *rows_out = static_cast<int64_t>(st.rows.size());
    return st.logits;
  }

 private:
  struct Step {
    std::vector<int32_t> ids, positions, rows;
    std::vector<model::BatchSequence> entries;
    std::vector<float> logits;
    model::Batch batch;
  };
  void build(Step& st, const std::vector<std::vector<int32_t>>& tokens) {
    std::vector<int32_t>& ids = st.ids;
    std::vector<int32_t>& positions = st.positions;
    std::vector<int32_t>& rows = st.rows;
    std::vector<model::BatchSequence>& entries = st.entries;
    ids.clear();
    positions.clear();
    rows.clear();
    entries.clear();
    for (size_t s = 0; s < tokens.size(); ++s) {
      if (tokens[s].empty()) continue;
      const auto begin = static_cast<int64_t>(ids.size());
      for (size_t i = 0; i < tokens[s].size(); ++i) {
        ids.push_back(tokens[s][i]);
        positions.push_back(static_cast<int32_t>(lengths_[s] + static_cast<int64_t>(i)));
        if (i % 8 == 7 || i + 1 == tokens[s].size()) rows.push_back(static_cast<int32_t>(ids.size() - 1));
      }
      lengths_[s] += static_cast<int64_t>(tokens[s].size());
      entries.push_back({begin, static_cast<int64_t>(ids.size()), &tables_[s], slots_[s]});
    }
    const int64_t n_vocab = model_.config().n_vocab;
    st.logits.assign(rows.size() * static_cast<size_t>(n_vocab), 0.0f);
    st.batch = model::Batch{ids, positions, entries, rows};
  }
  model::Model& model_;
  std::array<Step, 4> steps_;
  std::unique_ptr<kv::KvCache> cache_;
  std::vector<kv::BlockTables> tables_;
  std::vector<int32_t> slots_;
  std::vector<int64_t> lengths_;
};

class PipelineParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineParallelTest, LogitsMatchTheWholeModel) {
  const Case c = GetParam();
  const bool smollm2 = c.model == "smollm2";
  const std::string path = smollm2 ? model_path() : cache_dir() + "/golden-models/" + c.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (make-golden --models-only)";
  const auto file = gguf::GgufFile::open(path);
  auto whole = model::load_model(file, {256, 1024});
  const int64_t n_vocab = whole->config().n_vocab, n_embd = whole->config().n_embd;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(std::min<int64_t>(n_vocab, 30000)) - 1);
  const auto random_tokens = [&](int n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = token(rng);
    return ids;
  };
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(37), random_tokens(90),
                                                     random_tokens(21)};
  const std::vector<int32_t> second_prompt = random_tokens(70);

  auto comms = dist::ThreadGroup::make(c.ranks);
  std::vector<std::thread> workers;
  for (int r = 1; r < c.ranks; ++r)
    workers.emplace_back([&comms, r] { dist::run_worker(*comms[static_cast<size_t>(r)]); });
  model::ModelOptions options{256, 1024};
  options.pp = comms[0].get();
  ThreadPool pool(2);
  float largest = 0;
  int positions = 0, same = 0;
  int64_t tokens_sent = 0, rows_sent = 0;  // what rank 0 sent on, and the last rank back
  try {  // (an error here must still release the workers below)
    auto split = model::load_model(file, options);
    Stepper ours(*split, 3), theirs(*whole, 3);
    // Each rank reports its machine and a KV block of its own layers (what the engine sizes the
    // pool by): here one machine, whose ranks' blocks together are the whole model's block.
    expect_rank_blocks_make_the_whole(*split, *whole, c.ranks, c.model);
    split->attach_cache(ours.cache().config(), 1);  // the other ranks' caches, each its layers
    // Rank 0 keeps the K/V of its layers only.
    EXPECT_LT(ours.cache().bytes(), theirs.cache().bytes()) << c.model;
    const auto compare = [&](const std::vector<float>& a, const std::vector<float>& b, int64_t rows,
                             const char* step) {
      for (int64_t r = 0; r < rows; ++r) {
        const auto lp_a = log_softmax({a.data() + r * n_vocab, static_cast<size_t>(n_vocab)});
        const auto lp_b = log_softmax({b.data() + r * n_vocab, static_cast<size_t>(n_vocab)});
        std::vector<size_t> order(lp_b.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::partial_sort(order.begin(), order.begin() + 10, order.end(),
                          [&](size_t x, size_t y) { return lp_b[x] > lp_b[y]; });
        for (size_t k = 0; k < 10; ++k) {
          const float diff = std::fabs(std::exp(lp_a[order[k]]) - std::exp(lp_b[order[k]]));
          largest = std::max(largest, diff);
          EXPECT_LT(diff, 0.01f) << c.model << ": " << step << ", row " << r;
        }
        const auto argmax = static_cast<size_t>(std::max_element(lp_a.begin(), lp_a.end()) - lp_a.begin());
        ++positions;
        if (argmax == order[0]) {
          ++same;
        } else {
          EXPECT_LT(std::exp(lp_b[order[0]]) - std::exp(lp_b[order[1]]), 0.01f)
              << c.model << ": " << step << ", greedy token differs at row " << r;
        }
      }
    };
    int64_t rows = 0, rows_whole = 0;
    // 1. Three prompts in one step.
    auto a = ours.step(prompts, pool, &rows);
    auto b = theirs.step(prompts, pool, &rows_whole);
    ASSERT_EQ(rows, rows_whole);
    compare(a, b, rows, "prompt step");
    tokens_sent += 37 + 90 + 21;
    rows_sent += rows;
    // 2. A decode step: each sequence's greedy next token (the whole model's).
    std::vector<std::vector<int32_t>> next(3);
    {
      int64_t r = 0;
      for (size_t s = 0; s < 3; ++s) {
        r += static_cast<int64_t>((prompts[s].size() + 7) / 8);  // (its rows: every 8th and its last)
        const float* row = b.data() + (r - 1) * n_vocab;
        next[s] = {static_cast<int32_t>(std::max_element(row, row + n_vocab) - row)};
      }
    }
    a = ours.step(next, pool, &rows);
    b = theirs.step(next, pool, &rows_whole);
    compare(a, b, rows, "decode step");
    tokens_sent += 3;
    rows_sent += rows;
    // 3. More prompt for the first sequence alone: K/V and state from both steps before.
    a = ours.step({second_prompt, {}, {}}, pool, &rows);
    b = theirs.step({second_prompt, {}, {}}, pool, &rows_whole);
    compare(a, b, rows, "second prompt step");
    tokens_sent += 70;
    rows_sent += rows;
    // 4. Two steps in flight at once (several steps in flight: the engine's virtual engines):
    // the first sequence's next token in slot 0, the other two's in slot 1, launched before
    // the first finishes; each against the whole model's step of the same tokens.
    const std::vector<std::vector<int32_t>> first = {{next[0][0]}, {}, {}};
    const std::vector<std::vector<int32_t>> others = {{}, {next[1][0], next[2][0]}, random_tokens(3)};
    ours.launch(first, pool, 0);
    ours.launch(others, pool, 1);
    a = ours.finish(pool, 0, &rows);
    b = theirs.step(first, pool, &rows_whole);
    ASSERT_EQ(rows, rows_whole);
    compare(a, b, rows, "first step in flight");
    rows_sent += rows;
    a = ours.finish(pool, 1, &rows);
    b = theirs.step(others, pool, &rows_whole);
    ASSERT_EQ(rows, rows_whole);
    compare(a, b, rows, "second step in flight");
    tokens_sent += 1 + 2 + 3;
    rows_sent += rows;
    // The steps' slots are free again: a whole forward pass runs as before.
    a = ours.step(first, pool, &rows);
    b = theirs.step(first, pool, &rows_whole);
    compare(a, b, rows, "step after the steps in flight");
    tokens_sent += 1;
    rows_sent += rows;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.model << ": " << e.what();
  }
  dist::release_workers(*comms[0]);
  for (std::thread& t : workers) t.join();
  // Every rank but the last sends its layers' output of every token on; the last the final
  // hidden state of the logit rows back to rank 0. Each also gave its memory report once (4
  // floats, dist::gather_memory).
  const int64_t floats = static_cast<int64_t>(sizeof(float)) * n_embd;
  const int64_t report = 4 * static_cast<int64_t>(sizeof(float));
  const auto last = static_cast<size_t>(c.ranks - 1);
  EXPECT_EQ(comms[last]->bytes_sent(), rows_sent * floats + report) << c.model;
  if (c.ranks > 2) {
    EXPECT_EQ(comms[1]->bytes_sent(), tokens_sent * floats + report) << c.model;
  }
  std::printf("[ pp       ] %-26s %d ranks: %d/%d greedy tokens the same, largest top-10 "
              "probability difference %.6f; the last rank sent %lld bytes, as predicted\n",
              c.model.c_str(), c.ranks, same, positions, largest,
              static_cast<long long>(comms[last]->bytes_sent()));
}

INSTANTIATE_TEST_SUITE_P(
    Golden, PipelineParallelTest,
    ::testing::Values(Case{"smollm2", 2}, Case{"smollm2", 4}, Case{"llama3-seed7.Q4_K_M.gguf", 2},
                      Case{"llama3-seed7.F16.gguf", 3}, Case{"qwen2-seed7.Q8_0.gguf", 2},
                      Case{"qwen3-seed7.Q4_K_M.gguf", 2}, Case{"mistral-seed7.Q8_0.gguf", 2},
                      Case{"gemma2-seed7.Q8_0.gguf", 2}, Case{"gemma3-seed7.Q4_K_M.gguf", 2},
                      Case{"phi3-seed7.Q8_0.gguf", 2}, Case{"qwen2moe-seed7.Q8_0.gguf", 2},
                      Case{"qwen3moe-seed7.Q4_K_M.gguf", 2}, Case{"mixtral-seed7.Q8_0.gguf", 2},
                      Case{"gpt-oss-seed7.MXFP4_MOE.gguf", 2}, Case{"glm4moe-seed7.Q8_0.gguf", 2},
                      Case{"deepseek2-seed7.Q8_0.gguf", 2}, Case{"gemma4moe-seed7.Q8_0.gguf", 2},
                      Case{"qwen35-seed7.Q8_0.gguf", 2}, Case{"qwen35moe-seed7.Q4_K_M.gguf", 2},
                      Case{"qwen3next-seed7.Q8_0.gguf", 2}, Case{"qwen35mtp-seed7.Q8_0.gguf", 4}),
    [](const auto& info) {
      return param_test_name(info.param.model) + "_" + std::to_string(info.param.ranks) + "_ranks";
    });

// What the split does not cover is an error naming it, before any message goes out.
TEST(PipelineParallelRefusals, NamedErrors) {
  const std::string path = cache_dir() + "/golden-models/gemma4-seed7.Q8_0.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const auto file = gguf::GgufFile::open(path);
  auto comms = dist::ThreadGroup::make(2);
  model::ModelOptions options{64, 256};
  options.pp = comms[0].get();
  try {
    model::load_model(file, options);
    ADD_FAILURE() << "gemma4 loaded split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("per-layer embeddings"), std::string::npos) << e.what();
  }
  options.pp = nullptr;
  options.mtp = true;
  const std::string mtp = cache_dir() + "/golden-models/qwen35mtp-seed7.Q8_0.gguf";
  if (!std::filesystem::exists(mtp)) return;
  const auto mtp_file = gguf::GgufFile::open(mtp);
  options.pp = comms[0].get();
  try {
    model::load_model(mtp_file, options);
    ADD_FAILURE() << "an MTP drafter loaded split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace inferd::testing
