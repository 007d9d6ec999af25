// ModelConfig: the hyperparameters of a model, read from `<arch>.*` GGUF metadata with
// defaults where the format allows them to be absent.
#pragma once

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
  int n_embd = 0;  // hidden size
  int n_ff = 0;    // feed-forward size
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // per head, for queries and keys (values too)
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

  // Reads the common `<arch>.*` keys; an absent required key or an inconsistent shape
  // (heads not dividing the hidden size, kv heads not dividing heads) is an inferd::Error.
  static ModelConfig from_gguf(const gguf::GgufFile& file);
  std::string summary() const;
};

}  // namespace inferd::model
