// Data parallelism (model/data_parallel.h) against one process: the ranks are threads of this
// process (dist::ThreadGroup), rank 0 loading a random-weight model of make-golden and the others
// following it in dist::run_worker, as processes under mpirun do. Three steps of several
// sequences each, as the scheduler makes them: prompts of different lengths (the longest on the
// bf16 route) with a logit row each and two hidden-state rows; a decode step of every sequence
// beside a new prompt; a fork of the first sequence (its partly filled first block copied, so
// that the copy must take its rank along) decoding beside its parent.
//
// Every rank runs the same kernels over the same rows as one process, and with
// --expert-parallel a token's slots come back from their experts' ranks and are added in slot
// order as one process adds them: the logits, hidden states and routing margins are the same
// bits. What rank 1 sends is checked against the design: without experts, its final rows and
// its tokens' margins to every other rank and its slice of every logit row to rank 0; with
// them, also per MoE layer each of its tokens' records (its input and choice) to each other rank
// that holds one of its experts, and the weighted output of each slot it holds of the others'
// tokens.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "dist/communicator.h"
#include "dist/model_parallel.h"
#include "golden_util.h"
#include "model/data_parallel.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::testing {
namespace {

struct Case {
  std::string model;  // NAME-seed7.TYPE.gguf of make-golden
  int ranks;
  bool experts = false;  // --expert-parallel
};

// One sequence of the test: its tokens so far, its blocks and state slot.
struct Seq {
  std::vector<int32_t> tokens;
  kv::BlockTables tables;
  int32_t state = -1;
};

// The step's batch: for each sequence, its tokens from `from[i]` on.
struct Step {
  std::vector<int32_t> tokens, positions, logit_rows, hidden_rows;
  std::vector<model::BatchSequence> entries;
  model::Batch batch;
  Step(std::vector<Seq>& seqs, const std::vector<size_t>& which, const std::vector<size_t>& from,
       bool bf16_last) {
    int64_t bf16_from = std::numeric_limits<int64_t>::max();
    for (size_t k = 0; k < which.size(); ++k) {
      Seq& s = seqs[which[k]];
      const auto begin = static_cast<int64_t>(tokens.size());
      if (bf16_last && k + 1 == which.size()) bf16_from = begin;
      for (size_t p = from[k]; p < s.tokens.size(); ++p) {
        tokens.push_back(s.tokens[p]);
        positions.push_back(static_cast<int32_t>(p));
      }
      entries.push_back({begin, static_cast<int64_t>(tokens.size()), &s.tables, s.state});
      logit_rows.push_back(static_cast<int32_t>(tokens.size() - 1));
    }
    hidden_rows.push_back(0);
    hidden_rows.push_back(static_cast<int32_t>(tokens.size() - 1));
    batch = model::Batch{tokens, positions, entries, logit_rows, bf16_from, hidden_rows};
  }
};

class DataParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelTest, StepsMatchOneProcess) {
  const Case c = GetParam();
  const std::string path = cache_dir() + "/golden-models/" + c.model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent (make-golden --models-only)";
  const auto file = gguf::GgufFile::open(path);
  auto whole = model::load_model(file, {256, 1024});
  const int n_vocab = whole->config().n_vocab;
  const int64_t n_embd = whole->config().n_embd;

