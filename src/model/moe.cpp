#include "model/moe.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "util/error.h"

namespace inferd::model {
namespace {

// Experts a layer may have: the routing of one token keeps a score per expert on the stack.
constexpr int kMaxExperts = 512;
// Tokens the MoE buffers hold at once: longer batches run in chunks of this many, each reading
// the experts it touches once. At 512 a 30B-A3B model's buffers take ~100 MB, and a 512-token
// prompt step reads each expert once per layer.
constexpr int64_t kMaxChunkTokens = 512;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// A per-layer key (a scalar, or an array with one value per layer): its one value; arrays
// whose values differ are refused (per-layer expert shapes are not implemented).
std::optional<int64_t> uniform_int(const gguf::GgufFile& file, const std::string& key) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return std::nullopt;
  if (const gguf::Array* values = value->as_array()) {
    std::optional<int64_t> first;
    for (const gguf::Value& v : values->items) {
      const std::optional<int64_t> x = v.as_int();
      if (!x) fail("{}: '{}' holds a value that is not an integer", file.name(), key);
      if (first && *first != *x)
        fail("{}: '{}' differs between layers ({} and {}): per-layer values are not supported",
             file.name(), key, *first, *x);
      first = x;
    }
    return first;
  }
  return value->as_int();
}

// Refuses a key whose presence (with a value that is not `neutral`) changes the computation.
void refuse_unless(const gguf::GgufFile& file, const std::string& key, double neutral,
                   const char* what) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return;
  bool is_neutral = true;
  if (const gguf::Array* values = v->as_array()) {
    for (const gguf::Value& item : values->items)
      is_neutral = is_neutral && item.as_float().value_or(neutral + 1) == neutral;
  } else {
    is_neutral = v->as_float().value_or(neutral + 1) == neutral;
  }
  if (!is_neutral)
    fail("{}: '{}' = {} ({}) is not supported", file.name(), key, v->to_string(), what);
}

