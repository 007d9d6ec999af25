// `glm4moe`: GLM-4.5 and GLM-4.5-Air (llama.cpp's src/models/glm4-moe.cpp). Attention with Q/K/V
// biases, per-head Q/K norms where the file has them (the 355B model; Air has none), NEOX RoPE
// on the first `rope.dimension_count` dimensions of each head (half of them in the real models),
// the feed-forward's input norm named `post_attention_norm`; the first
// `leading_dense_block_count` layers dense, the others a mixture of experts: a sigmoid router
// whose selection bias `exp_probs_b` picks the top expert_used_count, their sigmoids
// renormalised (`expert_weights_norm`) and scaled (`expert_weights_scale`), SwiGLU experts, plus
// `expert_shared_count` shared experts run by every token and added without a gate. The
// multi-token-prediction block (`nextn_predict_layers`, counted in block_count, a MoE layer of
// the same kind) is loaded; `--spec mtp` drafts with it.
//
// Refused by name: M-RoPE (`rope.dimension_sections` with its first two sections set: the
// GLM-4.5V vision files, which llama.cpp rotates by position axes).
#include "model/decoder.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::model {

std::unique_ptr<Model> make_glm4moe(const gguf::GgufFile& file, const ModelOptions& options) {
  const std::string sections_key = file.architecture() + ".rope.dimension_sections";
  if (const gguf::Array* sections = file.get_array(sections_key); sections != nullptr) {
    const auto section = [&](size_t i) {
      return i < sections->items.size() ? sections->items[i].as_int().value_or(0) : 0;
    };
    if (section(0) > 0 && section(1) > 0)  // llama.cpp's use_mrope()
      fail("{}: '{}' makes this an M-RoPE model (GLM-4.5V), which is not implemented",
           file.name(), sections_key);
  }
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.optional_qk_norms = true;
  spec.ffn_norm = "post_attention_norm";
  spec.moe = MoeSpec{.gating = ExpertGating::kSigmoid, .counted_shared_experts = true};
  spec.keeps_nextn_layers = true;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
