// `deepseek2`: DeepSeek-V2 (and V2-Lite), V2.5, V3, R1, Kimi-K2 and the other files converted to
// this architecture (llama.cpp's src/models/deepseek2.cpp). Multi-head latent attention
// (model/mla.h: queries through a low-rank q_a/q_b with a norm, or a plain attn_q; a compressed
// latent and one shared RoPE key part from attn_kv_a_mqa, decompressed per head by attn_kv_b or by
// attn_k_b and attn_v_b), NORM RoPE on the last `rope.dimension_count` dimensions of each key
// head, keys wider than values; the first `leading_dense_block_count` layers dense, the others a
// mixture of experts: a softmax or sigmoid router (`expert_gating_func`, softmax when absent as
// for the V2 files), the selection bias `exp_probs_b`, expert groups (`expert_group_count`,
// `expert_group_used_count`), the chosen weights renormalised (`expert_weights_norm`) and scaled
// (`expert_weights_scale`), plus `expert_shared_count` ungated shared experts. YaRN as
// deepseek2 takes it: `rope.scaling.yarn_log_multiplier` (0.1 x mscale_all_dim) sets the
// attention scale mscale^2 / sqrt(key head size) and RoPE's factor, and the betas are ggml's
// (32, 1) whatever `yarn_beta_fast`/`yarn_beta_slow` say, as llama.cpp reads this
// architecture. The multi-token-prediction block (`nextn_predict_layers`, counted in
// block_count) is loaded; `--spec mtp` drafts with it.
//
// Refused by name: attention temperature scaling (`attention.temperature_scale`, Mistral-Large
// files), MLA head sizes given without each other or that disagree with the latent's
// (`attention.key_length`/`value_length` of an MLA file, whose `head_count_kv` must be 1), an
// older file whose kv heads are not its heads, and a missing or full-width
// `rope.dimension_count`.
#include <cmath>

#include "model/decoder.h"
#include "model/registry.h"
#include "util/error.h"