int checked_count(const gguf::GgufFile& file, const std::string& key, int64_t v, int64_t max) {
  if (v <= 0 || v > max) fail("{}: '{}' = {} is out of range (1..{})", file.name(), key, v, max);
  return static_cast<int>(v);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// softmax of x[0..n) in place, as ggml computes it (max subtracted, the sum in double).
void softmax(float* x, int n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

// MoeSpec::expert_groups: `expert_group_count` (0 or 1: none) and `expert_group_used_count`,
// with llama.cpp's checks (the groups divide the experts; some but not all are used).
void read_expert_groups(const gguf::GgufFile& file, const std::string& a, MoeConfig& c) {
  const int64_t groups = file.get_int(a + "expert_group_count").value_or(0);
  const int64_t used = file.get_int(a + "expert_group_used_count").value_or(0);
  if (groups <= 1) return;
  if (groups >= c.n_experts || c.n_experts % groups != 0)
    fail("{}: '{}' = {} does not divide the {} experts into groups", file.name(),
         a + "expert_group_count", groups, c.n_experts);
  if (used <= 0 || used >= groups)
    fail("{}: '{}' = {} is out of range (1..{})", file.name(), a + "expert_group_used_count", used,
         groups - 1);
  if (c.n_used > used * (c.n_experts / groups))
    fail("{}: {} experts a token cannot come from {} groups of {}", file.name(), c.n_used, used,
         c.n_experts / groups);
  c.n_groups = static_cast<int>(groups);
  c.n_groups_used = static_cast<int>(used);
}

}  // namespace

MoeConfig MoeConfig::from_gguf(const gguf::GgufFile& file, const MoeSpec& spec, int n_ff) {
  const std::string a = file.architecture() + ".";
  MoeConfig c;
  c.n_experts = checked_count(file, a + "expert_count", file.require_int(a + "expert_count"),
                              kMaxExperts);
  const std::optional<int64_t> used = uniform_int(file, a + "expert_used_count");
  if (!used) fail("{}: required key '{}' is missing", file.name(), a + "expert_used_count");
  c.n_used = checked_count(file, a + "expert_used_count", *used, c.n_experts);
  const std::optional<int64_t> ff = uniform_int(file, a + "expert_feed_forward_length");
  c.n_ff_expert = checked_count(file, a + "expert_feed_forward_length",
                                spec.expert_ff_is_ff ? n_ff
                                : ff && *ff > 0      ? *ff
                                                     : n_ff / c.n_used,
                                int64_t{1} << 20);
  if (spec.shared_expert) {
    const int64_t shared = file.get_int(a + "expert_shared_feed_forward_length").value_or(0);
    c.n_ff_shared = checked_count(file, a + "expert_shared_feed_forward_length",
                                  shared > 0 ? shared : n_ff, int64_t{1} << 20);
  } else if (spec.counted_shared_experts) {  // as llama.cpp: count x the routed width, no gate
    const int64_t count = file.get_int(a + "expert_shared_count").value_or(0);
    if (count < 0 || count > 64)
      fail("{}: '{}' = {} is out of range (0..64)", file.name(), a + "expert_shared_count", count);
    c.n_ff_shared = static_cast<int>(count * c.n_ff_expert);
    c.shared_gated = false;
  } else {
    refuse_unless(file, a + "expert_shared_count", 0, "shared experts in this architecture");
    refuse_unless(file, a + "expert_shared_feed_forward_length", 0,
                  "shared experts in this architecture");
  }
  c.leading_dense = static_cast<int>(file.get_int(a + "leading_dense_block_count").value_or(0));
  c.gating = spec.gating;
  if (const std::optional<int64_t> g = file.get_int(a + "expert_gating_func")) {
    if (*g < 1 || *g > 3)
      fail("{}: '{}' = {} is not supported (1 softmax, 2 sigmoid, 3 softmax of the chosen)",
           file.name(), a + "expert_gating_func", *g);
    c.gating = static_cast<ExpertGating>(*g);
  }
  c.normalize_weights =
      file.get_bool(a + "expert_weights_norm").value_or(spec.normalize_weights);
  const double scale = file.get_float(a + "expert_weights_scale").value_or(0.0);
  c.weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  c.activation = spec.activation;
  if (spec.expert_groups) {
    read_expert_groups(file, a, c);
  } else {  // what the MoE block does not implement changes which experts run
    refuse_unless(file, a + "expert_group_count", 1, "grouped expert selection");
    refuse_unless(file, a + "expert_group_used_count", 0, "grouped expert selection");
  }
  refuse_unless(file, a + "swiglu_clamp_exp", 0, "clamped expert SwiGLU");
  refuse_unless(file, a + "swiglu_clamp_shexp", 0, "clamped shared-expert SwiGLU");
  refuse_unless(file, a + "expert_chunk_feed_forward_length", 0, "chunked experts");
  refuse_unless(file, a + "expert_latent_length", 0, "latent experts");
  refuse_unless(file, a + "moe_latent_size", 0, "latent experts");
  refuse_unless(file, a + "experts_per_group", 0, "grouped experts");
  refuse_unless(file, a + "expert_group_scale", 0, "grouped experts");
  refuse_unless(file, a + "moe_every_n_layers", 0, "interleaved dense and MoE layers");
  return c;
}

MoeLayer load_moe_layer(const WeightLoader& w, const std::string& p, const MoeConfig& c,
                        const MoeSpec& spec, int n_embd) {
  MoeLayer m;
  const int64_t E = c.n_experts, F = c.n_ff_expert;
  const int64_t first = c.expert_begin, last = c.expert_end > 0 ? c.expert_end : E;
  m.router = w.matrix(p + "ffn_gate_inp.weight", E, n_embd);
  m.selection_bias = w.optional_vector(p + "exp_probs_b.bias", E);
  if (w.has(p + "ffn_gate_up_exps.weight")) {  // per expert: rows [gate; up]
    const std::string name = p + "ffn_gate_up_exps.weight";
    m.gate = w.expert_matrices(name, E, 0, F, 2 * F, n_embd, first, last);
    m.up = w.expert_matrices(name, E, F, F, 2 * F, n_embd, first, last);
    m.down = w.expert_matrices(p + "ffn_down_exps.weight", E, 0, n_embd, n_embd, F, first, last);
  } else if (w.has(p + "ffn_up_exps.weight")) {
    m.gate = w.expert_matrices(p + "ffn_gate_exps.weight", E, 0, F, F, n_embd, first, last);
    m.up = w.expert_matrices(p + "ffn_up_exps.weight", E, 0, F, F, n_embd, first, last);
    m.down = w.expert_matrices(p + "ffn_down_exps.weight", E, 0, n_embd, n_embd, F, first, last);
  } else {  // Mixtral's older files: one 2-D tensor per expert
    m.gate.resize(static_cast<size_t>(E));
    m.up.resize(static_cast<size_t>(E));
    m.down.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const std::string gate = fmt::format("{}ffn_gate.{}.weight", p, e),
                        up = fmt::format("{}ffn_up.{}.weight", p, e),
                        down = fmt::format("{}ffn_down.{}.weight", p, e);
      if (e < first || e >= last) {  // another rank's
        for (const std::string& name : {gate, up, down}) w.skip(name);
        continue;
      }
      m.gate[static_cast<size_t>(e)] = w.matrix(gate, F, n_embd);
      m.up[static_cast<size_t>(e)] = w.matrix(up, F, n_embd);
      m.down[static_cast<size_t>(e)] = w.matrix(down, n_embd, F);
    }
  }
  if (spec.biases) {
    m.router_bias = w.vector(p + "ffn_gate_inp.bias", E);
    m.gate_bias = w.f32_rows(p + "ffn_gate_exps.bias", E, F);
    m.up_bias = w.f32_rows(p + "ffn_up_exps.bias", E, F);
    m.down_bias = w.f32_rows(p + "ffn_down_exps.bias", E, n_embd);
  }
  if (spec.expert_scales) m.expert_scale = w.vector(p + "ffn_down_exps.scale", E);
  if (c.n_ff_shared > 0) {
    m.shared_gate = w.matrix(p + "ffn_gate_shexp.weight", c.n_ff_shared, n_embd);
    m.shared_up = w.matrix(p + "ffn_up_shexp.weight", c.n_ff_shared, n_embd);
    m.shared_down = w.matrix(p + "ffn_down_shexp.weight", n_embd, c.n_ff_shared);
    if (c.shared_gated) m.shared_gate_inp = w.matrix(p + "ffn_gate_inp_shexp.weight", 1, n_embd);
  }
  return m;
}

