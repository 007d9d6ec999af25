// `qwen3moe`: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B. Qwen3's attention (NEOX RoPE,
// per-head Q/K norms, head size from `attention.key_length`) with a mixture-of-experts
// feed-forward on every layer: softmax router, the top expert_used_count renormalised to sum
// to 1, SwiGLU experts of `expert_feed_forward_length`.
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_qwen3moe(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.qk_norms = true;
  spec.moe = MoeSpec{.gating = ExpertGating::kSoftmax, .normalize_weights = true};
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
