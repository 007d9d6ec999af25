// `phi3`: Phi-3, Phi-3.5 and Phi-4-mini text models. NEOX RoPE over `rope.dimension_count` of
// each head (partial rotary where that is less than the head size), LongRoPE factors for long
// contexts, and fused projections: attn_qkv [q; k; v] and ffn_up [gate; up]. Their
// `attention.sliding_window` is not applied, as llama.cpp does not apply it (its converter's
// window does not match the trained model's).
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_phi3(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.long_rope = true;
  spec.fused_projections = true;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
