// `gpt-oss`: OpenAI's gpt-oss-20b and -120b. NEOX RoPE with YaRN scaling (model/config.h reads
// it), biases on Q/K/V/O, a learned attention sink per head, a window of 128 tokens on every
// other layer (even layers slide), the feed-forward's input norm named post_attention_norm, and
// mixture-of-experts layers: the router (with a bias) picks the top expert_used_count logits and
// weighs them by a softmax over those alone; every expert matrix has a bias, and the activation
// is the clamped SwiGLU (model/moe.h). The experts usually come in MXFP4.
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_gpt_oss(const gguf::GgufFile& file, const ModelOptions& options) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.attention_sinks = true;
  spec.ffn_norm = "post_attention_norm";
  spec.moe = MoeSpec{.gating = ExpertGating::kSoftmaxWeight,
                     .normalize_weights = false,
                     .activation = ExpertActivation::kSwigluOai,
                     .biases = true};
  spec.sliding_window = static_cast<int>(file.require_int("gpt-oss.attention.sliding_window"));
  spec.sliding_layers = sliding_layer_pattern(file, c.n_layers, 2);
  // The sliding layers share the full layers' RoPE (base, scaling and YaRN) unless the file
  // gives them a base of their own.
  spec.sliding_rope_base =
      static_cast<float>(file.get_float("gpt-oss.rope.freq_base_swa").value_or(c.rope_freq_base));
  spec.sliding_rope_scale = c.rope_freq_scale;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
