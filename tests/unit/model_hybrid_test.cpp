// The hybrid decoder (model/gated_delta_net.h) on a tiny random qwen35 model: a sequence's
// next-token distribution does not depend on how its tokens are split into steps or batched
// with others, its state starts from zero at position 0 and carries what came before, the
// recurrent layers take no KV memory, multi-token-prediction blocks are kept without changing
// the trunk, and what the block does not implement stops the load by name. Agreement with
// llama.cpp is tests/model/architectures_test.cpp's.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf_writer.h"
#include "model/registry.h"
#include "tiny_hybrid.h"
#include "tiny_runner.h"
#include "util/error.h"

namespace inferd::model {
namespace {

using testing::expect_load_error;
using testing::make_tiny_hybrid;
using testing::Runner;
using testing::TinyHybridSpec;

std::vector<int32_t> walk(int n, int offset = 0) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(3 + (i * 7 + offset) % 41);
  return out;
}

// The largest difference of two logit rows over the spread of the first.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double mean = 0, var = 0, diff = 0;
  for (float x : a) mean += x;
  mean /= double(a.size());
  for (float x : a) var += (x - mean) * (x - mean);
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
  return diff / std::sqrt(var / double(a.size()));
}

class HybridModelTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TinyHybridSpec spec;
    spec.matrix_type = GetParam();
    bytes_ = make_tiny_hybrid(spec);
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes_));
    model_ = load_model(*file_, {64, 512});
  }
  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<Model> model_;
};

TEST_P(HybridModelTest, ChunkedPrefillOneShotAndTokenByTokenAgree) {
  Runner runner(*model_, 256);  // blocks of 4; each run takes its own
  const std::vector<int32_t> tokens = walk(150);  // past a 64-token chunk twice
  const std::vector<float> whole = runner.run(tokens, 64);
  for (const int64_t chunk : {1, 5, 63}) {
    EXPECT_LT(relative_difference(whole, runner.run(tokens, chunk)), 1e-4) << "chunks of " << chunk;
  }
}

TEST_P(HybridModelTest, TheStateCarriesWhatCameBefore) {
  Runner runner(*model_, 64);
  std::vector<int32_t> a = walk(40), b = a;
  b[2] = a[2] == 5 ? 6 : 5;  // one early token differs: only the state can carry it to the end
  EXPECT_GT(relative_difference(runner.run(a, 40), runner.run(b, 40)), 1e-3);
}

TEST_P(HybridModelTest, RecurrentLayersTakeNoKvMemory) {
  const kv::KvCacheConfig config = model_->kv_config(8, 4, DType::F16, DType::F16, 3);
  kv::KvCache cache(config);
  ASSERT_EQ(cache.groups().size(), 1u);
  EXPECT_EQ(cache.groups()[0].n_layers, 1);  // layer 3 of 4
  EXPECT_EQ(cache.group_of(0), -1);
  EXPECT_EQ(cache.group_of(3), 0);
  // Three recurrent layers: conv history [3, 2*32 + 64] and 4 value heads of 16 x 16 each.
  EXPECT_EQ(config.state_floats, 3 * (3 * 128 + 4 * 16 * 16));
  EXPECT_EQ(config.num_state_slots, 3);
  EXPECT_EQ(cache.state_bytes(), 3 * config.state_floats * 4);
}

// Several sequences in one batch, each given as one or two entries (two: its tokens split, the
// later ones first in the batch), against each sequence alone.
TEST_P(HybridModelTest, SequencesInOneBatchGetTheirOwnLogits) {
  const std::vector<std::vector<int32_t>> prompts = {walk(23, 1), walk(9, 2), walk(31, 3)};
  std::vector<std::vector<float>> alone;
  {
    Runner runner(*model_, 64);
    for (const auto& p : prompts) alone.push_back(runner.run(p, 64));
  }
  kv::KvCache cache(model_->kv_config(64, 4, DType::F16, DType::F16, 3));
  ThreadPool pool(2);
  std::vector<kv::BlockTables> tables;
  std::vector<int32_t> slots;
  for (const auto& p : prompts) {
    tables.push_back(cache.allocate_sequence(std::ssize(p)));
    slots.push_back(cache.allocate_state());
  }
  // Batch layout: seq 0 whole; seq 2's second half; seq 1 whole; seq 2's first half.
  std::vector<int32_t> tokens, positions, rows;
  std::vector<BatchSequence> seqs;
  const auto add = [&](size_t s, int64_t begin, int64_t end) {
    const auto t0 = std::ssize(tokens);
    for (int64_t i = begin; i < end; ++i) {
      tokens.push_back(prompts[s][size_t(i)]);
      positions.push_back(static_cast<int32_t>(i));
    }
    seqs.push_back({t0, std::ssize(tokens), &tables[s], slots[s]});
  };
  add(0, 0, 23);
  add(2, 12, 31);
  add(1, 0, 9);
  add(2, 0, 12);
  rows = {22, 50, 41};  // the last tokens of seq 0 (index 22), seq 1 (50) and seq 2 (41)
  std::vector<float> logits(3 * size_t(model_->config().n_vocab));
  Batch batch{tokens, positions, seqs, rows};
  model_->forward(batch, cache, logits.data(), pool);
  const auto n_vocab = static_cast<size_t>(model_->config().n_vocab);
  const size_t order[3] = {0, 1, 2};
  for (size_t r = 0; r < 3; ++r) {
    const std::vector<float> row(logits.begin() + long(r * n_vocab),
                                 logits.begin() + long((r + 1) * n_vocab));
    EXPECT_LT(relative_difference(alone[order[r]], row), 1e-5) << "sequence " << r;
  }
}

