// `llama`: Llama 2/3, Mistral, SmolLM, TinyLlama and the many files converted under this name.
// The plain decoder: RoPE on adjacent pairs, SwiGLU; Llama 3.1+ rope scaling comes as
// rope_freqs.weight, and some converted files carry attention biases (optional in the decoder).
// With `llama.expert_count` it is Mixtral: every layer's feed-forward is a mixture of experts
// with a softmax router whose top expert_used_count are renormalised to sum to 1.
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_llama(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNormal;
  spec.rope_freq_factors = true;
  if (file.get_int("llama.expert_count").value_or(0) > 0)
    spec.moe = MoeSpec{
        .gating = ExpertGating::kSoftmax, .normalize_weights = true, .expert_ff_is_ff = true};
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
