// A tiny random Llama written as a GGUF in memory, for tests that need a model but not the
// real one: 2 layers, hidden 64, 4 query heads over 2 kv heads of 16, vocabulary 96.
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/ref/quant_ref.h"

namespace inferd::testing {

struct TinyLlamaSpec {
  int n_layers = 2, n_embd = 64, n_heads = 4, n_kv_heads = 2, n_ff = 128, n_vocab = 96;
  int64_t context = 256;
  DType matrix_type = DType::F32;  // F32, F16, Q8_0, Q4_0 or Q4_1
  bool tied_output = true;
  uint32_t seed = 1;
  // Llama 3.x rope scaling: per-pair frequency divisors as `rope_freqs.weight` (none if empty).
  std::vector<float> rope_freqs;
  float linear_rope_factor = 0;  // > 0: `rope.scaling.type` linear with this factor
  // Attention biases per layer (`attn_{q,k,v,output}.bias`), each absent if empty; the same
  // vector serves every layer.
  std::vector<float> bias_q, bias_k, bias_v, bias_o;
  // A SentencePiece vocabulary of n_vocab tokens (<unk>, <s> = BOS, </s> = EOS, then pieces
  // "▁a", "b", "c", ...), so the file also runs through the engine.
  bool with_tokenizer = false;
  // Mixtral-style experts instead of the dense feed-forward (n_experts > 0): a router
  // `ffn_gate_inp` (F32) and n_experts SwiGLU experts of n_ff, as merged 3-D tensors
  // (`ffn_{gate,up,down}_exps`) or, with per_expert_tensors, Mixtral's older
  // `ffn_{gate,up,down}.E.weight`. identical_experts gives every expert the same weights.
  int n_experts = 0, n_experts_used = 0;
  bool per_expert_tensors = false;
  bool identical_experts = false;
};

inline std::vector<uint8_t> encode_rows(DType type, const std::vector<float>& values) {
  std::vector<uint8_t> out(*row_bytes(type, static_cast<int64_t>(values.size())));
  const auto n = static_cast<int64_t>(values.size());
  switch (type) {
    case DType::F16:
      kernels::ref::quantize_row_f16(values.data(), out.data(), n);
      break;
    case DType::Q8_0:
      kernels::ref::quantize_row_q8_0(values.data(), out.data(), n);
      break;
    case DType::Q4_0:
      kernels::ref::quantize_row_q4_0(values.data(), out.data(), n);
      break;
    case DType::Q4_1:
      kernels::ref::quantize_row_q4_1(values.data(), out.data(), n);
      break;
    default:
      std::memcpy(out.data(), values.data(), out.size());
      break;
  }
  return out;
}

// A layer's router and experts (TinyLlamaSpec::n_experts), drawn with `random(n, scale)`.
template <typename Random>
void add_experts(gguf::GgufWriter& w, const TinyLlamaSpec& s, const std::string& p,
                 Random& random) {
  const auto E = static_cast<size_t>(s.n_embd), F = static_cast<size_t>(s.n_ff),
             X = static_cast<size_t>(s.n_experts);
  w.add_tensor(p + "ffn_gate_inp.weight", DType::F32, {E, X},
               encode_rows(DType::F32, random(X * E, 0.5f)));
  // Each expert's [rows, cols] matrix, the same for all with identical_experts.
  std::vector<std::vector<float>> gate, up, down;
  for (size_t x = 0; x < X; ++x) {
    const bool fresh = x == 0 || !s.identical_experts;
    gate.push_back(fresh ? random(F * E, 0.2f) : gate[0]);
    up.push_back(fresh ? random(F * E, 0.2f) : up[0]);
    down.push_back(fresh ? random(E * F, 0.2f) : down[0]);
  }
  const auto add = [&](const std::string& name, const std::vector<std::vector<float>>& experts,
                       size_t rows, size_t cols) {
    if (s.per_expert_tensors) {
      for (size_t x = 0; x < X; ++x)
        w.add_tensor(p + name + "." + std::to_string(x) + ".weight", s.matrix_type, {cols, rows},
                     encode_rows(s.matrix_type, experts[x]));
      return;
    }
    std::vector<float> all;
    for (const auto& e : experts) all.insert(all.end(), e.begin(), e.end());
    w.add_tensor(p + name + "_exps.weight", s.matrix_type, {cols, rows, X},
                 encode_rows(s.matrix_type, all));
  };
  add("ffn_gate", gate, F, E);
  add("ffn_up", up, F, E);
  add("ffn_down", down, E, F);
}

// A SentencePiece vocabulary of n_vocab tokens (<unk>, <s> = BOS, </s> = EOS, then pieces
// "▁a", "b", "c", ...), so that a tiny model also runs through the engine.
inline void add_tiny_tokenizer(gguf::GgufWriter& w, int n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int i = 3; i < n_vocab; ++i) {
    std::string piece(1, static_cast<char>('a' + (i - 3) % 26));
    if (i - 3 >= 26) piece += std::to_string((i - 3) / 26);
    tokens.push_back(i == 3 ? "\xe2\x96\x81" + piece : piece);
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
}

inline std::vector<uint8_t> make_tiny_llama(const TinyLlamaSpec& s) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng) * scale;
    return v;
  };
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny-llama");
  w.set_u32("llama.block_count", s.n_layers);
  w.set_u32("llama.embedding_length", s.n_embd);
  w.set_u32("llama.feed_forward_length", s.n_ff);
  w.set_u32("llama.attention.head_count", s.n_heads);
  w.set_u32("llama.attention.head_count_kv", s.n_kv_heads);
  w.set_u32("llama.context_length", static_cast<uint32_t>(s.context));
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", s.n_vocab);
  if (s.n_experts > 0) {
    w.set_u32("llama.expert_count", s.n_experts);
    w.set_u32("llama.expert_used_count", s.n_experts_used);
  }
  if (s.linear_rope_factor > 0) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_f32("llama.rope.scaling.factor", s.linear_rope_factor);
  }
  if (s.with_tokenizer) add_tiny_tokenizer(w, s.n_vocab);
  const int head_dim = s.n_embd / s.n_heads;
  const auto E = static_cast<size_t>(s.n_embd), F = static_cast<size_t>(s.n_ff);
  const size_t Q = static_cast<size_t>(s.n_heads * head_dim),
               KV = static_cast<size_t>(s.n_kv_heads * head_dim);
  auto matrix = [&](const std::string& name, size_t rows, size_t cols, float scale) {
    w.add_tensor(name, s.matrix_type, {cols, rows},
                 encode_rows(s.matrix_type, random(rows * cols, scale)));
  };
  auto norm = [&](const std::string& name) {
    std::vector<float> v(E);
    for (float& x : v) x = 1.0f + 0.1f * dist(rng);
    w.add_tensor(name, DType::F32, {E}, encode_rows(DType::F32, v));
  };
  matrix("token_embd.weight", static_cast<size_t>(s.n_vocab), E, 1.0f);
  norm("output_norm.weight");
  if (!s.tied_output) matrix("output.weight", static_cast<size_t>(s.n_vocab), E, 0.2f);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", Q, E, 0.3f);
    matrix(p + "attn_k.weight", KV, E, 0.3f);
    matrix(p + "attn_v.weight", KV, E, 0.3f);
    matrix(p + "attn_output.weight", E, Q, 0.2f);
    norm(p + "ffn_norm.weight");
    if (s.n_experts > 0) {
      add_experts(w, s, p, random);
      continue;
    }
    matrix(p + "ffn_gate.weight", F, E, 0.2f);
    matrix(p + "ffn_up.weight", F, E, 0.2f);
    matrix(p + "ffn_down.weight", E, F, 0.2f);
  }
  // After the random tensors, so that the same seed gives the same weights with or without.
  auto vector = [&](const std::string& name, const std::vector<float>& v) {
    if (!v.empty()) w.add_tensor(name, DType::F32, {v.size()}, encode_rows(DType::F32, v));
  };
  vector("rope_freqs.weight", s.rope_freqs);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vector(p + "attn_q.bias", s.bias_q);
    vector(p + "attn_k.bias", s.bias_k);
    vector(p + "attn_v.bias", s.bias_v);
    vector(p + "attn_output.bias", s.bias_o);
  }
  return w.build();
}

}  // namespace inferd::testing
