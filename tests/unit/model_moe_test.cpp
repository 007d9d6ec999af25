// The mixture-of-experts block (model/moe.h): its routing and expert sums against a plain
// double-precision reference for every gating function and option an architecture can switch
// on; and, through whole tiny models, that a batch gives the same logits in any split, that
// Mixtral's per-expert tensors equal the merged ones, that identical experts reduce to the dense
// feed-forward, and that keys and tensors the block does not implement stop the load by name.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench_roofline.h"
#include "gguf/gguf_writer.h"
#include "kernels/ref/quant_ref.h"
#include "model/moe.h"
#include "model/registry.h"
#include "random_data.h"
#include "tiny_model.h"
#include "tiny_runner.h"
#include "util/error.h"

namespace inferd::model {
namespace {

using testing::copy_of;
using testing::expect_load_error;

// An F32 matrix that owns its values; `w` views them (no packed layout: the row path).
struct F32Matrix {
  std::vector<float> v;
  kernels::WeightMatrix w;
  F32Matrix(int64_t rows, int64_t cols, uint32_t seed, float scale)
      : v(testing::random_floats(rows * cols, seed, scale)) {
    w = {DType::F32, rows, cols, static_cast<size_t>(cols) * 4,
         reinterpret_cast<const uint8_t*>(v.data()), nullptr};
  }
  double dot(int64_t r, const std::vector<double>& x) const {
    double s = 0;
    for (int64_t i = 0; i < w.cols; ++i) s += double(v[static_cast<size_t>(r * w.cols + i)]) * x[static_cast<size_t>(i)];
    return s;
  }
};

struct Options {
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize = false;
  float scale = 1.0f;
  ExpertActivation activation = ExpertActivation::kSilu;
  bool biases = false, selection_bias = false, shared = false;
  bool shared_ungated = false;  // the shared expert added without its sigmoid gate (GLM-4.5)
  int groups = 1, groups_used = 0;  // expert groups (DeepSeek-V3): groups of E / groups experts
};

// A hand-built layer of E experts of F, hidden D, with the reference computation beside it.
struct Fixture {
  static constexpr int D = 64, F = 48, E = 6, K = 2, S = 40;
  Options o;
  MoeConfig config;
  F32Matrix router{E, D, 1, 0.6f};
  std::vector<F32Matrix> gate, up, down;
  F32Matrix shared_gate{S, D, 70, 0.2f}, shared_up{S, D, 71, 0.2f}, shared_down{D, S, 72, 0.2f},
      shared_gate_inp{1, D, 73, 0.3f};
  std::vector<float> router_bias = testing::random_floats(E, 80, 0.5f);
  std::vector<float> selection_bias = testing::random_floats(E, 81, 0.8f);
  std::vector<float> gate_bias = testing::random_floats(E * F, 82, 0.3f);
  std::vector<float> up_bias = testing::random_floats(E * F, 83, 0.3f);
  std::vector<float> down_bias = testing::random_floats(E * D, 84, 0.3f);
  MoeLayer layer;

  explicit Fixture(Options options) : o(options) {
    config.n_experts = E;
    config.n_used = K;
    config.n_ff_expert = F;
    config.n_ff_shared = o.shared ? S : 0;
    config.shared_gated = !o.shared_ungated;
    config.gating = o.gating;
    config.normalize_weights = o.normalize;
    config.weights_scale = o.scale;
    config.activation = o.activation;
    config.n_groups = o.groups;
    config.n_groups_used = o.groups_used;
    for (int e = 0; e < E; ++e) {
      gate.emplace_back(F, D, 10 + e, 0.2f);
      up.emplace_back(F, D, 20 + e, 0.2f);
      down.emplace_back(D, F, 30 + e, 0.2f);
    }
    layer.router = router.w;
    for (int e = 0; e < E; ++e) {
      layer.gate.push_back(gate[static_cast<size_t>(e)].w);
      layer.up.push_back(up[static_cast<size_t>(e)].w);
      layer.down.push_back(down[static_cast<size_t>(e)].w);
    }
    if (o.biases) {
      layer.router_bias = router_bias.data();
      layer.gate_bias = gate_bias.data();
      layer.up_bias = up_bias.data();
      layer.down_bias = down_bias.data();
    }
    if (o.selection_bias) layer.selection_bias = selection_bias.data();
    if (o.shared) {
      layer.shared_gate = shared_gate.w;
      layer.shared_up = shared_up.w;
      layer.shared_down = shared_down.w;
      if (!o.shared_ungated) layer.shared_gate_inp = shared_gate_inp.w;
    }
  }

  static double silu(double x) { return x / (1 + std::exp(-x)); }

