// ModelConfig: the hyperparameters of a model, read from `<arch>.*` GGUF metadata with
// defaults where the format allows them to be absent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace inferd::model {

enum class RopeMode { kNormal, kNeox };

struct ModelConfig {
  std::string architecture;
  std::string name;
  int n_layers = 0;  // the trunk's: `block_count` less the multi-token-prediction layers
  int n_nextn_layers = 0;  // `nextn_predict_layers`: MTP blocks after the trunk's
  // The file's multi-token-prediction block runs (ModelOptions::mtp, Model::forward_mtp): the KV
  // cache carries its K/V as one more layer, index n_layers, in the full-attention group.
  bool mtp = false;
  int n_embd = 0;  // hidden size
  int n_ff = 0;    // feed-forward size
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // per head, for queries and keys (values too, unless value_head_dim)
  // The values' head size where `attention.value_length` (or the architecture: DeepSeek's MLA)
  // gives one that differs from head_dim; 0: head_dim. Only an architecture that implements it
  // runs such a file (the decoder refuses it otherwise).
  int value_head_dim = 0;
  int n_vocab = 0;
  int64_t context_length = 0;  // trained context
  float rms_eps = 1e-5f;
  int rope_dims = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / `rope.scaling.factor` (linear and YaRN scaling)
  // `rope.scaling.type` yarn: ext_factor 1, the original context and the betas (ext_factor 0,
  // off, for the other types). Goes to kernels::RopeTable as it is.
  kernels::YarnScaling rope_yarn;
  // What multiplies RoPE's cos and sin (RopeTable's mscale), as llama.cpp's yarn_attn_factor:
  // the file's `rope.scaling.attn_factor` (1 if absent), for YaRN times get_mscale(factor) /
  // (1 + 0.1 ln factor), which is 1 up to rounding since the table applies YaRN's own factor.
  float rope_attn_factor = 1.0f;
  RopeMode rope_mode = RopeMode::kNormal;
  // Sliding-window attention, set by the architecture: on the layers flagged here (empty: none)
  // a query at position p sees keys p - sliding_window + 1 .. p only.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Hybrid models (model/gated_delta_net.h), set by the architecture: the recurrent layers
  // (one flag per layer, empty: none), which keep no K/V, and the floats of one sequence's
  // recurrent state over all of them.
  std::vector<bool> recurrent_layers;
  int64_t recurrent_state_floats = 0;
  // Set by the architecture where the sliding layers' attention differs from the others'
  // (Gemma 4): their head size, kv heads and rotated dimensions; 0: as the others'.
  int sliding_head_dim = 0;
  int sliding_n_kv_heads = 0;
  int sliding_rope_dims = 0;
  // Each layer's feed-forward size where they differ (Gemma 4's double-wide MLP); empty: n_ff.
  std::vector<int> layer_n_ff;
  // Each layer's kv heads as the file gives them where they differ (an array of
  // `attention.head_count_kv`); the decoder resolves them into n_kv_heads and
  // sliding_n_kv_heads, and refuses them where the layers of one kind differ.
  std::vector<int> layer_n_kv_heads;
  // Layers that attend over an earlier layer's K/V and store none (Gemma 4's shared KV): for
  // each layer the layer whose cache it reads (itself for most); empty: every layer its own.
  std::vector<int> kv_source_layers;
  // Pipeline parallelism (dist/model_parallel.h): the layers another rank runs, one flag per
  // layer (empty: this process runs every layer). Their K/V are not kept here
  // (KvCacheConfig::remote_layers).
  std::vector<bool> remote_layers;

  bool layer_slides(int l) const {
    return !sliding_layers.empty() && sliding_layers[static_cast<size_t>(l)];
  }
  int head_dim_of(int l) const {
    return layer_slides(l) && sliding_head_dim > 0 ? sliding_head_dim : head_dim;
  }
  int n_kv_heads_of(int l) const {
    return layer_slides(l) && sliding_n_kv_heads > 0 ? sliding_n_kv_heads : n_kv_heads;
  }
  // A layer's value head size (the sliding layers' is their head size).
  int value_dim_of(int l) const {
    return layer_slides(l) && sliding_head_dim > 0 ? sliding_head_dim
           : value_head_dim > 0                     ? value_head_dim
                                                    : head_dim;
  }
  int rope_dims_of(int l) const {
    return layer_slides(l) && sliding_rope_dims > 0 ? sliding_rope_dims : rope_dims;
  }
  int n_ff_of(int l) const { return layer_n_ff.empty() ? n_ff : layer_n_ff[static_cast<size_t>(l)]; }
  // The layer whose K/V layer l attends over.
  int kv_layer(int l) const {
    return kv_source_layers.empty() ? l : kv_source_layers[static_cast<size_t>(l)];
  }
  // The largest of each over the layers (work buffers).
  int max_head_dim() const { return std::max(head_dim, sliding_head_dim); }
  int max_n_ff() const;
  int64_t max_q_dim() const { return int64_t{n_heads} * max_head_dim(); }
  int64_t max_kv_dim() const;

  // Reads the common `<arch>.*` keys; an absent required key or an inconsistent shape
  // (heads not dividing the hidden size, kv heads not dividing heads) is an inferd::Error.
  static ModelConfig from_gguf(const gguf::GgufFile& file);
  std::string summary() const;
};

}  // namespace inferd::model
