// The decoder-only transformer every supported architecture is a variant of: token embedding,
// N layers of (norm, attention over the paged KV cache, norm, gated feed-forward) with residual
// connections, final norm, logits. An architecture (archs/<arch>.cpp) describes only what it
// changes, as an ArchSpec read from its file's metadata; the forward pass lives here once.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/model.h"
#include "model/gated_delta_net.h"
#include "model/mla.h"
#include "model/moe.h"

namespace inferd::model {

enum class FfnActivation {
  kSilu,      // SwiGLU: silu(gate) * up (Llama, Qwen, Mistral, Phi-3)
  kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (Gemma)
};

struct ArchSpec {
  RopeMode rope_mode = RopeMode::kNormal;
  FfnActivation activation = FfnActivation::kSilu;
  bool scale_embedding = false;  // x * sqrt(n_embd) after the embedding look-up (Gemma)
  // post_attention_norm / post_ffw_norm: RMSNorm of each sub-layer's output before it joins the
  // residual stream (Gemma 2 and 3).
  bool post_norms = false;
  // attn_q_norm / attn_k_norm: RMSNorm of every query and key head before RoPE (Qwen3, Gemma 3).
  bool qk_norms = false;
  // The same norms where the file has them, each one optional (GLM-4.5: the 355B has them, Air
  // not).
  bool optional_qk_norms = false;
  // Accepts rope_freqs.weight (per-pair frequency divisors, Llama 3.1+ rope scaling).
  bool rope_freq_factors = false;
  // LongRoPE (Phi-3): rope_factors_long.weight when the context exceeds
  // `rope.scaling.original_context_length`, else rope_factors_short.weight, as per-pair
  // divisors; `rope.scaling.attn_factor` scales cos and sin.
  bool long_rope = false;
  // Fused projections (Phi-3): attn_qkv.weight [q; k; v] instead of three tensors, and an
  // ffn_up.weight of 2 * n_ff rows [gate; up] instead of ffn_gate + ffn_up.
  bool fused_projections = false;
  // attn_sinks.weight: one learned logit per query head that joins every softmax's
  // denominator and carries no value (gpt-oss).
  bool attention_sinks = false;
  float attention_scale = 0;    // scores = q.k * this; 0: 1 / sqrt(head_dim)
  float attention_softcap = 0;  // scores = c * tanh(scores / c) before the softmax; 0: none
  float final_softcap = 0;      // logits = c * tanh(logits / c); 0: none
  // Sliding-window attention: on the layers marked here (one flag per layer; empty: none), a
  // query at position p sees keys at positions p - sliding_window + 1 .. p only.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;
  // RoPE of the sliding layers when it differs from the others (Gemma 3): base and linear scale.
  float sliding_rope_base = 0;  // 0: the model's rope.freq_base
  float sliding_rope_scale = 1.0f;
  // Mixture-of-experts feed-forward (model/moe.h) on every layer from
  // `leading_dense_block_count` on; absent: every layer is dense.
  std::optional<MoeSpec> moe;
  // The name of the feed-forward's input norm (gpt-oss calls it post_attention_norm).
  std::string ffn_norm = "ffn_norm";
  // Gated attention (Qwen3.5, Qwen3-Next): attn_q has 2 x n_heads x head_dim rows, each head's
  // query then its gate, and each head's attention output is multiplied by sigmoid(gate)
  // before attn_output.
  bool gated_attention = false;
  // Hybrid models: Gated DeltaNet (model/gated_delta_net.h) instead of attention on the layers
  // the file marks recurrent; they keep a state per sequence instead of K/V.
  std::optional<DeltaNetSpec> delta_net;
  // Interleaved M-RoPE (Qwen3.5): `rope.dimension_sections` give each rotated pair a position
  // axis; text tokens carry their position on the first three axes and 0 on the fourth, so the
  // pairs of the fourth do not rotate.
  bool interleaved_mrope = false;
  // An EAGLE-3 draft head (`eagle3`; model.h's Model::encode_features): no trunk, one layer
  // whose attention reads [attn_norm(embedding of the token); attn_norm_2(g)] (2 x n_embd wide)
  // where g, the residual stream's start, is fc of the target's hidden states at
  // `target_layers` (each the input of that layer), or the head's own output a draft step
  // before. Run by Model::forward_mtp only.
  struct Eagle3Spec {
    std::vector<int> target_layers;
    int target_n_embd = 0;
    bool norm_before_residual = false;  // the residual is attn_norm_2(g), not g
    bool norm_before_fc = false;        // enc.output_norm of the features before fc
  };
  std::optional<Eagle3Spec> eagle3;
  // Multi-head latent attention (model/mla.h: DeepSeek-V2/V3) instead of q/k/v projections on
  // every layer: keys of mla->key_dims() and values of mla->value_dims per head, n_heads of
  // each in the KV cache, whatever head_count_kv says.
  std::optional<MlaConfig> mla;
  // What multiplies RoPE's cos and sin where the architecture computes it (DeepSeek-V2's YaRN);
  // 0: ModelConfig's (`rope.scaling.attn_factor` and YaRN's factor).
  float rope_attn_factor = 0;
  // YaRN's settings where the architecture reads them otherwise than ModelConfig (deepseek2
  // keeps ggml's betas whatever the file says, as llama.cpp does).
  std::optional<kernels::YarnScaling> rope_yarn;
  // Multi-token-prediction blocks after the trunk (`nextn_predict_layers`) are loaded; with
  // ModelOptions::mtp the first one runs as a drafter (Model::forward_mtp). Without this a file
  // that has them is refused by name.
  bool keeps_nextn_layers = false;

