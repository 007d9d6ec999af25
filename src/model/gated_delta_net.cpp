#include "model/gated_delta_net.h"

#include <algorithm>
#include <cmath>

#include "kernels/delta_net.h"
#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::model {
namespace {

int positive_key(const gguf::GgufFile& file, const std::string& key) {
  const int64_t v = file.require_int(key);
  if (v <= 0 || v > (int64_t{1} << 20)) fail("{}: '{}' = {} is not a usable size", file.name(), key, v);
  return static_cast<int>(v);
}

// ggml's softplus: the input itself above 20, where log(1 + e^x) rounds to x.
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

DeltaNetConfig DeltaNetConfig::from_gguf(const gguf::GgufFile& file, int n_layers, float rms_eps) {
  const std::string a = file.architecture() + ".";
  DeltaNetConfig c;
  c.rms_eps = rms_eps;
  c.conv_kernel = positive_key(file, a + "ssm.conv_kernel");
  c.n_k_heads = positive_key(file, a + "ssm.group_count");
  c.n_v_heads = positive_key(file, a + "ssm.time_step_rank");
  c.head_dim = positive_key(file, a + "ssm.state_size");
  if (c.head_dim > 1024)
    fail("{}: '{}ssm.state_size' = {} is beyond the supported 1024 (a state of {} floats a head)",
         file.name(), a, c.head_dim, int64_t{c.head_dim} * c.head_dim);
  const int64_t inner = positive_key(file, a + "ssm.inner_size");
  if (inner != c.value_dim())
    fail("{}: '{}ssm.inner_size' = {} is not ssm.time_step_rank x ssm.state_size = {}: value heads "
         "of another size than the key heads are not implemented",
         file.name(), a, inner, c.value_dim());
  if (c.n_v_heads % c.n_k_heads != 0)
    fail("{}: {} value heads ('{}ssm.time_step_rank') are not a multiple of the {} key heads "
         "('{}ssm.group_count')",
         file.name(), c.n_v_heads, a, c.n_k_heads, a);
  if (c.conv_kernel < 2 || c.conv_kernel > 16)
    fail("{}: '{}ssm.conv_kernel' = {} is outside the supported 2..16", file.name(), a,
         c.conv_kernel);
  c.recurrent_layers.assign(static_cast<size_t>(n_layers), false);
  const std::string flags_key = a + "attention.recurrent_layers";
  if (const gguf::Array* flags = file.get_array(flags_key)) {
    // llama.cpp's array covers the trunk and any nextn (MTP) layers after it.
    if (std::ssize(flags->items) < n_layers)
      fail("{}: '{}' has {} flags for {} layers", file.name(), flags_key, flags->items.size(),
           n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const std::optional<bool> flag = flags->items[static_cast<size_t>(l)].as_bool();
      if (!flag) fail("{}: '{}' holds a value that is not a flag", file.name(), flags_key);
      c.recurrent_layers[static_cast<size_t>(l)] = *flag;
    }
  } else {
    const std::string interval_key = a + "full_attention_interval";
    const int64_t interval = file.get_int(interval_key).value_or(4);
    if (interval <= 0) fail("{}: '{}' = {} must be positive", file.name(), interval_key, interval);
    for (int l = 0; l < n_layers; ++l)
      c.recurrent_layers[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
  if (c.num_recurrent_layers() == n_layers)
    fail("{}: every layer is recurrent; a hybrid model needs attention layers", file.name());
  return c;
}

int DeltaNetConfig::num_recurrent_layers() const {
  return static_cast<int>(std::count(recurrent_layers.begin(), recurrent_layers.end(), true));
}

DeltaNetLayer load_delta_net_layer(const WeightLoader& w, const std::string& p,
                                   const DeltaNetConfig& c, const DeltaNetSpec& spec, int n_embd) {
  if (w.has(p + "ssm_in.weight"))
    fail("tensor '{}ssm_in.weight': the older fused q/k/v/z projection of Qwen3-Next files is "
         "not implemented; a file with attn_qkv and attn_gate (llama.cpp's current converter) "
         "runs",
         p);
  DeltaNetLayer layer;
  layer.w_qkv = w.matrix(p + "attn_qkv.weight", c.conv_channels(), n_embd);
  layer.w_gate = w.matrix(p + "attn_gate.weight", c.value_dim(), n_embd);
  if (spec.combined_beta_alpha) {
    layer.w_beta = w.matrix(p + "ssm_ba.weight", 2 * int64_t{c.n_v_heads}, n_embd);
  } else {
    layer.w_beta = w.matrix(p + "ssm_beta.weight", c.n_v_heads, n_embd);
    layer.w_alpha = w.matrix(p + "ssm_alpha.weight", c.n_v_heads, n_embd);
  }
  layer.conv = w.f32_rows(p + "ssm_conv1d.weight", c.conv_channels(), c.conv_kernel);
  layer.dt_bias = w.vector(p + "ssm_dt.bias", c.n_v_heads);
  layer.a = w.vector(p + "ssm_a", c.n_v_heads);
  layer.norm = w.vector(p + "ssm_norm.weight", c.head_dim);
  layer.w_out = w.matrix(p + "ssm_out.weight", n_embd, c.value_dim());
  return layer;
}

DeltaNetBlock::DeltaNetBlock(const DeltaNetConfig& config, const DeltaNetSpec& spec, int n_embd,
                             int64_t max_tokens)
    : config_(config), spec_(spec), n_embd_(n_embd) {
  const auto T = static_cast<size_t>(max_tokens);
  const auto floats = [&](int64_t n) { return memory_.allocate_array<float>(T * size_t(n)); };
  mixed_ = floats(config_.conv_channels());
  conv_ = floats(config_.conv_channels());
  z_ = floats(config_.value_dim());
  ba_ = floats(2 * int64_t{config_.n_v_heads});
  beta_ = floats(config_.n_v_heads);
  g_ = floats(config_.n_v_heads);
  o_ = floats(config_.value_dim());
  act_.reserve(max_tokens, std::max<int64_t>(n_embd, config_.value_dim()));
  entries_.reserve(T);
  slot_begin_.reserve(T + 1);
  memory_.prefault();
}

void DeltaNetBlock::begin_batch(const Batch& batch, kv::KvCache& cache) {
  if (!cache.has_state())
    fail("the model is hybrid (recurrent layers) but the KV cache has no state slots");
  if (batch.sequences.size() > entries_.capacity())
    fail("a batch of {} entries exceeds the {} tokens the model was sized for",
         batch.sequences.size(), entries_.capacity());
  entries_.clear();  // within the reserved capacity: no allocation
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const BatchSequence& seq = batch.sequences[i];
    if (seq.state_slot < 0) fail("a sequence of a hybrid model's batch has no recurrent state slot");
    cache.state(seq.state_slot);  // checks the slot
    if (seq.token_end <= seq.token_begin) continue;
    entries_.push_back({seq.state_slot, batch.positions[static_cast<size_t>(seq.token_begin)],
                        static_cast<int32_t>(i)});
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.slot != b.slot ? a.slot < b.slot : a.first_position < b.first_position;
  });
  slot_begin_.clear();
  const int64_t floats = cache.config().state_floats;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (e > 0 && entries_[e].slot == entries_[e - 1].slot) {
      const BatchSequence& before = batch.sequences[static_cast<size_t>(entries_[e - 1].index)];
      const int32_t next = batch.positions[static_cast<size_t>(before.token_end - 1)] + 1;
      if (entries_[e].first_position != next)
        fail("two entries of the sequence in state slot {} are not consecutive (positions {} "
             "and {})",
             entries_[e].slot, next, entries_[e].first_position);
      continue;
    }
    slot_begin_.push_back(static_cast<int32_t>(e));
    if (entries_[e].first_position == 0) std::fill_n(cache.state(entries_[e].slot), floats, 0.0f);
  }
  slot_begin_.push_back(static_cast<int32_t>(entries_.size()));
}

