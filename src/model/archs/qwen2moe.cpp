// `qwen2moe`: Qwen1.5-MoE-A2.7B and Qwen2-57B-A14B. Qwen2's attention (NEOX RoPE, Q/K/V biases)
// with experts on every layer: a softmax router whose top expert_used_count keep their
// probabilities as they are (no renormalisation), plus a shared expert every token runs,
// scaled by the sigmoid of its own one-row gate (ffn_gate_inp_shexp).
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_qwen2moe(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.moe = MoeSpec{.gating = ExpertGating::kSoftmax, .normalize_weights = false,
                     .shared_expert = true};
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
