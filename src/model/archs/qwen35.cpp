// The hybrid Qwen family: three layers of every four are Gated DeltaNet linear attention
// (model/gated_delta_net.h), the fourth full attention with a sigmoid output gate per head,
// per-head Q/K norms and RoPE on part of the head; the feed-forward is read as
// `post_attention_norm`.
//   `qwen35`: Qwen3.5 dense (0.8B-27B): interleaved M-RoPE (text positions on its first three
//     axes), SwiGLU feed-forward; key heads tile over the value heads.
//   `qwen35moe`: Qwen3.5 mixtures of experts: the same with a softmax router whose top k are
//     renormalised, plus a shared expert behind a sigmoid gate.
//   `qwen3next`: Qwen3-Next-80B-A3B: NEOX RoPE, the same experts, one ssm_ba tensor for beta
//     and alpha, value heads grouped under their key head.
// Multi-token-prediction blocks in the file are loaded; `--spec mtp` drafts with the first.
#include "model/decoder.h"
#include "model/registry.h"

namespace inferd::model {
namespace {

ArchSpec hybrid_qwen_spec() {
  ArchSpec spec;
  spec.rope_mode = RopeMode::kNeox;
  spec.qk_norms = true;
  spec.gated_attention = true;
  spec.ffn_norm = "post_attention_norm";
  spec.delta_net = DeltaNetSpec{};
  spec.keeps_nextn_layers = true;
  return spec;
}

MoeSpec hybrid_qwen_experts() {
  return MoeSpec{.gating = ExpertGating::kSoftmax, .normalize_weights = true, .shared_expert = true};
}

}  // namespace

std::unique_ptr<Model> make_qwen35(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec = hybrid_qwen_spec();
  spec.interleaved_mrope = true;
  return make_decoder(file, options, spec);
}

std::unique_ptr<Model> make_qwen35moe(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec = hybrid_qwen_spec();
  spec.interleaved_mrope = true;
  spec.moe = hybrid_qwen_experts();
  return make_decoder(file, options, spec);
}

std::unique_ptr<Model> make_qwen3next(const gguf::GgufFile& file, const ModelOptions& options) {
  ArchSpec spec = hybrid_qwen_spec();
  spec.delta_net = DeltaNetSpec{.interleaved_key_heads = true, .combined_beta_alpha = true};
  spec.moe = hybrid_qwen_experts();
  return make_decoder(file, options, spec);
}

}  // namespace inferd::model