namespace inferd::model {
namespace {

// The MLA shapes of the file, as llama.cpp reads them: files that give the MLA head sizes
// (`attention.key_length_mla`, `value_length_mla`) keep the latent's in key_length /
// value_length and decompress with attn_k_b / attn_v_b; older ones give the per-head sizes in
// key_length / value_length and decompress with attn_kv_b.
MlaConfig read_mla(const gguf::GgufFile& file, const ModelConfig& c) {
  const std::string a = file.architecture() + ".attention.";
  const auto size = [&](const std::string& key, int64_t fallback) {
    const int64_t v =
        fallback < 0 ? file.require_int(a + key) : file.get_int(a + key).value_or(fallback);
    if (v <= 0 || v > 65536) fail("{}: '{}' = {} is out of range", file.name(), a + key, v);
    return static_cast<int>(v);
  };
  MlaConfig m;
  m.kv_lora_rank = size("kv_lora_rank", -1);
  // 0 or absent: a plain attn_q (V2-Lite; llama.cpp requires the key but for the Lite shapes).
  const int64_t q_lora = file.get_int(a + "q_lora_rank").value_or(0);
  if (q_lora < 0 || q_lora > 65536)
    fail("{}: '{}' = {} is out of range", file.name(), a + "q_lora_rank", q_lora);
  m.q_lora_rank = static_cast<int>(q_lora);
  const std::string rope_key = file.architecture() + ".rope.dimension_count";
  if (!file.has(rope_key))
    fail("{}: '{}' is missing (the rotated part of each key head)", file.name(), rope_key);
  m.rope_dims = c.rope_dims;
  const bool k_mla = file.has(a + "key_length_mla"), v_mla = file.has(a + "value_length_mla");
  if (k_mla != v_mla)
    fail("{}: '{}' without '{}'", file.name(), a + (k_mla ? "key_length_mla" : "value_length_mla"),
         a + (k_mla ? "value_length_mla" : "key_length_mla"));
  const int fallback = c.n_embd / c.n_heads;
  const int key_length = size("key_length", fallback),
            value_length = size("value_length", fallback);
  int key_dims = key_length;
  m.value_dims = value_length;
  if (k_mla) {
    if (c.n_kv_heads != 1)
      fail("{}: {} kv heads in a file with MLA head sizes (its latent is one kv head)", file.name(),
           c.n_kv_heads);
    m.split_kv_b = true;
    key_dims = size("key_length_mla", -1);
    m.value_dims = size("value_length_mla", -1);
    if (key_length != m.kv_lora_rank + m.rope_dims || value_length != m.kv_lora_rank)
      fail("{}: '{}key_length' = {} and 'value_length' = {} are not the latent's {} + {} and {}",
           file.name(), a, key_length, value_length, m.kv_lora_rank, m.rope_dims, m.kv_lora_rank);
  } else if (c.n_kv_heads != c.n_heads) {
    fail("{}: {} kv heads for {} heads in a file decompressed by attn_kv_b: not supported",
         file.name(), c.n_kv_heads, c.n_heads);
  }
  m.nope_dims = key_dims - m.rope_dims;
  if (m.nope_dims < 1)
    fail("{}: {} rotated dimensions leave none unrotated in key heads of {}", file.name(),
         m.rope_dims, key_dims);
  return m;
}

}  // namespace

std::unique_ptr<Model> make_deepseek2(const gguf::GgufFile& file, const ModelOptions& options) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  const std::string a = file.architecture() + ".";
  if (file.get_float(a + "attention.temperature_scale").value_or(0.0) != 0.0)
    fail("{}: '{}' (attention temperature scaling) is not implemented", file.name(),
         a + "attention.temperature_scale");
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNormal;
  spec.mla = read_mla(file, c);
  // The router's default where the file names none: softmax (the V2 files), but sigmoid for
  // GLM-4.7's Lite files of this architecture (llama.cpp recognises them by shape).
  const int all_layers = c.n_layers + c.n_nextn_layers;
  const bool glm_lite = (all_layers == 47 || all_layers == 48) && c.n_vocab == 154880;
  spec.moe = MoeSpec{.gating = glm_lite ? ExpertGating::kSigmoid : ExpertGating::kSoftmax,
                     .counted_shared_experts = true,
                     .expert_groups = true};
  // YaRN as llama.cpp's deepseek2 takes it (its cparams and graph, in float): RoPE's factor is
  // the file's attention factor, over 1 + 0.1 ln(factor) when yarn_log_multiplier is set (ggml's
  // YaRN multiplies that back in); the scores' scale mscale^2 / sqrt(key head size).
  const float log_mul =
      static_cast<float>(file.get_float(a + "rope.scaling.yarn_log_multiplier").value_or(0.0)) /
      0.1f;
  const float file_factor =
      static_cast<float>(file.get_float(a + "rope.scaling.attn_factor").value_or(1.0));
  const float factor = 1.0f / c.rope_freq_scale;
  const auto get_mscale = [](float scale, float m) {
    return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f;
  };
  float attn_factor = 1.0f;
  if (c.rope_yarn.ext_factor != 0) {
    attn_factor = log_mul != 0 ? get_mscale(factor, log_mul != 1.0f ? log_mul : 1.0f) /
                                     get_mscale(factor, log_mul)
                               : get_mscale(factor, 1.0f);
    attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  attn_factor *= file_factor;
  spec.rope_attn_factor = attn_factor;
  // llama.cpp's deepseek2 reads no `yarn_beta_fast`/`yarn_beta_slow`: ggml's 32 and 1 hold even
  // where the file has others (Kimi-K2's converter writes 1 and 1).
  if (c.rope_yarn.ext_factor != 0) {
    kernels::YarnScaling yarn = c.rope_yarn;
    yarn.beta_fast = 32.0f;
    yarn.beta_slow = 1.0f;
    spec.rope_yarn = yarn;
  }
  const float attn_factor_org = attn_factor * (1.0f + 0.1f * std::log(factor));
  const float mscale = attn_factor_org * (1.0f + 0.1f * log_mul * std::log(factor));
  spec.attention_scale = mscale * mscale / std::sqrt(static_cast<float>(spec.mla->key_dims()));
  spec.keeps_nextn_layers = true;
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