MoeBlock::MoeBlock(const MoeConfig& config, int n_embd, int64_t max_tokens,
                   dist::Communicator* all_to_all)
    : config_(config),
      n_embd_(n_embd),
      chunk_tokens_(std::min(max_tokens, kMaxChunkTokens)),
      all_to_all_(all_to_all != nullptr && all_to_all->size() > 1 ? all_to_all : nullptr) {
  const auto C = static_cast<size_t>(chunk_tokens_);
  const auto N = C * static_cast<size_t>(config.n_used);
  const auto floats = [&](size_t n) { return memory_.allocate_array<float>(n); };
  const auto ints = [&](size_t n) { return memory_.allocate_array<int32_t>(n); };
  logits_ = floats(C * static_cast<size_t>(config.n_experts));
  selected_ = ints(N);
  weights_ = floats(N);
  row_of_ = ints(N);
  expert_rows_ = ints(static_cast<size_t>(config.n_experts) + 1);
  xs_ = floats(N * static_cast<size_t>(n_embd));
  gate_ = floats(N * static_cast<size_t>(config.n_ff_expert));
  up_ = floats(N * static_cast<size_t>(config.n_ff_expert));
  down_ = floats(N * static_cast<size_t>(n_embd));
  if (config.n_ff_shared > 0) {
    shared_gate_ = floats(C * static_cast<size_t>(config.n_ff_shared));
    shared_up_ = floats(C * static_cast<size_t>(config.n_ff_shared));
    shared_down_ = floats(C * static_cast<size_t>(n_embd));
    if (config.shared_gated) shared_scale_ = floats(C);
  }
  if (all_to_all_ != nullptr) {
    const int ranks = all_to_all_->size();
    if (ranks > 64) fail("expert parallelism over {} ranks: at most 64", ranks);
    const auto T = static_cast<size_t>(max_tokens), R = static_cast<size_t>(ranks);
    const auto K = static_cast<size_t>(config.n_used);
    const size_t record = static_cast<size_t>(n_embd) + 2 * K;
    for (int e = 0; e < config.n_experts; ++e) {
      int r = 0;  // the rank whose [E r / N, E (r + 1) / N) holds e
      while (int64_t{config.n_experts} * (r + 1) / ranks <= e) ++r;
      rank_of_expert_.push_back(r);
    }
    local_selected_ = ints(T * K);
    local_weights_ = floats(T * K);
    sent_to_ = memory_.allocate_array<uint64_t>(T);
    records_out_ = floats(T * R * record);
    records_in_ = floats(T * record);
    // Every slot of a token may lie on one rank: at most T * n_used slot outputs each way.
    slot_out_ = floats(T * K * static_cast<size_t>(n_embd));
    slot_in_ = floats(T * K * static_cast<size_t>(n_embd));
    own_slots_before_ = memory_.allocate_array<int64_t>(T + 1);
    send_counts_.assign(R, 0);
    recv_counts_.assign(R, 0);
    offsets_.assign(R, 0);
  }
  memory_.prefault();
  items_.reserve(2 * static_cast<size_t>(config.n_experts) + 2);
  const int64_t widest = std::max({int64_t{n_embd}, int64_t{config.n_ff_expert},
                                   int64_t{config.n_ff_shared}, int64_t{config.n_experts}});
  // Rows: every slot's, the shared expert's, and padding for each distinct input.
  scratch_.reserve(
      kernels::grouped_scratch_tokens(static_cast<int64_t>(N + C), 2 * int64_t{config.n_experts} + 2),
      widest);
}

