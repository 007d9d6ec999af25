// `qwen3`: Qwen3 dense models. NEOX RoPE, no biases, and an RMSNorm of every query and key
// head before RoPE; the head size comes from `attention.key_length` (ModelConfig), not from the
// hidden size.
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_qwen3(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.qk_norms = true;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
