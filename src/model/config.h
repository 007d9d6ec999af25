// ModelConfig: the hyperparameters of a model, read from `<arch>.*` GGUF metadata with
// defaults where the format allows them to be absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace inferd::model {

enum class RopeMode { kNormal, kNeox };

struct ModelConfig {
  std::string architecture;
  std::string name;
  int n_layers = 0;
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
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  RopeMode rope_mode = RopeMode::kNormal;
  // Sliding-window attention, set by the architecture: on the layers flagged here (empty: none)
  // a query at position p sees keys p - sliding_window + 1 .. p only.
  int sliding_window = 0;
  std::vector<bool> sliding_layers;

  // Reads the common `<arch>.*` keys; an absent required key or an inconsistent shape
  // (heads not dividing the hidden size, kv heads not dividing heads) is an inferd::Error.
  static ModelConfig from_gguf(const gguf::GgufFile& file);
  std::string summary() const;
};

}  // namespace inferd::model
