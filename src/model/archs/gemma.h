// What Gemma 2 and Gemma 3 share: embedding times sqrt(hidden), NEOX RoPE, GeGLU, a norm after
// each sub-layer as well as before, and queries scaled by 1 / sqrt(head size), except in the
// 27B models (told apart by their layer count, as llama.cpp does), which use the hidden size
// per head instead.
#pragma once

#include <cmath>

#include "model/decoder.h"

namespace inferd::model {

inline ArchSpec gemma_spec(const ModelConfig& c, int layers_of_27b) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.activation = FfnActivation::kGeluTanh;
  spec.scale_embedding = true;
  spec.post_norms = true;
  const int scale_dim = c.n_layers == layers_of_27b ? c.n_embd / c.n_heads : c.head_dim;
  spec.attention_scale = 1.0f / std::sqrt(static_cast<float>(scale_dim));
  return spec;
}

}  // namespace inferd::model