TEST_P(HybridModelTest, PositionZeroStartsFromAZeroStateInAUsedSlot) {
  kv::KvCache cache(model_->kv_config(64, 4, DType::F16, DType::F16, 1));
  ThreadPool pool(2);
  const int32_t slot = cache.allocate_state();
  const auto run = [&](const std::vector<int32_t>& p) {
    const kv::BlockTables tables = cache.allocate_sequence(std::ssize(p));
    std::vector<int32_t> positions(p.size());
    std::iota(positions.begin(), positions.end(), 0);
    const BatchSequence seq{0, std::ssize(p), &tables, slot};
    const std::vector<int32_t> rows{static_cast<int32_t>(p.size() - 1)};
    std::vector<float> logits(size_t(model_->config().n_vocab));
    model_->forward({p, positions, {&seq, 1}, rows}, cache, logits.data(), pool);
    kv::BlockTables release = tables;
    cache.release(release);
    return logits;
  };
  const std::vector<float> first = run(walk(20, 4));
  run(walk(33, 9));  // leaves another sequence's state in the slot
  EXPECT_EQ(run(walk(20, 4)), first);
}

TEST_P(HybridModelTest, ABatchWithoutAStateSlotIsAnError) {
  kv::KvCache cache(model_->kv_config(16, 4, DType::F16, DType::F16, 1));
  ThreadPool pool(2);
  const kv::BlockTables tables = cache.allocate_sequence(4);
  const std::vector<int32_t> tokens = walk(4), positions = {0, 1, 2, 3}, rows = {3};
  const BatchSequence seq{0, 4, &tables};  // no slot
  std::vector<float> logits(size_t(model_->config().n_vocab));
  EXPECT_THROW(model_->forward({tokens, positions, {&seq, 1}, rows}, cache, logits.data(), pool),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Types, HybridModelTest, ::testing::Values(DType::F32, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(HybridModel, MultiTokenPredictionBlocksAreKeptAndTheTrunkUnchanged) {
  TinyHybridSpec spec;
  const std::vector<uint8_t> plain = make_tiny_hybrid(spec);
  spec.nextn_layers = 1;  // drawn after the trunk's tensors: the trunk's weights are the same
  const std::vector<uint8_t> with_mtp = make_tiny_hybrid(spec);
  const auto a_file = gguf::GgufFile::parse(plain), b_file = gguf::GgufFile::parse(with_mtp);
  auto a = load_model(a_file, {64, 512}), b = load_model(b_file, {64, 512});
  EXPECT_EQ(b->config().n_layers, 4);
  EXPECT_EQ(b->config().n_nextn_layers, 1);
  Runner ra(*a, 32), rb(*b, 32);
  EXPECT_EQ(ra.run(walk(30), 16), rb.run(walk(30), 16));
}

// A copy of the tiny model with one key set (0: as it is), one tensor added, one left out.
std::vector<uint8_t> variant(const std::string& key, uint32_t value, const std::string& add_tensor,
                             const std::string& drop_tensor) {
  const std::vector<uint8_t> bytes = make_tiny_hybrid({});
  const auto file = gguf::GgufFile::parse(bytes);
  gguf::GgufWriter w = testing::copy_of(
      file, [&](const std::string& name) { return name == key || name == drop_tensor; });
  if (!key.empty()) w.set_u32(key, value);
  if (!add_tensor.empty())
    w.add_tensor(add_tensor, DType::F32, {64, 256}, std::vector<uint8_t>(64 * 256 * 4, 0));
  return w.build();
}

TEST(HybridModel, WhatIsNotImplementedStopsTheLoadByName) {
  expect_load_error(variant("qwen35.ssm.inner_size", 96, "", ""), "ssm.inner_size");
  expect_load_error(variant("qwen35.ssm.time_step_rank", 3, "", ""), "ssm.time_step_rank");
  expect_load_error(variant("qwen35.ssm.state_size", 2000, "", ""), "ssm.state_size");
  expect_load_error(variant("", 0, "blk.0.ssm_in.weight", ""), "ssm_in");
  expect_load_error(variant("", 0, "", "blk.1.ssm_alpha.weight"), "blk.1.ssm_alpha.weight");
  expect_load_error(variant("", 0, "", "blk.3.attn_q_norm.weight"), "blk.3.attn_q_norm.weight");
  expect_load_error(variant("qwen35.full_attention_interval", 1, "", ""), "attn_q.weight");
}

}  // namespace
}  // namespace inferd::model
