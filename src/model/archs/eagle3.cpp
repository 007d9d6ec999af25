// `eagle3`: an EAGLE-3 draft head (a separate small file, `--spec eagle3 --draft-model FILE`),
// as llama.cpp's converter writes one for a Llama, Qwen3 or gpt-oss target. One decoder layer of
// the llama kind whose attention reads the token's normed embedding beside a normed hidden state
// g, where g is fc of the target's hidden states at three of its layers (`target_layers`, each
// the input of that layer) or the head's own output a step before; its vocabulary projection
// may cover a draft vocabulary mapped to the target's by `d2t`. Embeddings and projection are
// the target's where the file has none. Run by the engine's drafter (engine/mtp_drafter.h),
// never as a model of its own.
#include "model/decoder.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::model {

std::unique_ptr<Model> make_eagle3(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNormal;
  spec.rope_freq_factors = true;
  ArchSpec::Eagle3Spec e;
  const gguf::Array* layers = file.get_array("eagle3.target_layers");
  if (layers == nullptr)
    fail("{}: an EAGLE-3 head needs 'eagle3.target_layers' (the target layers it reads)",
         file.name());
  for (const gguf::Value& item : layers->items) {
    const std::optional<int64_t> l = item.as_int();
    if (!l || *l < 0) fail("{}: 'eagle3.target_layers' holds a value that is not a layer", file.name());
    e.target_layers.push_back(static_cast<int>(*l));
  }
  e.target_n_embd = static_cast<int>(file.require_int("eagle3.target_hidden_size"));
  e.norm_before_residual = file.get_bool("eagle3.norm_before_residual").value_or(false);
  e.norm_before_fc = file.get_bool("eagle3.norm_before_fc").value_or(false);
  spec.eagle3 = std::move(e);
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