  // The block's output for one token, in double.
  std::vector<double> reference(const float* h) const {
    const std::vector<double> x(h, h + D);
    std::vector<double> logit(E), prob(E), score(E);
    for (int e = 0; e < E; ++e) logit[e] = router.dot(e, x) + (o.biases ? router_bias[e] : 0);
    if (o.gating == ExpertGating::kSoftmax) {
      const double m = *std::max_element(logit.begin(), logit.end());
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += prob[e] = std::exp(logit[e] - m);
      for (double& p : prob) p /= sum;
    } else if (o.gating == ExpertGating::kSigmoid) {
      for (int e = 0; e < E; ++e) prob[e] = 1 / (1 + std::exp(-logit[e]));
    } else {
      prob = logit;
    }
    for (int e = 0; e < E; ++e) score[e] = prob[e] + (o.selection_bias ? selection_bias[e] : 0);
    if (o.groups > 1) {  // keep the groups_used groups whose two best scores sum highest
      const int per_group = E / o.groups;
      std::vector<double> group_score(o.groups);
      for (int g = 0; g < o.groups; ++g) {
        std::vector<double> members(score.begin() + g * per_group, score.begin() + (g + 1) * per_group);
        std::sort(members.rbegin(), members.rend());
        group_score[g] = members[0] + (per_group > 1 ? members[1] : 0);
      }
      std::vector<int> groups(o.groups);
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(),
                       [&](int a, int b) { return group_score[a] > group_score[b]; });
      for (int i = o.groups_used; i < o.groups; ++i)
        for (int e = groups[i] * per_group; e < (groups[i] + 1) * per_group; ++e) score[e] = -1e300;
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
    std::vector<double> wt(K);
    for (int k = 0; k < K; ++k) wt[k] = prob[order[k]];
    if (o.gating == ExpertGating::kSoftmaxWeight) {
      const double m = *std::max_element(wt.begin(), wt.end());
      double sum = 0;
      for (double& w : wt) sum += w = std::exp(w - m);
      for (double& w : wt) w /= sum;
    }
    if (o.normalize) {
      const double sum = std::accumulate(wt.begin(), wt.end(), 0.0);
      for (double& w : wt) w /= sum;
    }
    for (double& w : wt) w *= o.scale;
    std::vector<double> out(D, 0.0);
    for (int k = 0; k < K; ++k) {
      const auto e = static_cast<size_t>(order[k]);
      std::vector<double> act(F);
      for (int i = 0; i < F; ++i) {
        double g = gate[e].dot(i, x) + (o.biases ? gate_bias[e * F + i] : 0);
        double u = up[e].dot(i, x) + (o.biases ? up_bias[e * F + i] : 0);
        if (o.activation == ExpertActivation::kSwigluOai) {
          g = std::min(g, 7.0);
          u = std::clamp(u, -7.0, 7.0);
          act[i] = g / (1 + std::exp(-1.702 * g)) * (u + 1);
        } else {
          act[i] = silu(g) * u;
        }
      }
      for (int j = 0; j < D; ++j)
        out[j] += wt[k] * (down[e].dot(j, act) + (o.biases ? down_bias[e * D + j] : 0));
    }
    if (o.shared) {
      std::vector<double> act(S);
      for (int i = 0; i < S; ++i) act[i] = silu(shared_gate.dot(i, x)) * shared_up.dot(i, x);
      const double g = o.shared_ungated ? 1.0 : 1 / (1 + std::exp(-shared_gate_inp.dot(0, x)));
      for (int j = 0; j < D; ++j) out[j] += g * shared_down.dot(j, act);
    }
    return out;
  }
};

void expect_block_matches_reference(const Options& options, const char* what) {
  Fixture f(options);
  constexpr int64_t T = 37;
  const auto h = testing::random_floats(T * Fixture::D, 5);
  ThreadPool pool(2);
  MoeBlock block(f.config, Fixture::D, 16);  // 37 tokens in chunks of 16
  std::vector<float> out(T * Fixture::D, 99.0f);
  block.forward(f.layer, h.data(), T, out.data(), pool);
  double max_diff = 0, max_abs = 0;
  for (int64_t t = 0; t < T; ++t) {
    const auto want = f.reference(&h[static_cast<size_t>(t * Fixture::D)]);
    for (int j = 0; j < Fixture::D; ++j) {
      max_diff = std::max(max_diff, std::fabs(want[j] - out[static_cast<size_t>(t * Fixture::D + j)]));
      max_abs = std::max(max_abs, std::fabs(want[j]));
    }
  }
  EXPECT_GT(max_abs, 0.05) << what;  // the block computes something
  EXPECT_LT(max_diff, 1e-4 * std::max(1.0, max_abs)) << what;
  // One token alone gets the same output as inside the batch (decode takes the no-gather path).
  std::vector<float> one(Fixture::D);
  block.forward(f.layer, &h[5 * Fixture::D], 1, one.data(), pool);
  for (int j = 0; j < Fixture::D; ++j) EXPECT_EQ(one[static_cast<size_t>(j)], out[static_cast<size_t>(5 * Fixture::D + j)]) << what;
}

TEST(MoeBlock, SoftmaxTopKRenormalised) {  // Mixtral, Qwen3-MoE
  expect_block_matches_reference({.normalize = true}, "softmax, normalized");
}

TEST(MoeBlock, SoftmaxWithSharedExpert) {  // Qwen2-MoE
  expect_block_matches_reference({.shared = true}, "softmax, shared expert");
}

TEST(MoeBlock, SoftmaxOfTheChosenWithBiasesAndClampedSwiglu) {  // gpt-oss
  expect_block_matches_reference({.gating = ExpertGating::kSoftmaxWeight, .activation = ExpertActivation::kSwigluOai, .biases = true},
                                 "softmax weight, biases, swiglu oai");
}

TEST(MoeBlock, SigmoidWithSelectionBiasAndScale) {  // DeepSeek-V3-style routing
  expect_block_matches_reference({.gating = ExpertGating::kSigmoid, .normalize = true, .scale = 2.5f, .selection_bias = true},
                                 "sigmoid, selection bias, scale");
}

// Expert groups (DeepSeek-V3): 3 groups of 2, the best 2 kept; the groups change some tokens'
// choice (against the same layer without them).
TEST(MoeBlock, SigmoidWithExpertGroups) {
  const Options grouped{.gating = ExpertGating::kSigmoid, .normalize = true, .scale = 2.5f,
                        .selection_bias = true, .shared = true, .shared_ungated = true,
                        .groups = 3, .groups_used = 2};
  expect_block_matches_reference(grouped, "sigmoid, expert groups");
  Options plain = grouped;
  plain.groups = 1;
  plain.groups_used = 0;
  const Fixture with(grouped), without(plain);
  const auto h = testing::random_floats(37 * Fixture::D, 5);
  int changed = 0;
  for (int t = 0; t < 37; ++t)
    changed += with.reference(&h[static_cast<size_t>(t * Fixture::D)]) !=
               without.reference(&h[static_cast<size_t>(t * Fixture::D)]);
  EXPECT_GT(changed, 0);
}

TEST(MoeBlock, SigmoidWithUngatedSharedExpert) {  // GLM-4.5
  expect_block_matches_reference({.gating = ExpertGating::kSigmoid, .normalize = true, .scale = 2.5f,
                                  .selection_bias = true, .shared = true, .shared_ungated = true},
                                 "sigmoid, selection bias, ungated shared expert");
}

// --- whole tiny models (the llama architecture with experts: Mixtral) ---

// The logits after `tokens` fed in chunks, from an empty cache of its own.
std::vector<float> run_logits(Model& model, const std::vector<int32_t>& tokens, int64_t chunk) {
  testing::Runner runner(model, 64);
  return runner.run(tokens, chunk);
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back((i * 29 + 7) % 96);
  return out;
}

testing::TinyLlamaSpec mixtral_spec(DType type) {
  testing::TinyLlamaSpec s;
  s.matrix_type = type;
  s.n_experts = 8;
  s.n_experts_used = 2;
  return s;
}

TEST(MoeModel, AnySplitOfTheBatchGivesTheSameLogits) {
  for (const DType type : {DType::F32, DType::Q8_0, DType::F16}) {
    const auto bytes = testing::make_tiny_llama(mixtral_spec(type));
    auto file = gguf::GgufFile::parse(bytes);
    auto model = load_model(file, {64, 256});
    const auto tokens = some_tokens(27);
    const auto whole = run_logits(*model, tokens, 27);
    for (const int64_t chunk : {1, 4, 13}) {
      const auto part = run_logits(*model, tokens, chunk);
      for (size_t i = 0; i < whole.size(); ++i)
        ASSERT_NEAR(part[i], whole[i], 1e-4f) << dtype_name(type) << " chunk " << chunk;
    }
  }
}

TEST(MoeModel, PerExpertTensorsEqualMergedOnes) {
  auto spec = mixtral_spec(DType::Q8_0);
  const auto merged_bytes = testing::make_tiny_llama(spec);
  spec.per_expert_tensors = true;
  const auto split_bytes = testing::make_tiny_llama(spec);
  auto merged_file = gguf::GgufFile::parse(merged_bytes), split_file = gguf::GgufFile::parse(split_bytes);
  auto merged = load_model(merged_file, {64, 256}), split = load_model(split_file, {64, 256});
  const auto tokens = some_tokens(9);
  EXPECT_EQ(run_logits(*merged, tokens, 9), run_logits(*split, tokens, 9));
}

// With every expert the same and the top two renormalised to sum to 1, the block is the dense
// feed-forward of those weights: the expert plumbing (gather, grouped products, weighted sum)
// must add nothing of its own.
TEST(MoeModel, IdenticalExpertsEqualTheDenseFeedForward) {
  auto spec = mixtral_spec(DType::F32);
  spec.identical_experts = true;
  const auto moe_bytes = testing::make_tiny_llama(spec);
  auto moe_file = gguf::GgufFile::parse(moe_bytes);
  auto moe = load_model(moe_file, {64, 256});
  // The dense twin: the same tensors with expert 0's matrices as ffn_{gate,up,down}.weight.
  gguf::GgufWriter w = copy_of(moe_file, [](const std::string& name) {
    return name.find("expert") != std::string::npos || name.find("ffn_gate_inp") != std::string::npos ||
           name.find("_exps") != std::string::npos;
  });
  for (const gguf::TensorInfo& t : moe_file.tensors()) {
    const size_t pos = t.name.find("_exps");
    if (pos == std::string::npos) continue;
    const size_t one = t.num_bytes / t.shape[2];
    w.add_tensor(t.name.substr(0, pos) + t.name.substr(pos + 5), t.type, {t.shape[0], t.shape[1]},
                 std::vector<uint8_t>(t.data, t.data + one));
  }
  const auto dense_bytes = w.build();
  auto dense_file = gguf::GgufFile::parse(dense_bytes);
  auto dense = load_model(dense_file, {64, 256});
  const auto tokens = some_tokens(11);
  const auto a = run_logits(*moe, tokens, 11), b = run_logits(*dense, tokens, 11);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << "logit " << i;
}

// Re-encodes a file with one more metadata key.
std::vector<uint8_t> with_key(const std::vector<uint8_t>& bytes, const std::string& key, uint32_t value) {
  auto file = gguf::GgufFile::parse(bytes);
  gguf::GgufWriter w = copy_of(file, [&](const std::string& name) { return name == key; });
  w.set_u32(key, value);
  return w.build();
}

TEST(MoeModel, UnimplementedKeysAndMissingTensorsAreNamed) {
  const auto bytes = testing::make_tiny_llama(mixtral_spec(DType::F32));
  expect_load_error(with_key(bytes, "llama.expert_group_count", 4), "llama.expert_group_count");
  expect_load_error(with_key(bytes, "llama.swiglu_clamp_exp", 7), "llama.swiglu_clamp_exp");
  expect_load_error(with_key(bytes, "llama.expert_shared_count", 1), "llama.expert_shared_count");
  expect_load_error(with_key(bytes, "llama.expert_gating_func", 4), "llama.expert_gating_func");
  expect_load_error(with_key(bytes, "llama.expert_used_count", 9), "llama.expert_used_count");
  // A neutral value of a refused key is accepted (converters write expert_group_count = 1).
  auto file_bytes = with_key(bytes, "llama.expert_group_count", 1);
  auto file = gguf::GgufFile::parse(file_bytes);
  EXPECT_NO_THROW(load_model(file, {}));
  // A file without its experts: the missing tensor is named.
  auto spec = mixtral_spec(DType::F32);
  spec.per_expert_tensors = true;
  const auto split = testing::make_tiny_llama(spec);
  auto split_file = gguf::GgufFile::parse(split);
  const auto without = [](const std::string& name) { return name == "blk.1.ffn_up.5.weight"; };
  expect_load_error(copy_of(split_file, without).build(), "blk.1.ffn_up.5.weight");
}

// inferd bench's roofline counts what a decode token reads: of the routed experts only its
// expert_used_count of expert_count, merged or per-expert tensors alike; routers in full.
TEST(MoeModel, DecodeBytesCountOnlyTheActiveExperts) {
  auto spec = mixtral_spec(DType::Q8_0);  // 8 experts, 2 used
  for (const bool per_expert : {false, true}) {
    spec.per_expert_tensors = per_expert;
    const auto bytes = testing::make_tiny_llama(spec);
    auto file = gguf::GgufFile::parse(bytes);
    uint64_t experts = 0, other_matrices = 0;
    for (const gguf::TensorInfo& t : file.tensors()) {
      const bool expert = t.name.find("_exps") != std::string::npos ||
                          (t.name.find(".ffn_") != std::string::npos && t.name.find("ffn_norm") == std::string::npos &&
                           t.name.find("ffn_gate_inp") == std::string::npos);
      if (expert) experts += t.num_bytes;
      else if (t.shape.size() == 2) other_matrices += t.num_bytes;  // tied: the embedding is the output
    }
    const app::ModelFootprint f = app::model_footprint(file);
    EXPECT_EQ(f.matmul_bytes, other_matrices + experts / 4) << (per_expert ? "per-expert" : "merged");
  }
}

}  // namespace
}  // namespace inferd::model