void MoeBlock::forward(const MoeLayer& layer, const float* h, int64_t n_tokens, float* out,
                       ThreadPool& pool, float* margins, const float* router_input) {
  if (router_input == nullptr) router_input = h;
  if (all_to_all_ != nullptr)
    return forward_across_ranks(layer, h, router_input, n_tokens, out, pool, margins);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk_tokens_) {
    const int64_t count = std::min(chunk_tokens_, n_tokens - t0);
    run_chunk(layer, h + t0 * n_embd_, router_input + t0 * n_embd_, count, out + t0 * n_embd_,
              pool, margins ? margins + t0 : nullptr);
  }
}

// Router logits -> each token's experts and weights (selected_, weights_), then the slots sorted
// by expert: expert_rows_[e] .. expert_rows_[e + 1] are expert e's rows, row_of_ each slot's.
void MoeBlock::route(const MoeLayer& layer, int64_t n_tokens, float* margins) {
  const MoeConfig& c = config_;
  const int E = c.n_experts, K = c.n_used;
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* logits = &logits_[static_cast<size_t>(t * E)];
    if (layer.router_bias) kernels::add_inplace(logits, layer.router_bias, E);
    // probs: what the weights are taken from; score: what the choice is made on.
    std::array<float, kMaxExperts> score;
    if (c.gating == ExpertGating::kSoftmax) softmax(logits, E);
    if (c.gating == ExpertGating::kSigmoid)
      for (int e = 0; e < E; ++e) logits[e] = sigmoid(logits[e]);
    for (int e = 0; e < E; ++e) {
      const float v = logits[e] + (layer.selection_bias ? layer.selection_bias[e] : 0);
      // A NaN (from an overflowing activation) would break the sort's ordering: it loses.
      score[static_cast<size_t>(e)] = std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
    }
    const float group_margin = c.n_groups > 1 ? mask_groups(logits, score.data()) : kInfinity;
    if (margins != nullptr) margins[t] = std::min(margins[t], group_margin);
    std::array<int32_t, kMaxExperts> order;
    for (int e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    // The first K + 1 in order: the chosen, then the best of the rest (for the margin).
    const int sorted = std::min(K + 1, E);
    std::partial_sort(order.begin(), order.begin() + sorted, order.begin() + E, [&](int32_t x, int32_t y) {
      const float sx = score[static_cast<size_t>(x)], sy = score[static_cast<size_t>(y)];
      return sx > sy || (sx == sy && x < y);
    });
    if (margins != nullptr && K < E) {
      const int32_t a = order[static_cast<size_t>(K - 1)], b = order[static_cast<size_t>(K)];
      const float last = score[static_cast<size_t>(a)], next = score[static_cast<size_t>(b)];
      const bool log_ratio = c.gating == ExpertGating::kSoftmax && layer.selection_bias == nullptr;
      // (The best left out may lie in a group masked out: then no swap of two experts can
      // change the choice, only one of the groups, MoeBlock::mask_groups's margin.)
      float margin = next == -kInfinity ? kInfinity
                     : log_ratio        ? std::log(last) - std::log(next)
                                        : last - next;
      if (c.gating == ExpertGating::kSigmoid) {
        // In logits too: the least change of two logits, one chosen and one not, that swaps
        // them (to first order, their score gap over the steeper of their sigmoids' slopes
        // p (1 - p)); with the selection bias the closest pair need not be the last and next.
        margin = std::numeric_limits<float>::infinity();
        for (int i = 0; i < K; ++i) {
          for (int j = K; j < E; ++j) {
            const int32_t x = order[static_cast<size_t>(i)], y = order[static_cast<size_t>(j)];
            const float slope = std::max(logits[x] * (1 - logits[x]), logits[y] * (1 - logits[y]));
            const float gap = score[static_cast<size_t>(x)] - score[static_cast<size_t>(y)];
            if (slope > 0) margin = std::min(margin, gap / slope);
          }
        }
      }
      margins[t] = std::min(margins[t], margin);
    }
    int32_t* sel = &selected_[static_cast<size_t>(t * K)];
    float* wt = &weights_[static_cast<size_t>(t * K)];
    for (int k = 0; k < K; ++k) {
      sel[k] = order[static_cast<size_t>(k)];
      wt[k] = logits[sel[k]];
    }
    if (c.gating == ExpertGating::kSoftmaxWeight) softmax(wt, K);
    if (c.normalize_weights) {
      float sum = 0;
      for (int k = 0; k < K; ++k) sum += wt[k];
      sum = std::max(sum, 6.103515625e-5f);  // as llama.cpp: the smallest normal fp16
      for (int k = 0; k < K; ++k) wt[k] /= sum;
    }
    if (c.weights_scale != 1.0f)
      for (int k = 0; k < K; ++k) wt[k] *= c.weights_scale;
  }
  place_slots(n_tokens);
}

