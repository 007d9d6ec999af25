// `gemma4` (text): the Gemma decoder (archs/gemma.h) with RMSNorms of the query and key heads and
// a weightless one of the value heads, scores unscaled (the norms carry the scale), sliding
// layers flagged one by one (`attention.sliding_window_pattern`) with their own head size
// (`attention.key_length_swa`), kv heads (an array `attention.head_count_kv`), rotated
// dimensions (`rope.dimension_count_swa`) and RoPE base (`rope.freq_base_swa`, 10000 when
// absent); the full layers rotate with `rope_freqs.weight` ("proportional" RoPE: divisors of
// 1e30 leave the pairs past the partial rotary factor still). The last
// `attention.shared_kv_layers` layers store no K/V and attend over that of the last sliding or
// full layer before them, a layer without attn_v takes its keys' projection as values,
// `feed_forward_length` may give each layer its own size (the double-wide MLP of the sharing
// layers), `layer_output_scale` scales a layer's output, and the E models add per-layer
// embeddings (`embedding_length_per_layer_input`). The 26B-A4B runs experts beside the dense MLP
// on the layers with a router (ArchSpec::moe_beside_dense_mlp). Facts: llama.cpp's
// src/models/gemma4.cpp.
#include "model/archs/gemma.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::model {

std::unique_ptr<Model> make_gemma4(const gguf::GgufFile& file, const ModelOptions& options) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  const std::string a = "gemma4.";
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.starts_with("v.") || t.name.starts_with("mm.") || t.name.starts_with("a."))
      fail("{}: '{}' is a vision or audio tensor: inferd runs Gemma 4's text model only (llama.cpp "
           "keeps these in a separate projector file)",
           file.name(), t.name);
  }
  ArchSpec spec = gemma_spec(c, /*layers_of_27b=*/-1);
  spec.attention_scale = 1.0f;  // llama.cpp's f_attention_scale for Gemma 4
  spec.qk_norms = true;
  spec.value_norm = true;
  spec.value_from_key_when_absent = true;
  spec.layer_output_scale = true;
  spec.rope_freq_factors = true;
  spec.full_layers_take_rope_freqs = true;
  spec.final_softcap =
      static_cast<float>(file.get_float(a + "final_logit_softcapping").value_or(0.0));
  spec.sliding_window = static_cast<int>(file.require_int(a + "attention.sliding_window"));
  if (spec.sliding_window <= 0)
    fail("{}: '{}attention.sliding_window' = {} must be positive", file.name(), a,
         spec.sliding_window);
  spec.sliding_layers = sliding_layer_pattern(file, c.n_layers, 0);
  spec.sliding_rope_base =
      static_cast<float>(file.get_float(a + "rope.freq_base_swa").value_or(10000.0));
  spec.sliding_rope_scale = 1.0f;
  spec.sliding_head_dim =
      static_cast<int>(file.get_int(a + "attention.key_length_swa").value_or(c.head_dim));
  const int64_t value_swa = file.get_int(a + "attention.value_length_swa").value_or(spec.sliding_head_dim);
  if (value_swa != spec.sliding_head_dim)
    fail("{}: sliding value head size {} differs from the key head size {}: not supported",
         file.name(), value_swa, spec.sliding_head_dim);
  spec.sliding_rope_dims =
      static_cast<int>(file.get_int(a + "rope.dimension_count_swa").value_or(c.rope_dims));
  spec.shared_kv_layers = static_cast<int>(file.get_int(a + "attention.shared_kv_layers").value_or(0));
  if (spec.shared_kv_layers < 0 || spec.shared_kv_layers >= c.n_layers)
    fail("{}: {} KV-sharing layers of {}", file.name(), spec.shared_kv_layers, c.n_layers);
  spec.per_layer_embd =
      static_cast<int>(file.get_int(a + "embedding_length_per_layer_input").value_or(0));
  if (spec.per_layer_embd < 0) fail("{}: negative per-layer embedding size", file.name());
  if (file.get_int(a + "expert_count").value_or(0) > 0) {
    // 26B-A4B: on the layers with a router, experts beside the dense MLP (softmax over all
    // experts, the chosen k's probabilities renormalised, GELU experts, a scale an expert).
    MoeSpec moe;
    moe.gating = ExpertGating::kSoftmax;
    moe.normalize_weights = true;
    moe.activation = ExpertActivation::kGeluTanh;
    moe.expert_scales = true;
    spec.moe = moe;
    spec.moe_beside_dense_mlp = true;
  }
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
