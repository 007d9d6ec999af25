// A tiny random hybrid model (model/gated_delta_net.h) written as a GGUF in memory: `qwen35`
// with 4 layers, three Gated DeltaNet layers and one of gated full attention
// (layer 3), hidden 64, 4 query / 2 KV heads of 16 (RoPE on 8 of them), 2 key and 4 value heads
// of 16 in the recurrent layers, a convolution of 4 taps, vocabulary 48. Decays and betas are
// drawn so that the state matters: exp(g) spreads over about (0.3, 1), beta over (0.1, 0.9).
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tiny_model.h"

namespace inferd::testing {

struct TinyHybridSpec {
  std::string arch = "qwen35";
  int n_layers = 4, n_embd = 64, n_heads = 4, n_kv_heads = 2, head_dim = 16, n_ff = 96;
  int n_vocab = 48, rope_dims = 8;
  int n_k_heads = 2, n_v_heads = 4, state = 16, conv_kernel = 4;
  int64_t context = 512;
  DType matrix_type = DType::F32;
  bool with_tokenizer = false;
  uint32_t seed = 3;
  int nextn_layers = 0;  // multi-token-prediction blocks after the trunk (kept, not run)
  // A model that mostly repeats its input token, for drafts that are accepted: the output tied
  // to the embeddings and every sub-layer's output projection scaled by this (1: as drawn).
  float output_scale = 1.0f;
  bool tied_output = false;
};

inline std::vector<uint8_t> make_tiny_hybrid(const TinyHybridSpec& s) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng) * scale;
    return v;
  };
  const std::string a = s.arch + ".";
  gguf::GgufWriter w;
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "tiny-" + s.arch);
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layers + s.nextn_layers));
  if (s.nextn_layers > 0) w.set_u32(a + "nextn_predict_layers", static_cast<uint32_t>(s.nextn_layers));
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "attention.head_count", s.n_heads);
  w.set_u32(a + "attention.head_count_kv", s.n_kv_heads);
  w.set_u32(a + "attention.key_length", s.head_dim);
  w.set_u32(a + "attention.value_length", s.head_dim);
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.context));
  w.set_f32(a + "rope.freq_base", 10000.0f);
  w.set_u32(a + "rope.dimension_count", s.rope_dims);
  w.set_i32s(a + "rope.dimension_sections", {2, 1, 1, 0});
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "vocab_size", s.n_vocab);
  w.set_u32(a + "ssm.conv_kernel", s.conv_kernel);
  w.set_u32(a + "ssm.state_size", s.state);
  w.set_u32(a + "ssm.group_count", s.n_k_heads);
  w.set_u32(a + "ssm.time_step_rank", s.n_v_heads);
  w.set_u32(a + "ssm.inner_size", s.n_v_heads * s.state);
  w.set_u32(a + "full_attention_interval", 4);
  if (s.with_tokenizer) add_tiny_tokenizer(w, s.n_vocab);
  const auto E = static_cast<size_t>(s.n_embd), F = static_cast<size_t>(s.n_ff);
  const size_t Q = size_t(s.n_heads * s.head_dim), KV = size_t(s.n_kv_heads * s.head_dim);
  const size_t K = size_t(s.n_k_heads * s.state), V = size_t(s.n_v_heads * s.state);
  const size_t C = 2 * K + V, H = size_t(s.n_v_heads);
  auto matrix = [&](const std::string& name, size_t rows, size_t cols, float scale) {
    w.add_tensor(name, s.matrix_type, {cols, rows},
                 encode_rows(s.matrix_type, random(rows * cols, scale)));
  };
  auto f32 = [&](const std::string& name, std::vector<size_t> shape, const std::vector<float>& v) {
    w.add_tensor(name, DType::F32, std::move(shape), encode_rows(DType::F32, v));
  };
  auto norm = [&](const std::string& name, size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.1f * dist(rng);
    f32(name, {n}, v);
  };
  matrix("token_embd.weight", size_t(s.n_vocab), E, 1.0f);
  norm("output_norm.weight", E);
  if (!s.tied_output) matrix("output.weight", size_t(s.n_vocab), E, 0.2f);
  const float out = s.output_scale;
  for (int l = 0; l < s.n_layers + s.nextn_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", E);
    norm(p + "post_attention_norm.weight", E);
    if ((l + 1) % 4 == 0 || l >= s.n_layers) {  // full attention (and the MTP blocks')
      matrix(p + "attn_q.weight", 2 * Q, E, 0.3f);
      matrix(p + "attn_k.weight", KV, E, 0.3f);
      matrix(p + "attn_v.weight", KV, E, 0.3f);
      matrix(p + "attn_output.weight", E, Q, 0.2f * out);
      norm(p + "attn_q_norm.weight", size_t(s.head_dim));
      norm(p + "attn_k_norm.weight", size_t(s.head_dim));
    } else {
      matrix(p + "attn_qkv.weight", C, E, 0.3f);
      matrix(p + "attn_gate.weight", V, E, 0.3f);
      matrix(p + "ssm_beta.weight", H, E, 0.15f);
      matrix(p + "ssm_alpha.weight", H, E, 0.15f);
      f32(p + "ssm_conv1d.weight", {size_t(s.conv_kernel), C}, random(C * size_t(s.conv_kernel), 0.4f));
      // softplus(alpha + dt) * a with a = -exp(A_log): decays exp(g) mostly in (0.3, 1).
      std::vector<float> dt(H), a_neg(H);
      for (size_t h = 0; h < H; ++h) {
        dt[h] = -1.0f + uniform(rng);
        a_neg[h] = -std::exp(-1.5f + 1.5f * uniform(rng));
      }
      f32(p + "ssm_dt.bias", {H}, dt);
      f32(p + "ssm_a", {H}, a_neg);
      norm(p + "ssm_norm.weight", size_t(s.state));
      matrix(p + "ssm_out.weight", E, V, 0.2f * out);
    }
    matrix(p + "ffn_gate.weight", F, E, 0.2f);
    matrix(p + "ffn_up.weight", F, E, 0.2f);
    matrix(p + "ffn_down.weight", E, F, 0.2f * out);
    if (l >= s.n_layers) {  // an MTP block's own tensors
      matrix(p + "nextn.eh_proj.weight", E, 2 * E, 0.2f);
      norm(p + "nextn.enorm.weight", E);
      norm(p + "nextn.hnorm.weight", E);
    }
  }
  return w.build();
}

}  // namespace inferd::testing
