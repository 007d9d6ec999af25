// `gemma3` (text): the Gemma decoder (archs/gemma.h) without attention soft-capping, with
// RMSNorms of the query and key heads, and five sliding-window layers in every six
// (l % 6 != 5) whose RoPE has its own base (`rope.freq_base_swa`, 10000 when absent) and no
// linear scaling.
#include "model/archs/gemma.h"
#include "model/registry.h"

namespace inferd::model {

std::unique_ptr<Model> make_gemma3(const gguf::GgufFile& file, const ModelOptions& options) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  ArchSpec spec = gemma_spec(c, /*layers_of_27b=*/62);
  spec.qk_norms = true;
  spec.final_softcap =
      static_cast<float>(file.get_float("gemma3.final_logit_softcapping").value_or(0.0));
  const int64_t window = file.get_int("gemma3.attention.sliding_window").value_or(0);
  if (window > 0) {
    spec.sliding_window = static_cast<int>(window);
    spec.sliding_layers = sliding_layer_pattern(file, c.n_layers, 6);
    spec.sliding_rope_base =
        static_cast<float>(file.get_float("gemma3.rope.freq_base_swa").value_or(10000.0));
    spec.sliding_rope_scale = 1.0f;
  }
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
