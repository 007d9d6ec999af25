// `gemma2`: the Gemma decoder (archs/gemma.h) with soft-capped attention scores and logits and
// sliding-window attention on every other layer (the even ones). Norm weights in the file
// already include Gemma's +1.
#include "model/archs/gemma.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_gemma2(const gguf::GgufFile& file, const ModelOptions& options) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  ArchSpec spec = gemma_spec(c, /*layers_of_27b=*/46);
  spec.attention_softcap =
      static_cast<float>(file.get_float("gemma2.attn_logit_softcapping").value_or(50.0));
  spec.final_softcap =
      static_cast<float>(file.get_float("gemma2.final_logit_softcapping").value_or(30.0));
  spec.sliding_window =
      static_cast<int>(file.get_int("gemma2.attention.sliding_window").value_or(4096));
  spec.sliding_layers = sliding_layer_pattern(file, c.n_layers, 2);
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
