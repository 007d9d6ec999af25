// `qwen2`: Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen. Llama's decoder with RoPE on the two halves
// of each head (NEOX) and biases on the Q/K/V projections (optional in the decoder).
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_qwen2(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