void MoeBlock::place_slots(int64_t n_tokens) {
  const int E = config_.n_experts, K = config_.n_used;
  std::fill(expert_rows_.begin(), expert_rows_.end(), 0);
  for (int64_t s = 0; s < n_tokens * K; ++s)
    ++expert_rows_[static_cast<size_t>(selected_[static_cast<size_t>(s)]) + 1];
  for (int e = 0; e < E; ++e) expert_rows_[static_cast<size_t>(e) + 1] += expert_rows_[static_cast<size_t>(e)];
  // Each slot's row: experts in order, the tokens of an expert in batch order.
  std::array<int32_t, kMaxExperts> next;
  std::copy_n(expert_rows_.begin(), E, next.begin());
  for (int64_t s = 0; s < n_tokens * K; ++s)
    row_of_[static_cast<size_t>(s)] = next[static_cast<size_t>(selected_[static_cast<size_t>(s)])]++;
}

float MoeBlock::mask_groups(const float* probs, float* score) const {
  const MoeConfig& c = config_;
  const int G = c.n_groups, per_group = c.n_experts / G;
  // A group's score: the sum of its two best selection scores, as llama.cpp ranks them.
  std::array<float, kMaxExperts> group_score;
  for (int g = 0; g < G; ++g) {
    float best = -kInfinity, second = -kInfinity;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      const float v = score[e];
      if (v > best) {
        second = best;
        best = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[static_cast<size_t>(g)] = per_group > 1 ? best + second : best;
  }
  std::array<int32_t, kMaxExperts> order;
  for (int g = 0; g < G; ++g) order[static_cast<size_t>(g)] = g;
  const int U = c.n_groups_used;
  std::partial_sort(order.begin(), order.begin() + U + 1, order.begin() + G, [&](int32_t x, int32_t y) {
    const float sx = group_score[static_cast<size_t>(x)], sy = group_score[static_cast<size_t>(y)];
    return sx > sy || (sx == sy && x < y);
  });
  std::array<bool, kMaxExperts> kept{};
  for (int i = 0; i < U; ++i) kept[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
  for (int e = 0; e < c.n_experts; ++e)
    if (!kept[static_cast<size_t>(e / per_group)]) score[e] = -kInfinity;
  const float gap = group_score[static_cast<size_t>(order[static_cast<size_t>(U - 1)])] -
                    group_score[static_cast<size_t>(order[static_cast<size_t>(U)])];
  if (c.gating != ExpertGating::kSigmoid) return gap;
  // In logits, as the experts' margin: the gap over the steepest slope p (1 - p) of any expert.
  float slope = 0;
  for (int e = 0; e < c.n_experts; ++e) slope = std::max(slope, probs[e] * (1 - probs[e]));
  return slope > 0 ? gap / slope : kInfinity;
}

void MoeBlock::run_chunk(const MoeLayer& layer, const float* h, const float* router_input,
                         int64_t n_tokens, float* out, ThreadPool& pool, float* margins) {
  kernels::matmul(layer.router, router_input, n_tokens, logits_.data(), scratch_, pool);  // [T, E]
  route(layer, n_tokens, margins);
  const bool shared = config_.n_ff_shared > 0;
  expert_products(layer, h, n_embd_, n_tokens, shared, pool);
  if (shared) shared_expert(layer, h, n_tokens, pool);
  sum_slots(layer, n_tokens, out, shared, pool);
}

void MoeBlock::expert_products(const MoeLayer& layer, const float* h, int64_t h_stride,
                               int64_t n_tokens, bool shared, ThreadPool& pool) {
  const MoeConfig& c = config_;
  const int E = c.n_experts, K = c.n_used, F = c.n_ff_expert;
  const int64_t D = n_embd_;
  // A decode step's tokens all go to each expert they chose, in order: one token reads h as
  // it is; otherwise the inputs are gathered expert by expert.
  const bool gather = n_tokens > 1;
  if (gather) {
    for (int64_t s = 0; s < n_tokens * K; ++s)
      std::copy_n(h + (s / K) * h_stride, D, &xs_[static_cast<size_t>(row_of_[static_cast<size_t>(s)] * D)]);
  }
  items_.clear();
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = expert_rows_[static_cast<size_t>(e)], n = expert_rows_[static_cast<size_t>(e) + 1] - r0;
    if (n == 0 || !c.runs_expert(e)) continue;
    const float* x = gather ? &xs_[static_cast<size_t>(r0 * D)] : h;
    items_.push_back({&layer.gate[static_cast<size_t>(e)], x, n, &gate_[static_cast<size_t>(r0 * F)]});
    items_.push_back({&layer.up[static_cast<size_t>(e)], x, n, &up_[static_cast<size_t>(r0 * F)]});
  }
  if (shared) {
    items_.push_back({&layer.shared_gate, h, n_tokens, shared_gate_.data()});
    items_.push_back({&layer.shared_up, h, n_tokens, shared_up_.data()});
  }
  kernels::matmul_grouped(items_, scratch_, pool);
  // Biases and the activation, row by row; rows know their expert through expert_rows_.
  const int64_t rows = n_tokens * K;
  pool.parallel_for(rows, 4, [&](int64_t begin, int64_t end) {
    int e = 0;
    for (int64_t r = begin; r < end; ++r) {
      while (r >= expert_rows_[static_cast<size_t>(e) + 1]) ++e;
      if (!c.runs_expert(e)) continue;  // (another rank's: nothing computed here)
      float* g = &gate_[static_cast<size_t>(r * F)];
      float* u = &up_[static_cast<size_t>(r * F)];
      if (layer.gate_bias) kernels::add_inplace(g, layer.gate_bias + int64_t{e} * F, F);
      if (layer.up_bias) kernels::add_inplace(u, layer.up_bias + int64_t{e} * F, F);
      if (c.activation == ExpertActivation::kSwigluOai) {
        constexpr float kAlpha = 1.702f, kLimit = 7.0f;
        kernels::swiglu_oai(g, u, F, kAlpha, kLimit);
      } else if (c.activation == ExpertActivation::kGeluTanh) {
        kernels::gelu_mul(g, u, F);
      } else {
        kernels::silu_mul(g, u, F);
      }
    }
  });
  items_.clear();
  for (int e = 0; e < E; ++e) {
    const int64_t r0 = expert_rows_[static_cast<size_t>(e)], n = expert_rows_[static_cast<size_t>(e) + 1] - r0;
    if (n > 0 && c.runs_expert(e))
      items_.push_back({&layer.down[static_cast<size_t>(e)], &gate_[static_cast<size_t>(r0 * F)], n,
                        &down_[static_cast<size_t>(r0 * D)]});
  }
  kernels::matmul_grouped(items_, scratch_, pool);
}

void MoeBlock::sum_slots(const MoeLayer& layer, int64_t n_tokens, float* out, bool shared,
                         ThreadPool& pool) {
  const MoeConfig& c = config_;
  const int K = c.n_used;
  const int64_t D = n_embd_;
  // out[t] = sum over its slots, in slot order as llama.cpp adds them, of weight * expert output
  // (expert parallelism: over the slots of this rank's experts; 0 where it runs none of them).
  pool.parallel_for(n_tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = out + t * D;
      int first = 0;  // the first slot whose output lands here: it sets o, the others add
      while (first < K && !c.runs_expert(selected_[static_cast<size_t>(t * K + first)])) ++first;
      if (first == K) std::fill_n(o, D, 0.0f);
      for (int k = first; k < K; ++k) {
        const auto s = static_cast<size_t>(t * K + k);
        if (!c.runs_expert(selected_[s])) continue;
        slot_values(layer, s, [&](int64_t i, float v) { o[i] = k == first ? v : o[i] + v; });
      }
      if (shared) add_shared(t, o);
    }
  });
}