  auto comms = dist::ThreadGroup::make(c.ranks);
  std::vector<std::thread> workers;
  for (int r = 1; r < c.ranks; ++r)
    workers.emplace_back([&comms, r] { dist::run_worker(*comms[static_cast<size_t>(r)]); });
  model::ModelOptions options{256, 1024};
  options.dp = comms[0].get();
  options.expert_parallel = c.experts;
  int64_t predicted = 0;  // what rank 1 sends rank 0 without experts: final rows and margins
  int64_t rank1_tokens = 0;
  int compared = 0;
  try {  // (an error here must still release the workers below)
    auto shard = model::load_model(file, options);
    const kv::KvCacheConfig config = shard->kv_config(64, 16, DType::F16, DType::F16, 8);
    shard->attach_cache(config, 2);  // (the other ranks' caches)
    kv::KvCache ours_cache(config), whole_cache(whole->kv_config(64, 16, DType::F16, DType::F16, 8));
    ThreadPool pool(2);
    // Prompts of 7, 19, 3 and 40 tokens (the last on the bf16 route), a new one of 11 later.
    std::vector<Seq> seqs;
    uint32_t seed = 7;
    for (const int n : {7, 19, 3, 40, 11}) {
      Seq& s = seqs.emplace_back();
      for (int i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        s.tokens.push_back(static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(n_vocab)));
      }
      s.tables = ours_cache.allocate_sequence(n + 8);
      s.state = ours_cache.allocate_state();
    }
    // Runs a step on both and compares; then appends each sequence's greedy token (the whole
    // model's) to it.
    const auto run = [&](std::vector<size_t> which, std::vector<size_t> from, bool bf16_last,
                         const char* what) {
      Step a(seqs, which, from, bf16_last);
      const size_t R = a.batch.logit_rows.size(), H = a.batch.hidden_rows.size();
      const size_t T = a.tokens.size();
      std::vector<float> ours(R * n_vocab), theirs(R * n_vocab), our_hidden(H * n_embd),
          their_hidden(H * n_embd), our_margins(T), their_margins(T);
      model::Batch ob = a.batch, tb = a.batch;
      ob.hidden = our_hidden.data();
      tb.hidden = their_hidden.data();
      ob.routing_margins = our_margins.data();
      tb.routing_margins = their_margins.data();
      shard->forward(ob, ours_cache, ours.data(), pool);
      whole->forward(tb, whole_cache, theirs.data(), pool);
      EXPECT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size() * sizeof(float)), 0)
          << c.model << ": " << what << ": logits differ";
      EXPECT_EQ(std::memcmp(our_hidden.data(), their_hidden.data(), our_hidden.size() * sizeof(float)), 0)
          << c.model << ": " << what << ": hidden states differ";
      EXPECT_EQ(std::memcmp(our_margins.data(), their_margins.data(), T * sizeof(float)), 0)
          << c.model << ": " << what << ": routing margins differ";
      // Each sequence goes on with its greedy token, or (rank 1's bytes) is counted.
      for (size_t r = 0; r < R; ++r) {
        const float* row = theirs.data() + r * n_vocab;
        seqs[which[r]].tokens.push_back(
            static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
        ++compared;
      }
      return a.batch.sequences.size();
    };
    // A step, then what rank 1 sent for it: to every other rank, the final rows (logit rows,
    // and the two hidden-state rows: the first entry's first token and the last entry's last)
    // and the routing margins of the sequences it ran, each sequence's rank as the ranks
    // recorded it; to rank 0, its slice of the vocabulary's logits for every logit row.
    const size_t placing = model::placing_group(ours_cache);
    const int64_t slice = (int64_t{n_vocab} + c.ranks - 1) / c.ranks;
    const int64_t vocab_slice_1 = std::min<int64_t>(slice, n_vocab - slice);
    const auto rank_of = [&](size_t i) {
      return shard->rank_of_block(placing, seqs[i].tables[placing][0]);
    };
    const auto step = [&](const std::vector<size_t>& which, const std::vector<size_t>& from,
                          bool bf16_last, const char* what) {
      std::vector<int64_t> tokens;
      for (size_t k = 0; k < which.size(); ++k)
        tokens.push_back(static_cast<int64_t>(seqs[which[k]].tokens.size() - from[k]));
      run(which, from, bf16_last, what);
      for (size_t k = 0; k < which.size(); ++k) {
        if (rank_of(which[k]) != 1) continue;
        const int64_t rows = 1 + (k == 0 ? 1 : 0) + (k + 1 == which.size() ? 1 : 0);
        rank1_tokens += tokens[k];
        predicted += (rows * n_embd + tokens[k]) * (c.ranks - 1) * static_cast<int64_t>(sizeof(float));
      }
      // Its slice of the vocabulary for every logit row, to rank 0.
      predicted += static_cast<int64_t>(which.size()) * vocab_slice_1 * static_cast<int64_t>(sizeof(float));
    };
    step({0, 1, 2, 3}, {0, 0, 0, 0}, true, "prompts");
    // Decode every sequence, beside a new prompt.
    std::vector<size_t> from;
    for (size_t i = 0; i < 4; ++i) from.push_back(seqs[i].tokens.size() - 1);
    from.push_back(0);
    step({0, 1, 2, 3, 4}, from, false, "decode beside a prompt");
    // A fork of sequence 0 (8 tokens: its first block partly filled, copied for the fork's own).
    Seq fork = seqs[0];
    const kv::BlockTables fresh = ours_cache.allocate_sequence(1);
    for (size_t g = 0; g < ours_cache.groups().size(); ++g) {
      if (fork.tables[g].empty()) continue;
      fork.tables[g][0] = fresh[g][0];
      shard->copy_kv_block(ours_cache, g, seqs[0].tables[g][0], fresh[g][0]);
      whole->copy_kv_block(whole_cache, g, seqs[0].tables[g][0], fresh[g][0]);
    }
    if (seqs[0].state >= 0) {
      fork.state = ours_cache.allocate_state();
      shard->copy_state(ours_cache, seqs[0].state, fork.state);
      whole->copy_state(whole_cache, seqs[0].state, fork.state);
    }
    fork.tokens.back() = (fork.tokens.back() + 1) % n_vocab;  // (another choice than its parent's)
    seqs.push_back(fork);
    EXPECT_EQ(rank_of(5), rank_of(0)) << c.model << ": the fork's copied first block has another rank";
    from = {seqs[0].tokens.size() - 1, seqs[5].tokens.size() - 1};
    step({0, 5}, from, false, "a fork beside its parent");
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.model << ": " << e.what();
  }
  dist::release_workers(*comms[0]);
  for (std::thread& t : workers) t.join();
  const int64_t sent = comms[1]->bytes_sent();
  if (!c.experts) {
    EXPECT_EQ(sent, predicted) << c.model;
  } else {
    // At least each of its tokens' inputs once to another rank in every MoE layer (a record
    // holds the input and the choice), or (one token) its final row and margin.
    EXPECT_GT(sent, predicted) << c.model;
  }
  EXPECT_GT(rank1_tokens, 0) << c.model << ": rank 1 ran no tokens";
  std::printf("[ dp%s ] %-28s %d ranks: %d logit rows, the same bits as one process; rank 1 ran "
              "%lld tokens, sent %lld bytes%s\n",
              c.experts ? "+ep" : "   ", c.model.c_str(), c.ranks, compared,
              static_cast<long long>(rank1_tokens), static_cast<long long>(sent),
              c.experts ? "" : ", as predicted");
}

