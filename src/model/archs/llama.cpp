// `llama`: Llama 2/3, Mistral, SmolLM, TinyLlama and the many files converted under this name.
// The plain decoder: RoPE on adjacent pairs, SwiGLU; Llama 3.1+ rope scaling comes as
// rope_freqs.weight, and some converted files carry attention biases (optional in the decoder).
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_llama(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNormal;
  spec.rope_freq_factors = true;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
