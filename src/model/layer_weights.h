// The tensors of one decoder layer, by the names llama.cpp's converters give them and the
// switches of an ArchSpec: what every executor of the decoder loads (the CPU's Decoder in
// decoder.cpp, the CUDA executor in src/cuda/), each through its own loader (host repacking or
// device upload) into its own layer type, so that an architecture's tensors are named once.
//
// Loader: has(name), matrix(name, rows, cols), matrix_rows(name, row_begin, rows, total_rows,
// cols), vector(name, n), optional_vector(name, n). Layer: the fields assigned below.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/decoder.h"

namespace inferd::model {

inline std::string layer_prefix(int i) { return "blk." + std::to_string(i) + "."; }

// The attention sub-layer, the norms and biases of layer i: everything but the feed-forward's
// matrices.
template <typename Loader, typename Layer>
void load_layer_attention(Loader& w, const ArchSpec& spec, const ModelConfig& c, int i,
                          Layer& layer) {
  const std::string p = layer_prefix(i);
  const int head_dim = c.head_dim_of(i);
  const int64_t q_dim = int64_t{c.n_heads} * head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads_of(i)} * head_dim;
  // A layer that reads another's K/V (ModelConfig::kv_layer) may still carry its own key and
  // value projections: taken, never run.
  const bool own_kv = c.kv_layer(i) == i;
  // An EAGLE-3 head's Q/K/V read its normed token embedding and normed g side by side.
  const int64_t in = spec.eagle3 ? 2 * int64_t{c.n_embd} : c.n_embd;
  layer.attn_norm = w.vector(p + "attn_norm.weight", c.n_embd);
  if (spec.fused_projections && w.has(p + "attn_qkv.weight")) {
    const std::string qkv = p + "attn_qkv.weight";  // rows [q; k; v]
    const int64_t rows = q_dim + 2 * kv_dim;
    layer.wq = w.matrix_rows(qkv, 0, q_dim, rows, c.n_embd);
    layer.wk = w.matrix_rows(qkv, q_dim, kv_dim, rows, c.n_embd);
    layer.wv = w.matrix_rows(qkv, q_dim + kv_dim, kv_dim, rows, c.n_embd);
  } else {
    // Gated attention: each head's query rows, then its gate rows (ArchSpec::gated_attention).
    layer.wq = w.matrix(p + "attn_q.weight", spec.gated_attention ? 2 * q_dim : q_dim, in);
    if (own_kv || w.has(p + "attn_k.weight"))
      layer.wk = w.matrix(p + "attn_k.weight", kv_dim, in);
    // Without attn_v (ArchSpec::value_from_key_when_absent) the keys' projection is the values'.
    if ((own_kv && !spec.value_from_key_when_absent) || w.has(p + "attn_v.weight"))
      layer.wv = w.matrix(p + "attn_v.weight", kv_dim, in);
  }
  layer.wo = w.matrix(p + "attn_output.weight", c.n_embd, q_dim);
  layer.ffn_norm = w.vector(p + spec.ffn_norm + ".weight", c.n_embd);
  // Optional biases (Qwen-style files under the llama name too).
  layer.bq = w.optional_vector(p + "attn_q.bias", q_dim);
  layer.bk = w.optional_vector(p + "attn_k.bias", kv_dim);
  layer.bv = w.optional_vector(p + "attn_v.bias", kv_dim);
  layer.bo = w.optional_vector(p + "attn_output.bias", c.n_embd);
  // ArchSpec::qk_norms requires them; ArchSpec::optional_qk_norms takes each one the file has.
  if (spec.qk_norms || (spec.optional_qk_norms && w.has(p + "attn_q_norm.weight")))
    layer.q_norm = w.vector(p + "attn_q_norm.weight", head_dim);
  if ((spec.qk_norms && own_kv) ||
      ((spec.qk_norms || spec.optional_qk_norms) && w.has(p + "attn_k_norm.weight")))
    layer.k_norm = w.vector(p + "attn_k_norm.weight", head_dim);
  if (spec.post_norms) {
    layer.post_attn_norm = w.vector(p + "post_attention_norm.weight", c.n_embd);
    layer.post_ffn_norm = w.vector(p + "post_ffw_norm.weight", c.n_embd);
  }
  layer.sliding = !spec.sliding_layers.empty() && spec.sliding_layers[static_cast<size_t>(i)];
}

// The dense gated feed-forward of layer i: gate, up (or Phi-3's fused [gate; up]) and down.
template <typename Loader, typename Layer>
void load_layer_dense_ffn(Loader& w, const ArchSpec& spec, const ModelConfig& c, int i,
                          Layer& layer) {
  const std::string p = layer_prefix(i);
  const int n_ff = c.n_ff_of(i);
  if (spec.fused_projections && !w.has(p + "ffn_gate.weight")) {
    const std::string up = p + "ffn_up.weight";  // rows [gate; up]
    layer.w_gate = w.matrix_rows(up, 0, n_ff, 2 * int64_t{n_ff}, c.n_embd);
    layer.w_up = w.matrix_rows(up, n_ff, n_ff, 2 * int64_t{n_ff}, c.n_embd);
  } else {
    layer.w_gate = w.matrix(p + "ffn_gate.weight", n_ff, c.n_embd);
    layer.w_up = w.matrix(p + "ffn_up.weight", n_ff, c.n_embd);
  }
  layer.w_down = w.matrix(p + "ffn_down.weight", c.n_embd, n_ff);
}

}  // namespace inferd::model