void MoeBlock::weighted_slots(const MoeLayer& layer, int64_t n_tokens, const int64_t* out_first,
                              ThreadPool& pool) {
  const MoeConfig& c = config_;
  const int K = c.n_used;
  const int64_t D = n_embd_;
  pool.parallel_for(n_tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* v = &slot_out_[static_cast<size_t>(out_first[t] * D)];
      for (int k = 0; k < K; ++k) {
        const auto s = static_cast<size_t>(t * K + k);
        if (!c.runs_expert(selected_[s])) continue;
        slot_values(layer, s, [&](int64_t i, float value) { v[i] = value; });
        v += D;
      }
    }
  });
}

// (o: token t's output; the shared expert's of the chunk in shared_down_)
void MoeBlock::add_shared(int64_t t, float* o) const {
  const int64_t D = n_embd_;
  const float* sd = &shared_down_[static_cast<size_t>(t * D)];
  if (config_.shared_gated) {
    const float scale = shared_scale_[static_cast<size_t>(t)];
    for (int64_t i = 0; i < D; ++i) o[i] += sd[i] * scale;
  } else {  // routed + shared, as llama.cpp adds them
    kernels::add_inplace(o, sd, D);
  }
}

void MoeBlock::forward_across_ranks(const MoeLayer& layer, const float* h,
                                    const float* router_input, int64_t n_tokens, float* out,
                                    ThreadPool& pool, float* margins) {
  const MoeConfig& c = config_;
  const int K = c.n_used, ranks = all_to_all_->size();
  const int64_t D = n_embd_, record = D + 2 * int64_t{K};
  const auto R = static_cast<size_t>(ranks);
  // This rank's tokens: their choices, and the ranks each goes to.
  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk_tokens_) {
    const int64_t count = std::min(chunk_tokens_, n_tokens - t0);
    kernels::matmul(layer.router, router_input + t0 * D, count, logits_.data(), scratch_, pool);
    route(layer, count, margins ? margins + t0 : nullptr);
    std::copy_n(selected_.begin(), count * K, local_selected_.begin() + t0 * K);
    std::copy_n(weights_.begin(), count * K, local_weights_.begin() + t0 * K);
  }
  std::fill(offsets_.begin(), offsets_.end(), 0);  // records to each rank
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint64_t to = 0;
    for (int k = 0; k < K; ++k)
      to |= uint64_t{1} << rank_of_expert_[static_cast<size_t>(local_selected_[static_cast<size_t>(t * K + k)])];
    sent_to_[static_cast<size_t>(t)] = to;
    for (size_t r = 0; r < R; ++r) offsets_[r] += (to >> r) & 1;
  }
  for (size_t r = 0; r < R; ++r) send_counts_[r] = offsets_[r] * record;
  // Each rank's records one after the other: offsets_ becomes where the next one goes.
  int64_t at = 0;
  for (size_t r = 0; r < R; ++r) {
    const int64_t n = offsets_[r];
    offsets_[r] = at;
    at += n;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (size_t r = 0; r < R; ++r) {
      if (((sent_to_[static_cast<size_t>(t)] >> r) & 1) == 0) continue;
      float* rec = &records_out_[static_cast<size_t>(offsets_[r]++ * record)];
      std::copy_n(h + t * D, D, rec);
      for (int k = 0; k < K; ++k) {
        rec[D + k] = static_cast<float>(local_selected_[static_cast<size_t>(t * K + k)]);
        rec[D + K + k] = local_weights_[static_cast<size_t>(t * K + k)];
      }
    }
  }
  all_to_all_->alltoallv(records_out_.data(), send_counts_, records_in_.data(), recv_counts_,
                         std::ssize(records_in_));
  // The records received: this rank's experts over them, each of its slots' weighted output.
  int64_t received = 0;
  for (size_t r = 0; r < R; ++r) {
    offsets_[r] = received;  // the first record from rank r
    received += recv_counts_[r] / record;
  }
  int64_t slots_out = 0;  // slot outputs so far, in record order and slot order within each
  for (int64_t i0 = 0; i0 < received; i0 += chunk_tokens_) {
    const int64_t count = std::min(chunk_tokens_, received - i0);
    const float* first = &records_in_[static_cast<size_t>(i0 * record)];
    for (int64_t i = 0; i < count; ++i) {
      own_slots_before_[static_cast<size_t>(i0 + i)] = slots_out;
      for (int k = 0; k < K; ++k) {
        const auto s = static_cast<size_t>(i * K + k);
        const float id = first[i * record + D + k];
        if (!(id >= 0 && id < static_cast<float>(c.n_experts)))
          fail("expert parallelism: a token's expert {} from another rank", id);
        selected_[s] = static_cast<int32_t>(id);
        weights_[s] = first[i * record + D + K + k];
        slots_out += c.runs_expert(selected_[s]) ? 1 : 0;
      }
    }
    place_slots(count);
    expert_products(layer, first, record, count, false, pool);
    weighted_slots(layer, count, &own_slots_before_[static_cast<size_t>(i0)], pool);
  }
  own_slots_before_[static_cast<size_t>(received)] = slots_out;
  // Back to the tokens' ranks, in the order received.
  for (size_t r = 0; r < R; ++r) {
    const int64_t first = offsets_[r], end = first + recv_counts_[r] / record;
    send_counts_[r] = (own_slots_before_[static_cast<size_t>(end)] -
                       own_slots_before_[static_cast<size_t>(first)]) * D;
  }
  // What comes back is known here: each of this rank's tokens' slots from its expert's rank.
  std::fill(recv_counts_.begin(), recv_counts_.end(), 0);
  for (int64_t s = 0; s < n_tokens * K; ++s)
    recv_counts_[static_cast<size_t>(rank_of_expert_[static_cast<size_t>(local_selected_[static_cast<size_t>(s)])])] += D;
  all_to_all_->alltoallv(slot_out_.data(), send_counts_, slot_in_.data(), recv_counts_,
                         std::ssize(slot_in_), /*counts_known=*/true);
  // Each token's slots in slot order, each from the rank of its expert (whose part of slot_in_
  // holds them token by token, in slot order): the same sum, in the same order, of the same
  // values as one process adds, so the same bits.
  at = 0;
  for (size_t r = 0; r < R; ++r) {
    offsets_[r] = at;  // rank r's next slot output
    at += recv_counts_[r];
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* o = out + t * D;
    for (int k = 0; k < K; ++k) {
      const auto r = static_cast<size_t>(
          rank_of_expert_[static_cast<size_t>(local_selected_[static_cast<size_t>(t * K + k)])]);
      const float* v = &slot_in_[static_cast<size_t>(offsets_[r])];
      offsets_[r] += D;
      if (k == 0) {
        std::copy_n(v, D, o);
      } else {
        for (int64_t i = 0; i < D; ++i) o[i] = o[i] + v[i];
      }
    }
  }
  if (c.n_ff_shared == 0) return;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk_tokens_) {
    const int64_t count = std::min(chunk_tokens_, n_tokens - t0);
    items_.clear();
    items_.push_back({&layer.shared_gate, h + t0 * D, count, shared_gate_.data()});
    items_.push_back({&layer.shared_up, h + t0 * D, count, shared_up_.data()});
    kernels::matmul_grouped(items_, scratch_, pool);
    shared_expert(layer, h + t0 * D, count, pool);
    pool.parallel_for(count, 4, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) add_shared(t, out + (t0 + t) * D);
    });
  }
}

// The shared expert's output and (MoeConfig::shared_gated) its sigmoid gate of each token
// (shared_down_, shared_scale_), from the gate and up products the grouped matmul made beside
// the routed experts'.
void MoeBlock::shared_expert(const MoeLayer& layer, const float* h, int64_t n_tokens,
                             ThreadPool& pool) {
  const int64_t S = config_.n_ff_shared;
  pool.parallel_for(n_tokens, 4, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      kernels::silu_mul(&shared_gate_[static_cast<size_t>(t * S)],
                        &shared_up_[static_cast<size_t>(t * S)], S);
  });
  kernels::matmul(layer.shared_down, shared_gate_.data(), n_tokens, shared_down_.data(), scratch_,
                  pool);  // [T, n_embd]
  if (!config_.shared_gated) return;
  kernels::matmul(layer.shared_gate_inp, h, n_tokens, shared_scale_.data(), scratch_, pool);
  for (int64_t t = 0; t < n_tokens; ++t)
    shared_scale_[static_cast<size_t>(t)] = sigmoid(shared_scale_[static_cast<size_t>(t)]);
}

}  // namespace inferd::model