INSTANTIATE_TEST_SUITE_P(
    Golden, DataParallelTest,
    ::testing::Values(Case{"llama3-seed7.Q8_0.gguf", 2}, Case{"qwen2-seed7.Q4_K_M.gguf", 3},
                      Case{"gemma2-seed7.F16.gguf", 2}, Case{"gemma3-seed7.Q8_0.gguf", 2},
                      Case{"gemma4-seed7.Q8_0.gguf", 2}, Case{"phi3-seed7.Q8_0.gguf", 2},
                      Case{"qwen35-seed7.Q8_0.gguf", 2}, Case{"deepseek2-seed7.Q8_0.gguf", 2},
                      Case{"qwen3moe-seed7.Q8_0.gguf", 2},
                      // Experts spread, tokens sent to them: every MoE family.
                      Case{"qwen3moe-seed7.Q8_0.gguf", 2, true},
                      Case{"qwen3moe-seed7.F16.gguf", 3, true},
                      Case{"qwen3moe-seed7.Q8_0.gguf", 4, true},  // (a rank without sequences)
                      Case{"llama3-seed7.Q8_0.gguf", 4},
                      Case{"qwen2moe-seed7.Q8_0.gguf", 2, true},
                      Case{"mixtral-seed7.Q4_K_M.gguf", 2, true},
                      Case{"gpt-oss-seed7.MXFP4_MOE.gguf", 2, true},
                      Case{"glm4moe-seed7.Q8_0.gguf", 2, true},
                      Case{"deepseek2-seed7.Q8_0.gguf", 2, true},
                      Case{"qwen35moe-seed7.Q8_0.gguf", 2, true},
                      Case{"gemma4moe-seed7.Q8_0.gguf", 2, true},
                      Case{"qwen3next-seed7.Q8_0.gguf", 2, true}),
    [](const auto& info) {
      return param_test_name(info.param.model) + "_" + std::to_string(info.param.ranks) +
             "_ranks" + (info.param.experts ? "_experts" : "");
    });

}  // namespace
}  // namespace inferd::testing