  // Gemma 4. The sliding layers' head size and rotated dimensions where they differ from the
  // full layers' (`attention.key_length_swa`, `rope.dimension_count_swa`; 0: the same).
  int sliding_head_dim = 0;
  int sliding_rope_dims = 0;
  // The last `shared_kv_layers` layers store no K/V: each attends over that of the last layer of
  // its own kind (sliding or full) before them, as llama.cpp's layer reuse does.
  int shared_kv_layers = 0;
  // RMSNorm without weights of every value head before it is stored.
  bool value_norm = false;
  // A layer without attn_v takes its keys' projection (before the key norm) as its values.
  bool value_from_key_when_absent = false;
  // layer_output_scale.weight: one number that multiplies a layer's output (an optional tensor).
  bool layer_output_scale = false;
  // Per-layer embeddings of the E models, `embedding_length_per_layer_input` values a layer and
  // token: per_layer_token_embd (a row a token, read in place) plus per_layer_model_proj of the
  // scaled embedding, normed; each layer gates its output through them (inp_gate, proj,
  // post_norm). 0: none.
  int per_layer_embd = 0;
  // The rotation of the full layers only takes rope_freqs.weight (Gemma 4's proportional RoPE);
  // the sliding layers rotate without it.
  bool full_layers_take_rope_freqs = false;
  // Gemma 4's 26B-A4B: a layer with a router (ffn_gate_inp) runs its experts beside a dense
  // MLP: post_ffw_norm_1(mlp(ffn_norm x)) + post_ffw_norm_2(experts(pre_ffw_norm_2 x)), the
  // router scoring rms_norm(x) / sqrt(n_embd) * ffn_gate_inp.scale; layers without one are
  // dense.
  bool moe_beside_dense_mlp = false;
};

// The RoPE tables of a decoder: the model's own, and the sliding layers' when the ArchSpec gives
// them another base or scale (Gemma 3).
struct RopeTables {
  kernels::RopeTable full;
  kernels::RopeTable sliding;
  bool own_sliding = false;
  const kernels::RopeTable& for_layer(bool sliding_layer) const {
    return sliding_layer && own_sliding ? sliding : full;
  }
};

// The per-pair frequency-divisor tensors an ArchSpec takes (Llama 3.1+'s rope_freqs.weight;
// LongRoPE's long and short factors): every one a file may carry, and the one that applies at
// max_context ("" when the spec takes none). Each executor loads the former, so that none is
// refused as unused, and rotates with the latter.
std::vector<std::string> rope_factor_tensors(const ArchSpec& spec);
std::string rope_factor_tensor(const gguf::GgufFile& file, const ArchSpec& spec,
                               const ModelConfig& config, int64_t max_context);

// The tables for positions [0, max_context), with the file's frequency divisors (empty: none).
RopeTables make_rope_tables(const ModelConfig& config, const ArchSpec& spec, int64_t max_context,
                            std::span<const float> freq_factors);

// Which layers slide, as llama.cpp reads it: `<arch>.attention.sliding_window_pattern` as one
// flag per layer, or as a period n (layer l slides unless l % n == n - 1; 0: all slide), or
// `default_period` when the key is absent.
std::vector<bool> sliding_layer_pattern(const gguf::GgufFile& file, int n_layers,
                                        int default_period);

// Builds the decoder for `file` with the architecture's spec, on the executor of
// options.device. Every tensor of the file must be one the spec uses, or loading fails naming
// it (weights.h).
std::unique_ptr<Model> make_decoder(const gguf::GgufFile& file, const ModelOptions& options,
                                    ArchSpec spec);

// The same decoder run by the CUDA executor (src/cuda/cuda_decoder.cpp); in a build without
// CUDA (INFERD_CUDA off) an inferd::Error saying so.
std::unique_ptr<Model> make_cuda_decoder(const gguf::GgufFile& file, const ModelOptions& options,
                                         ArchSpec spec);

}  // namespace inferd::model