void DeltaNetBlock::prepare_entry(const DeltaNetLayer& layer, float* conv_state, int64_t t0,
                                     int64_t t1) {
  const DeltaNetConfig& c = config_;
  const int64_t C = c.conv_channels(), nv = c.n_v_heads;
  kernels::causal_conv1d_silu(conv_state, c.conv_kernel, C, &mixed_[size_t(t0 * C)], C, t1 - t0,
                              layer.conv, &conv_[size_t(t0 * C)], C);
  for (int64_t t = t0; t < t1; ++t) {
    float* row = &conv_[size_t(t * C)];
    // q and k of every key head: unit length (llama.cpp's rms_norm with eps / d, over sqrt(d)).
    kernels::l2_norm_rows(row, 2 * c.n_k_heads, c.head_dim, c.head_dim, c.rms_eps);
    float* beta = &beta_[size_t(t * nv)];
    float* g = &g_[size_t(t * nv)];
    if (spec_.combined_beta_alpha) {  // per key head: its value heads' beta, then their alpha
      const int ratio = c.n_v_heads / c.n_k_heads;
      const float* ba = &ba_[size_t(t * 2 * nv)];
      for (int h = 0; h < c.n_v_heads; ++h) {
        const int group = h / ratio, r = h % ratio;
        beta[h] = ba[group * 2 * ratio + r];
        g[h] = ba[group * 2 * ratio + ratio + r];
      }
    }
    for (int h = 0; h < c.n_v_heads; ++h) {
      beta[h] = sigmoid(beta[h]);
      g[h] = softplus(g[h] + layer.dt_bias[h]) * layer.a[h];
    }
  }
}

void DeltaNetBlock::forward(const DeltaNetLayer& layer, const Batch& batch, const float* h,
                            kv::KvCache& cache, float* out, ThreadPool& pool,
                            int64_t bf16_rows_begin) {
  const DeltaNetConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const int64_t C = c.conv_channels(), V = c.value_dim(), nv = c.n_v_heads, d = c.head_dim;
  if (spec_.combined_beta_alpha) {
    const kernels::MatmulTarget targets[] = {{&layer.w_qkv, mixed_.data()},  // [T, C]
                                             {&layer.w_gate, z_.data()},     // [T, V]
                                             {&layer.w_beta, ba_.data()}};   // [T, 2 nv]
    kernels::matmul_many(targets, h, T, act_, pool, kernels::active_kernels(), bf16_rows_begin);
  } else {
    const kernels::MatmulTarget targets[] = {{&layer.w_qkv, mixed_.data()},   // [T, C]
                                             {&layer.w_gate, z_.data()},      // [T, V]
                                             {&layer.w_beta, beta_.data()},   // [T, nv]
                                             {&layer.w_alpha, g_.data()}};    // [T, nv]
    kernels::matmul_many(targets, h, T, act_, pool, kernels::active_kernels(), bf16_rows_begin);
  }
  const auto n_slots = static_cast<int64_t>(slot_begin_.size()) - 1;
  // The convolution runs through each sequence's tokens in order; sequences are independent.
  const auto entry = [&](int64_t e) -> const BatchSequence& {
    return batch.sequences[static_cast<size_t>(entries_[static_cast<size_t>(e)].index)];
  };
  pool.for_each_dynamic(n_slots, [&](int64_t s) {
    for (int64_t e = slot_begin_[size_t(s)]; e < slot_begin_[size_t(s) + 1]; ++e) {
      const BatchSequence& seq = entry(e);
      prepare_entry(layer, cache.state(seq.state_slot) + layer.state_offset, seq.token_begin,
                    seq.token_end);
    }
  });
  // The delta rule: one (sequence, value head) a task, each through its tokens in order.
  const kernels::DeltaNetKernels& dn = kernels::active_kernels().delta_net;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t k_offset = c.key_dim(), v_offset = 2 * c.key_dim();
  pool.for_each_dynamic(n_slots * nv, [&](int64_t i) {
    const int64_t s = i / nv;
    const int head = static_cast<int>(i % nv);
    const int64_t kh = key_head_of(head);
    for (int64_t e = slot_begin_[size_t(s)]; e < slot_begin_[size_t(s) + 1]; ++e) {
      const BatchSequence& seq = entry(e);
      const int64_t t0 = seq.token_begin, n = seq.token_end - seq.token_begin;
      float* matrix = cache.state(seq.state_slot) + layer.state_offset + c.conv_state_floats() +
                      int64_t{head} * d * d;
      const float* row = &conv_[size_t(t0 * C)];
      float* o = &o_[size_t(t0 * V + head * d)];
      dn.recurrent(matrix, static_cast<int>(d), n, row + kh * d, row + k_offset + kh * d, C,
                   row + v_offset + head * d, C, &g_[size_t(t0 * nv + head)],
                   &beta_[size_t(t0 * nv + head)], nv, scale, o, V);
      for (int64_t t = 0; t < n; ++t) {
        kernels::gated_rms_norm(o + t * V, &z_[size_t((t0 + t) * V + head * d)], layer.norm,
                                static_cast<int>(d), c.rms_eps);
      }
    }
  });
  kernels::matmul(layer.w_out, o_.data(), T, out, act_, pool,  // [T, n_embd]
                  kernels::active_kernels(), bf16_rows_begin);
}

}  // namespace inferd::model
