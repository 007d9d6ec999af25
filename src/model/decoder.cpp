// The shared decoder (model/decoder.h): RMSNorm, RoPE, grouped-query attention over the paged
// KV cache, gated feed-forward, optional tied output embedding, and the variations an ArchSpec
// switches on.
#include "model/decoder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include <fmt/core.h>

#include "dist/communicator.h"
#include "dist/model_parallel.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/data_parallel.h"
#include "model/exact_copies.h"
#include "model/layer_weights.h"
#include "model/lora.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/huge_pages.h"

namespace inferd::model {
namespace {

using kernels::WeightMatrix;

struct DecoderLayer {
  const float* attn_norm;  // [n_embd]
  WeightMatrix wq;         // [n_heads * head_dim, n_embd]
  WeightMatrix wk;         // [n_kv_heads * head_dim, n_embd]
  WeightMatrix wv;         // [n_kv_heads * head_dim, n_embd]
  WeightMatrix wo;         // [n_embd, n_heads * head_dim]
  const float* ffn_norm;   // [n_embd]
  WeightMatrix w_gate;     // [n_ff, n_embd]
  WeightMatrix w_up;       // [n_ff, n_embd]
  WeightMatrix w_down;     // [n_embd, n_ff]
  // Optional biases (Qwen-style files under the llama name); nullptr when the file has none.
  const float* bq = nullptr;  // [n_heads * head_dim]
  const float* bk = nullptr;  // [n_kv_heads * head_dim]
  const float* bv = nullptr;  // [n_kv_heads * head_dim]
  const float* bo = nullptr;  // [n_embd]
  // ArchSpec::qk_norms: [head_dim] each; ArchSpec::post_norms: [n_embd] each.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  const float* attn_sinks = nullptr;  // [n_heads] ArchSpec::attention_sinks
  std::optional<MoeLayer> moe;  // experts instead of w_gate/w_up/w_down (ArchSpec::moe)
  std::optional<MlaLayer> mla;  // latent attention instead of wq/wk/wv (ArchSpec::mla)
  // Gated DeltaNet instead of attention (ArchSpec::delta_net, a recurrent layer): wq..wo unset.
  std::optional<DeltaNetLayer> delta_net;
  bool sliding = false;         // attends over a window of recent keys only
  const kernels::RopeTable* rope = nullptr;  // the model's table for this layer
  // [head_dim] a quantized cache's keys are divided by it and queries multiplied (Decoder::
  // set_key_equalizer); empty: none.
  std::vector<float> key_equalizer;
  // Its geometry (ModelConfig::*_of: Gemma 4's sliding and full layers differ).
  int head_dim = 0, n_kv_heads = 0, n_ff = 0;
  int value_dim = 0;            // a value head's size (MLA's differs from head_dim)
  int kv_layer = 0;             // whose K/V it attends over: itself, or an earlier layer's
  bool value_from_key = false;  // no attn_v: the keys' projection is the values' (Gemma 4)
  // An EAGLE-3 head's layer: Q/K/V read ws.mtp_in ([normed embedding; normed g], built by
  // run_mtp_block) instead of attn_norm of the residual stream.
  bool reads_fused_input = false;
  float out_scale = 1.0f;       // layer_output_scale (Gemma 4)
  // Per-layer embeddings (ArchSpec::per_layer_embd): the layer's output, gelu-gated by its
  // per-layer input, projected back and normed, joins the residual stream.
  WeightMatrix ple_gate;                 // [per_layer_embd, n_embd]
  WeightMatrix ple_proj;                 // [n_embd, per_layer_embd]
  const float* ple_post_norm = nullptr;  // [n_embd]
  // Experts beside the dense MLP (ArchSpec::moe_beside_dense_mlp), [n_embd] each.
  const float* router_scale = nullptr;   // ffn_gate_inp.scale
  const float* pre_moe_norm = nullptr;   // pre_ffw_norm_2
  const float* post_mlp_norm = nullptr;  // post_ffw_norm_1
  const float* post_moe_norm = nullptr;  // post_ffw_norm_2
  // Whether the layer completes the residual stream itself (per-layer embeddings, an output
  // scale) instead of leaving its feed-forward output to the next layer's first pass.
  bool finishes_residual() const { return ple_post_norm != nullptr || out_scale != 1.0f; }
};

// Work buffers for up to max_tokens tokens, allocated once, in huge pages (util/huge_pages.h).
struct DecoderWorkspace {
  HugePageArena memory;      // holds the spans below
  std::span<float> x;        // [T, n_embd] residual stream
  std::span<float> h;        // [T, n_embd] normed input of a sub-layer
  std::span<float> q;        // [T, n_heads * head_dim]
  std::span<float> q_gated;  // [T, n_heads * 2 * head_dim] ArchSpec::gated_attention: per head q, gate
  std::span<float> attn_gate;  // [T, n_heads * head_dim] the gates, then their sigmoid
  std::span<float> k;        // [T, n_kv_heads * head_dim]
  std::span<float> v;        // [T, n_kv_heads * head_dim]
  std::span<float> attn;     // [T, n_heads * head_dim]
  std::span<float> proj;     // [T, n_embd] output of wo / w_down
  std::span<float> gate;     // [T, n_ff]
  std::span<float> up;       // [T, n_ff]
  std::span<float> last;     // [R, n_embd] rows that need logits
  // ModelConfig::mtp: the MTP block's input, [T, 2 * n_embd]: each token's normed embedding,
  // then the normed hidden state it is paired with (an EAGLE-3 head's: the normed g).
  std::span<float> mtp_in;
  // An EAGLE-3 head with norm_before_fc: the normed features, [T, features width].
  std::span<float> fc_in;
  // An EAGLE-3 head with a draft vocabulary: one row of its logits, [draft vocabulary].
  std::span<float> draft_row;
  // Per-layer embeddings: each token's inputs of every layer, [T, n_layers * per_layer_embd],
  // the rows of per_layer_token_embd, the same shape, and a layer's gate, [T, per_layer_embd].
  std::span<float> ple_inputs;
  std::span<float> ple_rows;
  std::span<float> ple_gate;
  std::span<float> ones;     // [max head_dim] 1s: the weights of the value norm
  std::span<float> ones_embd;   // [n_embd] 1s: the weights of Gemma 4's router norm
  std::span<float> router_in;   // [T, n_embd] ArchSpec::moe_beside_dense_mlp: what the router scores
  std::span<float> moe_out;     // [T, n_embd] and the experts' output
  // Tensor and data parallelism: this rank's slice of up to 16 rows of logits, [16, vocabulary slice],
  // and on rank 0 every rank's slices as they come together, [16, n_vocab].
  std::span<float> tp_logits;
  std::span<float> tp_gathered;
  // Pipeline parallelism: what this rank sends, each micro-batch's rows at its tokens' place,
  // [T, n_embd] (rank 0 receives the final rows there too).
  std::span<float> pipeline_out;
  // Rank 0 of a pipeline: the last rank's final rows of each batch in flight, [depth, max_tokens,
  // n_embd] (pipeline_back(slot)).
  std::span<float> pipeline_back;
  // Data parallelism: this rank's final rows and its tokens' routing margins as it sends them
  // to every rank, [2 T, n_embd] then [T] (a token may be a logit and a hidden-state row), every
  // rank's as they come together, and this rank's tokens' margins, [T].
  std::span<float> dp_send;
  std::span<float> dp_gathered;
  std::span<float> dp_margins;
  std::span<int64_t> slots;  // [kMaxKvGroups, T] each token's KV slot in each group
  kernels::ActivationScratch scratch;
};

class Decoder final : public Model {
 public:
  Decoder(const gguf::GgufFile& file, const ModelOptions& options, ArchSpec spec)
      : config_(ModelConfig::from_gguf(file)),
        spec_(std::move(spec)),
        max_tokens_(options.max_batch_tokens) {
    config_.rope_mode = spec_.rope_mode;
    apply_attention_geometry(file.name());
    if (spec_.attention_scale <= 0)
      spec_.attention_scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
    const ModelConfig& c = config_;
    if (!spec_.sliding_layers.empty() && std::ssize(spec_.sliding_layers) != c.n_layers)
      fail("{}: sliding-window flags for {} of {} layers", file.name(), spec_.sliding_layers.size(),
           c.n_layers);
    if (spec_.sliding_window > 0) {  // the KV cache gives these layers a group of their own
      config_.sliding_window = spec_.sliding_window;
      config_.sliding_layers = spec_.sliding_layers;
    }
    apply_layer_geometry(file.name());
    if (c.max_head_dim() > kv::KvCache::kMaxHeadDim)
      fail("{}: head size {} is above the supported {}", file.name(), c.max_head_dim(),
           kv::KvCache::kMaxHeadDim);
    if (spec_.moe) moe_config_ = MoeConfig::from_gguf(file, *spec_.moe, c.n_ff);
    if (spec_.delta_net) {
      delta_config_ = DeltaNetConfig::from_gguf(file, c.n_layers, c.rms_eps);
      config_.recurrent_layers = delta_config_->recurrent_layers;
    }
    WeightLoader w(file);
    if (options.tp != nullptr && options.tp->size() > 1 && options.pp != nullptr &&
        options.pp->size() > 1)
      fail("{}: tensor and pipeline parallelism at once are not implemented", file.name());
    if (options.dp != nullptr && options.dp->size() > 1) {
      if ((options.tp != nullptr && options.tp->size() > 1) || (options.pp != nullptr && options.pp->size() > 1))
        fail("{}: data parallelism with tensor or pipeline parallelism is not implemented", file.name());
      split_for_data_parallel(file, options);
    }
    if (options.tp != nullptr && options.tp->size() > 1) split_for_tensor_parallel(file, options, w);
    layer_end_ = c.n_layers;
    if (options.pp != nullptr && options.pp->size() > 1) split_for_pipeline(file, options);
    if (spec_.eagle3) {
      load_eagle3_head(file, w, options);
    } else {
      load_trunk(file, w, options);
    }
    const int64_t max_context = options.max_context > 0 ? options.max_context : c.context_length;
    const std::string factors = rope_factor_tensor(file, spec_, c, max_context);
    const float* freq_factors = nullptr;
    for (const std::string& name : rope_factor_tensors(spec_)) {
      const float* f = w.optional_vector(name, c.rope_dims / 2);
      if (name == factors) freq_factors = f;
    }
    std::vector<float> mrope_divisors;
    if (spec_.interleaved_mrope) {
      if (freq_factors != nullptr) fail("{}: M-RoPE with frequency factors is not implemented", file.name());
      mrope_divisors = interleaved_mrope_text_divisors(file, c.rope_dims);
      if (!mrope_divisors.empty()) freq_factors = mrope_divisors.data();
    }
    w.check_all_used();
    weights_memory_ = w.memory();
    if (!options.lora.empty()) load_lora(file, options);
    rope_ = make_rope_tables(c, spec_, max_context,
                             freq_factors ? std::span<const float>(freq_factors, size_t(c.rope_dims / 2))
                                          : std::span<const float>());
    for (DecoderLayer& layer : layers_) layer.rope = &rope_.for_layer(layer.sliding);
    if (options.equalize_quantized_keys)
      for (size_t l = 0; l < layers_.size(); ++l) set_key_equalizer(static_cast<int>(l));
    allocate_workspace();
  }

  // A quantized cache's keys divided channel by channel by e and the queries multiplied by it,
  // so that q . k is unchanged while the key channels that the layer's key norm makes large (up
  // to 10x the mean in Gemma 3) take less of each Q4_0/Q8_0 block's range from the small ones.
  // e = sqrt(|k_norm| / |q_norm|) over each RoPE pair (RoPE turns a pair together, so both of
  // its channels take one factor), which balances |q_c e_c| against |k_c / e_c|: the score's
  // quantization error, sum_c q_c e_c err_c, is smallest when both sides are even. Only layers
  // with query and key norms (the weights say how large each channel is). Measured on Gemma 3
  // 270M at -c 4096 with Q4_0 keys and values: perplexity +4.2% over an F16 cache, against +14.6%
  // without (exponents 0.35, 0.7 and 1 instead of 0.5: +5.6%, +5.6%, +6.8%; docs/BENCHMARKS.md).
  // The cache's Hadamard rotation then mixes the evened channels (kv_cache.h).
  void set_key_equalizer(int l) {
    DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    if (layer.q_norm == nullptr || layer.k_norm == nullptr) return;
    const int d = layer.head_dim, rotated = config_.rope_dims_of(l);
    const bool neox = spec_.rope_mode == RopeMode::kNeox;
    layer.key_equalizer.assign(static_cast<size_t>(d), 1.0f);
    const auto pair_of = [&](int c) {  // the channel RoPE turns with c (c itself past the rotated ones)
      if (c >= rotated) return c;
      return neox ? (c < rotated / 2 ? c + rotated / 2 : c - rotated / 2) : (c ^ 1);
    };
    double log_sum = 0;
    for (int c = 0; c < d; ++c) {
      const int o = pair_of(c);
      const double q = std::hypot(layer.q_norm[c], layer.q_norm[o]);
      const double k = std::hypot(layer.k_norm[c], layer.k_norm[o]);
      const double e = q > 1e-6 && k > 1e-6 ? std::sqrt(k / q) : 1.0;
      layer.key_equalizer[static_cast<size_t>(c)] = static_cast<float>(e);
      log_sum += std::log(e);
    }
    const double mean = std::exp(log_sum / d);  // (a geometric mean of 1: sizes as they were)
    for (float& e : layer.key_equalizer) e = static_cast<float>(e / mean);
  }

  // LoRA adapters (model/lora.h) on the attention and dense feed-forward projections of every
  // layer; the base weights stay as they are. Not with the model split over ranks.
  void load_lora(const gguf::GgufFile& file, const ModelOptions& options) {
    refuse_lora_where_not_implemented(file.name(), options.tp, options.pp, options.dp);
    lora_ = LoraAdapters(options.lora, config_.architecture);
    bind_lora();
  }

  void add_lora_adapter(const LoraSpec& spec) override {
    refuse_lora_where_not_implemented(config_.name, tp_, pp_, dp_);
    lora_.add(spec, config_.architecture);
    try {
      bind_lora();
    } catch (...) {
      lora_.drop_last();
      throw;
    }
  }

  void refuse_lora_where_not_implemented(const std::string& name, const dist::Communicator* tp,
                                         const dist::Communicator* pp,
                                         const dist::Communicator* dp) const {
    const auto split = [](const dist::Communicator* ranks) {
      return ranks != nullptr && ranks->size() > 1;
    };
    if (split(tp) || split(pp) || split(dp))
      fail("{}: LoRA adapters with the model split over ranks are not implemented", name);
    if (spec_.eagle3) fail("{}: LoRA adapters on an EAGLE-3 head are not implemented", name);
  }

  // The adapters' pending pairs onto the weights they name, then the work lists sized.
  void bind_lora() {
    for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
      if (!runs_layer(l)) continue;
      DecoderLayer& layer = layers_[static_cast<size_t>(l)];
      const std::string p = layer_prefix(l);
      const std::pair<const char*, const kernels::WeightMatrix*> weights[] = {
          {"attn_q.weight", &layer.wq},       {"attn_k.weight", &layer.wk},
          {"attn_v.weight", &layer.wv},       {"attn_output.weight", &layer.wo},
          {"ffn_gate.weight", &layer.w_gate}, {"ffn_up.weight", &layer.w_up},
          {"ffn_down.weight", &layer.w_down}};
      for (const auto& [name, weight] : weights)
        if (weight->data != nullptr || weight->packed) lora_.bind(p + name, weight);
    }
    lora_.check_all_bound();
    lora_.reserve(max_tokens_);
  }

  // Tensor parallelism (dist/model_parallel.h): this rank's share of the heads, kv heads and
  // feed-forward width (config_ holds them from here on, so every shape below is the shard's),
  // its slice of the vocabulary, and the loader set to take its parts of the tensors. Rank 0
  // first tells the other ranks to load theirs. What the split does not cover is refused by
  // name.
  void split_for_tensor_parallel(const gguf::GgufFile& file, const ModelOptions& options,
                                 WeightLoader& w) {
    tp_ = options.tp;
    const int ranks = tp_->size();
    ModelConfig& c = config_;
    const auto refuse = [&](const char* what) {
      fail("{}: tensor parallelism over {} ranks is not implemented for {}", file.name(), ranks,
           what);
    };
    if (spec_.moe && !options.expert_parallel)
      refuse("mixtures of experts without --expert-parallel (experts are spread whole, not "
             "split by columns)");
    if (options.expert_parallel && !spec_.moe)
      fail("{}: --expert-parallel: the model has no experts to spread", file.name());
    if (spec_.mla) refuse("multi-head latent attention (DeepSeek)");
    if (spec_.delta_net) refuse("hybrid models with recurrent layers");
    if (spec_.gated_attention) refuse("gated attention");
    if (spec_.fused_projections) refuse("fused Q/K/V and gate/up tensors (Phi-3)");
    if (spec_.per_layer_embd > 0 || spec_.shared_kv_layers > 0 || !c.layer_n_kv_heads.empty() ||
        !c.layer_n_ff.empty() || c.sliding_head_dim > 0)
      refuse("layers of different shapes (Gemma 4)");
    if (spec_.eagle3 || options.mtp) refuse("draft heads (EAGLE-3, MTP)");
    // (A model whose every layer has experts splits no dense feed-forward.)
    const bool dense_layers = !moe_config_ || moe_config_->leading_dense > 0;
    if (c.n_heads % ranks != 0 || c.n_kv_heads % ranks != 0 || (dense_layers && c.n_ff % ranks != 0))
      fail("{}: {} heads, {} kv heads and a feed-forward of {} do not split into {} ranks: "
           "--tensor-parallel must divide each",
           file.name(), c.n_heads, c.n_kv_heads, c.n_ff, ranks);
    if (moe_config_) {  // expert parallelism: whole experts by rank, the shared one by columns
      MoeConfig& m = *moe_config_;
      if (m.n_experts < ranks || m.n_ff_shared % ranks != 0)
        fail("{}: {} experts and a shared expert of {} do not spread over {} ranks", file.name(),
             m.n_experts, m.n_ff_shared, ranks);
      m.expert_begin = m.n_experts * tp_->rank() / ranks;
      m.expert_end = m.n_experts * (tp_->rank() + 1) / ranks;
      m.n_ff_shared /= ranks;
    }
    if (tp_->rank() == 0) {
      dist::encode_load(message_, file.name(), options.max_batch_tokens, options.max_context,
                        options.expert_parallel ? dist::Parallelism::kTensorAndExperts
                                                : dist::Parallelism::kTensor);
      tp_->broadcast(message_);
    }
    c.n_heads /= ranks;
    c.n_kv_heads /= ranks;
    c.n_ff /= ranks;
    split_vocabulary(tp_);
    w.shard(tp_->rank(), ranks);
  }

  // Pipeline parallelism (dist/model_parallel.h): this rank's run of layers (the others' are
  // skipped at load and flagged in ModelConfig::remote_layers, so that its KV cache keeps only
  // its own), rank 0 holding the vocabulary too. Rank 0 first tells the other ranks to load
  // theirs. What the split does not cover is refused by name.
  void split_for_pipeline(const gguf::GgufFile& file, const ModelOptions& options) {
    pp_ = options.pp;
    const int ranks = pp_->size();
    const ModelConfig& c = config_;
    const auto refuse = [&](const char* what) {
      fail("{}: pipeline parallelism over {} ranks is not implemented for {}", file.name(), ranks,
           what);
    };
    if (spec_.eagle3 || options.mtp) refuse("draft heads (EAGLE-3, MTP)");
    if (spec_.per_layer_embd > 0) refuse("per-layer embeddings (Gemma 4's E models)");
    if (spec_.shared_kv_layers > 0) refuse("layers that read an earlier layer's K/V (Gemma 4)");
    if (c.n_layers < ranks)
      fail("{}: {} layers do not split into {} ranks: --pipeline-parallel must be at most the "
           "layer count",
           file.name(), c.n_layers, ranks);
    if (pp_->rank() == 0) {
      dist::encode_load(message_, file.name(), options.max_batch_tokens, options.max_context,
                        dist::Parallelism::kPipeline);
      pp_->broadcast(message_);
    }
    const std::vector<int> first = pipeline_stages(file, c.n_layers, ranks);
    layer_begin_ = first[static_cast<size_t>(pp_->rank())];
    layer_end_ = first[static_cast<size_t>(pp_->rank()) + 1];
    config_.remote_layers.assign(static_cast<size_t>(c.n_layers), true);
    for (int l = layer_begin_; l < layer_end_; ++l) config_.remote_layers[static_cast<size_t>(l)] = false;
  }

  // Tensor and data parallelism: this rank's rows of the vocabulary projection, 1/N of them
  // (the logits' slices come together on rank 0, gather_logits).
  void split_vocabulary(dist::Communicator* ranks) {
    vocab_ranks_ = ranks;
    const int n = ranks->size();
    const int64_t n_vocab = config_.n_vocab, slice = (n_vocab + n - 1) / n;
    for (int r = 0; r < n; ++r) vocab_counts_.push_back(std::clamp<int64_t>(n_vocab - r * slice, 0, slice));
    vocab_begin_ = ranks->rank() * slice;
  }

  // Data parallelism (dist/model_parallel.h, model/data_parallel.h): the whole model on every
  // rank but 1/N of the vocabulary projection, each running its own sequences, with
  // --expert-parallel its share of the experts (the MoE block then sends tokens to their
  // experts' ranks and back). Rank 0 first tells the other ranks to load theirs. What it does
  // not cover is refused by name.
  void split_for_data_parallel(const gguf::GgufFile& file, const ModelOptions& options) {
    dp_ = options.dp;
    const int ranks = dp_->size();
    if (spec_.eagle3 || options.mtp)
      fail("{}: data parallelism over {} ranks is not implemented for draft heads (EAGLE-3, MTP)",
           file.name(), ranks);
    if (options.expert_parallel) {
      if (!moe_config_) fail("{}: --expert-parallel: the model has no experts to spread", file.name());
      MoeConfig& m = *moe_config_;
      if (m.n_experts < ranks)
        fail("{}: {} experts do not spread over {} ranks", file.name(), m.n_experts, ranks);
      m.expert_begin = m.n_experts * dp_->rank() / ranks;
      m.expert_end = m.n_experts * (dp_->rank() + 1) / ranks;
      dp_experts_ = true;
    }
    if (dp_->rank() == 0) {
      dist::encode_load(message_, file.name(), options.max_batch_tokens, options.max_context,
                        options.expert_parallel ? dist::Parallelism::kDataAndExperts
                                                : dist::Parallelism::kData);
      dp_->broadcast(message_);
    }
    split_vocabulary(dp_);
  }

  // The other ranks, when this process is rank 0 of a split model (it tells them what to do);
  // nullptr otherwise.
  dist::Communicator* followers() const {
    dist::Communicator* ranks = tp_ != nullptr ? tp_ : pp_ != nullptr ? pp_ : dp_;
    return ranks != nullptr && ranks->rank() == 0 ? ranks : nullptr;
  }
  // Rank 0 of a split model: the other ranks do the same recurrent-state operation.
  void tell_followers(dist::Op op, int32_t from, int32_t to) {
    if (dist::Communicator* ranks = followers()) {
      dist::encode_state_op(message_, op, from, to);
      ranks->broadcast(message_);
    }
  }

  // The first layer of each of `ranks` pipeline stages, and n_layers last: runs of layers whose
  // weights (the file's bytes) come out about even, rank 0's counting the token embeddings and
  // the vocabulary projection it holds besides. A decode step reads every weight once, so even
  // bytes are even times too; and memory is what a pipeline is for. Every rank computes the
  // same from the file.
  static std::vector<int> pipeline_stages(const gguf::GgufFile& file, int n_layers, int ranks) {
    std::vector<double> layer_bytes(static_cast<size_t>(n_layers), 0.0);
    double vocabulary = 0;
    for (const gguf::TensorInfo& t : file.tensors()) {
      int layer = -1;
      if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= 0 && layer < n_layers) {
        layer_bytes[static_cast<size_t>(layer)] += static_cast<double>(t.num_bytes);
      } else if (layer < 0) {
        vocabulary += static_cast<double>(t.num_bytes);  // (MTP layers past n_layers: skipped)
      }
    }
    double total = vocabulary;
    for (const double b : layer_bytes) total += b;
    std::vector<int> first{0};
    double held = vocabulary;  // by the ranks before the next boundary
    for (int l = 0; l < n_layers && std::ssize(first) < ranks; ++l) {
      const int stage = static_cast<int>(first.size()) - 1;
      const int left = n_layers - l;  // layers l.. for this and the later ranks
      const int later = ranks - 1 - stage;
      // End this stage before layer l once its share is reached, or when the later ranks need
      // every layer left (each holds one at least); never with none of its own.
      if (l > first.back() && (held >= total * (stage + 1) / ranks || left == later))
        first.push_back(l);
      held += layer_bytes[static_cast<size_t>(l)];
    }
    if (std::ssize(first) != ranks) fail("{}: no split of {} layers into {} stages", file.name(), n_layers, ranks);
    first.push_back(n_layers);
    return first;
  }

  // Whether this rank runs layer l (pipeline parallelism: its run of layers; else every one).
  bool runs_layer(int l) const { return l >= layer_begin_ && l < layer_end_; }
  // Whether this rank holds the token embeddings and the vocabulary projection (rank 0 of a
  // pipeline; every rank otherwise).
  bool holds_vocabulary() const { return pp_ == nullptr || pp_->rank() == 0; }

  // The token embeddings, the layers and the output of an ordinary model, and its MTP blocks.
  void load_trunk(const gguf::GgufFile& file, WeightLoader& w, const ModelOptions& options) {
    const ModelConfig& c = config_;
    if (!holds_vocabulary()) {  // rank 0 of the pipeline embeds and projects
      for (const char* name : {"token_embd.weight", "output.weight", "output_norm.weight"})
        w.skip(name);
    } else {
      load_vocabulary(w);
    }
    for (int i = 0; i < c.n_layers; ++i) {
      DecoderLayer& layer = layers_.emplace_back();
      if (runs_layer(i)) {
        load_layer(w, i, layer);
        continue;
      }
      // Another rank's layer: its tensors are that rank's to load (and check); its share of the
      // recurrent state is counted all the same, so that every rank lays the state out alike.
      w.skip_prefix(layer_prefix(i));
      if (delta_config_ && delta_config_->recurrent_layers[static_cast<size_t>(i)])
        config_.recurrent_state_floats += delta_config_->layer_state_floats();
    }
    load_mtp_blocks(file, w, options);
  }

  // The token embeddings, the per-layer embedding tables, the output norm and the vocabulary
  // projection (tensor parallelism: this rank's rows of it).
  void load_vocabulary(WeightLoader& w) {
    const ModelConfig& c = config_;
    // Looked up row by row; multiplied too when the output is tied to it.
    w.keep_rows("token_embd.weight", !w.has("output.weight"));
    if (spec_.per_layer_embd > 0) {  // a row a token, read in place: never the whole table
      const int64_t n = int64_t{spec_.per_layer_embd} * c.n_layers;
      w.keep_rows("per_layer_token_embd.weight", false);
      ple_table_ = w.matrix("per_layer_token_embd.weight", c.n_vocab, n);
      ple_model_proj_ = w.matrix("per_layer_model_proj.weight", n, c.n_embd);
      ple_proj_norm_ = w.vector("per_layer_proj_norm.weight", spec_.per_layer_embd);
    }
    if (vocab_ranks_ != nullptr) {  // this rank's rows of the vocabulary projection, packed
      const std::string name = w.has("output.weight") ? "output.weight" : "token_embd.weight";
      const int64_t rows = vocab_counts_[static_cast<size_t>(vocab_ranks_->rank())];
      w.keep_rows("token_embd.weight", name == "token_embd.weight");
      output_ = w.matrix_rows(name, vocab_begin_, rows, c.n_vocab, c.n_embd);
      w.keep_rows("token_embd.weight", false);
    }
    token_embd_ = w.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    output_norm_ = w.vector("output_norm.weight", c.n_embd);
    if (vocab_ranks_ == nullptr)
      output_ = w.has("output.weight") ? w.matrix("output.weight", c.n_vocab, c.n_embd) : token_embd_;
  }

  // Layer i's tensors: a recurrent or an attention layer, the feed-forward (dense, experts or
  // both) and the extras of its architecture.
  void load_layer(WeightLoader& w, int i, DecoderLayer& layer) {
    const ModelConfig& c = config_;
    if (delta_config_ && delta_config_->recurrent_layers[static_cast<size_t>(i)]) {
      const std::string p = layer_prefix(i);
      layer.attn_norm = w.vector(p + "attn_norm.weight", c.n_embd);
      layer.ffn_norm = w.vector(p + spec_.ffn_norm + ".weight", c.n_embd);
      layer.delta_net = load_delta_net_layer(w, p, *delta_config_, *spec_.delta_net, c.n_embd);
      layer.delta_net->state_offset = config_.recurrent_state_floats;
      config_.recurrent_state_floats += delta_config_->layer_state_floats();
    } else {
      load_attention(w, i, layer);
      layer.value_from_key =
          spec_.value_from_key_when_absent && !w.has(layer_prefix(i) + "attn_v.weight");
    }
    layer.head_dim = c.head_dim_of(i);
    layer.value_dim = c.value_dim_of(i);
    layer.n_kv_heads = c.n_kv_heads_of(i);
    layer.n_ff = c.n_ff_of(i);
    layer.kv_layer = c.kv_layer(i);
    load_gemma4_layer_extras(w, i, layer);
    // Experts from leading_dense_block_count on, or (Gemma 4) where the layer has a router,
    // then beside the dense MLP.
    const std::string p = layer_prefix(i);
    const bool experts = moe_config_ && (spec_.moe_beside_dense_mlp
                                             ? w.has(p + "ffn_gate_inp.weight")
                                             : moe_config_->moe_layer(i));
    if (experts) layer.moe = load_moe_layer(w, p, *moe_config_, *spec_.moe, c.n_embd);
    if (!experts || spec_.moe_beside_dense_mlp) load_layer_dense_ffn(w, spec_, c, i, layer);
    if (experts && spec_.moe_beside_dense_mlp) {
      layer.router_scale = w.vector(p + "ffn_gate_inp.scale", c.n_embd);
      layer.pre_moe_norm = w.vector(p + "pre_ffw_norm_2.weight", c.n_embd);
      layer.post_mlp_norm = w.vector(p + "post_ffw_norm_1.weight", c.n_embd);
      layer.post_moe_norm = w.vector(p + "post_ffw_norm_2.weight", c.n_embd);
    }
    if (spec_.attention_sinks)
      layer.attn_sinks = w.vector(layer_prefix(i) + "attn_sinks.weight", c.n_heads);
  }

  // The file's multi-token-prediction blocks (ModelConfig::n_nextn_layers), loaded to draft
  // with (ModelOptions::mtp) or kept and said not run; a pipeline's ranks skip them (drafting is
  // refused there).
  void load_mtp_blocks(const gguf::GgufFile& file, WeightLoader& w, const ModelOptions& options) {
    const ModelConfig& c = config_;
    if (pp_ != nullptr) {
      for (int l = c.n_layers; l < c.n_layers + c.n_nextn_layers; ++l) w.skip_prefix(layer_prefix(l));
      return;
    }
    if (options.mtp && !spec_.keeps_nextn_layers)
      fail("{}: multi-token-prediction drafting is not implemented for architecture '{}'",
           file.name(), c.architecture);
    if (options.mtp && c.n_nextn_layers == 0)
      fail("{}: the file has no multi-token-prediction layer (`nextn_predict_layers`) to draft "
           "with (--spec mtp)",
           file.name());
    if (options.mtp && c.n_nextn_layers != 1)
      fail("{}: {} multi-token-prediction layers; MTP drafting runs files with one", file.name(),
           c.n_nextn_layers);
    if (spec_.keeps_nextn_layers) {
      for (int l = c.n_layers; l < c.n_layers + c.n_nextn_layers; ++l) load_mtp_block(file, w, l);
      config_.mtp = options.mtp;
      if (c.n_nextn_layers > 0 && !options.mtp) {  // said once, where a user reads start-up lines
        fmt::print(stderr,
                   "[inferd] {}: {} multi-token-prediction layer(s) loaded and not run: `--spec "
                   "mtp` drafts with them\n",
                   file.name(), c.n_nextn_layers);
      }
    }
  }

  // An EAGLE-3 head (ArchSpec::eagle3): its one layer, fc and its norms, and the token
  // embeddings and vocabulary projection of its own, or else the target's
  // (ModelOptions::target). Its draft vocabulary (the rows of its projection) maps to the
  // target's through d2t, as llama.cpp's converter writes it (absolute target ids).
  void load_eagle3_head(const gguf::GgufFile& file, WeightLoader& w, const ModelOptions& options) {
    const ModelConfig& c = config_;
    const ArchSpec::Eagle3Spec& e = *spec_.eagle3;
    if (options.target == nullptr)
      fail("{}: an EAGLE-3 head drafts for a model, it is none itself: pass it with --spec eagle3 "
           "--draft-model",
           file.name());
    if (c.n_layers != 1) fail("{}: an EAGLE-3 head has one layer, not {}", file.name(), c.n_layers);
    if (e.target_layers.empty() || e.target_n_embd <= 0)
      fail("{}: the EAGLE-3 head names no target layers or target hidden size", file.name());
    {
      const ModelConfig& t = options.target->config();
      if (t.n_embd != e.target_n_embd)
        fail("{}: the EAGLE-3 head reads hidden states of {} values; the target's are {}",
             file.name(), e.target_n_embd, t.n_embd);
      if (t.n_vocab != c.n_vocab)
        fail("{}: the EAGLE-3 head's vocabulary has {} tokens; the target's {}", file.name(),
             c.n_vocab, t.n_vocab);
      for (const int l : e.target_layers) {
        if (l < 0 || l >= t.n_layers)
          fail("{}: the EAGLE-3 head reads the input of layer {} of a target of {} layers (the "
               "final hidden state, layer {}, is not supported)",
               file.name(), l, t.n_layers, t.n_layers);
      }
    }
    const auto from_target = [&](const kernels::WeightMatrix* m, const char* what) {
      if (m == nullptr)
        fail("{}: the EAGLE-3 head has no {} of its own, and no target to take them from",
             file.name(), what);
      if (m->cols != c.n_embd || m->rows != c.n_vocab)
        fail("{}: the target's {} are [{}, {}]; the head needs [{}, {}]", file.name(), what,
             m->rows, m->cols, c.n_vocab, c.n_embd);
      return *m;
    };
    if (w.has("token_embd.weight")) {
      w.keep_rows("token_embd.weight", false);
      token_embd_ = w.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    } else {
      token_embd_ = from_target(options.target->token_embedding(), "token embeddings");
    }
    output_norm_ = w.vector("output_norm.weight", c.n_embd);
    if (const gguf::TensorInfo* t = file.find_tensor("output.weight")) {
      const int64_t n_draft = t->shape.size() == 2 ? static_cast<int64_t>(t->shape[1]) : 0;
      output_ = w.matrix("output.weight", n_draft, c.n_embd);
    } else {
      output_ = from_target(options.target->output_projection(), "vocabulary projection");
    }
    if (w.has("d2t")) {
      draft_to_target_ = w.token_ids("d2t", output_.rows, c.n_vocab);
    } else if (output_.rows != c.n_vocab) {
      fail("{}: the EAGLE-3 head projects to {} tokens of a vocabulary of {} without a d2t map",
           file.name(), output_.rows, c.n_vocab);
    }
    const int64_t features = std::ssize(e.target_layers) * int64_t{e.target_n_embd};
    fc_ = w.matrix("fc.weight", c.n_embd, features);
    if (e.norm_before_fc) fc_norm_ = w.vector("enc.output_norm.weight", features);
    DecoderLayer& layer = layers_.emplace_back();
    load_layer_attention(w, spec_, c, 0, layer);
    load_layer_dense_ffn(w, spec_, c, 0, layer);
    layer.head_dim = c.head_dim;
    layer.n_kv_heads = c.n_kv_heads;
    layer.n_ff = c.n_ff;
    layer.reads_fused_input = true;
    MtpBlock& head = mtp_blocks_.emplace_back();
    head.enorm = layer.attn_norm;
    head.hnorm = w.vector("blk.0.attn_norm_2.weight", c.n_embd);
    head.embed = token_embd_;
    head.norm = output_norm_;
    head.head = output_;
  }

  const ModelConfig& config() const override { return config_; }
  const kernels::WeightMatrix* token_embedding() const override { return &token_embd_; }
  const kernels::WeightMatrix* output_projection() const override {
    return spec_.eagle3 || vocab_ranks_ != nullptr ? nullptr : &output_;  // (a shard holds a slice)
  }
  std::vector<RankMemory> rank_memory(const kv::KvCacheConfig& one_block) override {
    dist::Communicator* ranks = followers();
    if (ranks == nullptr) return Model::rank_memory(one_block);
    dist::encode_report_memory(message_, one_block);
    ranks->broadcast(message_);
    return dist::gather_memory(*ranks, one_block);
  }
  void attach_cache(const kv::KvCacheConfig& config, int threads) override {
    if (dist::Communicator* ranks = followers()) {
      dist::encode_cache(message_, config, threads);
      ranks->broadcast(message_);
    }
  }
  void copy_kv_block(kv::KvCache& cache, size_t group, int32_t from, int32_t to) override {
    if (dist::Communicator* ranks = followers()) {
      dist::encode_copy_block(message_, group, from, to);
      ranks->broadcast(message_);
    }
    cache.copy_block(group, from, to);
    if (dp_batch_) dp_batch_->block_copied(cache, group, from, to);
  }
  void copy_state(kv::KvCache& cache, int32_t from, int32_t to) override {
    tell_followers(dist::Op::kCopyState, from, to);
    cache.copy_state(from, to);
    if (dp_batch_) dp_batch_->state_copied(cache, from, to);
  }
  void save_state_snapshot(kv::KvCache& cache, int32_t state, int32_t snapshot) override {
    tell_followers(dist::Op::kSaveSnapshot, state, snapshot);
    cache.save_snapshot(state, snapshot);
    if (dp_batch_) dp_batch_->snapshot_saved(cache, state, snapshot);
  }
  void load_state_snapshot(kv::KvCache& cache, int32_t snapshot, int32_t state) override {
    tell_followers(dist::Op::kLoadSnapshot, snapshot, state);
    cache.load_snapshot(snapshot, state);
    if (dp_batch_) dp_batch_->snapshot_loaded(cache, snapshot, state);
  }
  bool splits_sequences() const override { return dp_ != nullptr; }
  int rank_of_block(size_t group, int32_t block) const override {
    return dp_batch_ ? dp_batch_->rank_of_block(group, block) : -1;
  }
  int rank_of_snapshot(int32_t snapshot) const override {
    return dp_batch_ ? dp_batch_->rank_of_snapshot(snapshot) : -1;
  }
  std::span<const int> feature_layers() const override {
    return spec_.eagle3 ? std::span<const int>(spec_.eagle3->target_layers) : std::span<const int>();
  }

  void encode_features(const float* features, int64_t T, float* g, ThreadPool& pool) override {
    if (!spec_.eagle3) fail("{}: this model is no EAGLE-3 head", config_.name);
    if (T > max_tokens_)
      fail("{} tokens' features exceed the {} the model was sized for", T, max_tokens_);
    const float* in = features;
    if (fc_norm_ != nullptr) {
      const int64_t width = fc_.cols;
      per_token(pool, T, [&](int64_t t) {
        kernels::rms_norm(features + t * width, fc_norm_, &ws_.fc_in[static_cast<size_t>(t * width)],
                          width, config_.rms_eps);
      });
      in = ws_.fc_in.data();
    }
    kernels::matmul(fc_, in, T, g, ws_.scratch, pool);  // [T, n_embd]
  }

  void forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens();
    if (spec_.eagle3) fail("{}: an EAGLE-3 head runs as a drafter only", c.name);
    if (const auto in_flight = std::ranges::count(pipeline_slot_busy_, 1); in_flight > 0)
      fail("{}: a forward pass while {} batch(es) are in flight", c.name, in_flight);
    check_and_tell_followers(batch);
    if (pp_ != nullptr) {
      launch_pipeline(batch, cache, pool, 0);
      return finish_pipeline(batch, logits, pool, 0);
    }
    if (dp_ != nullptr) return forward_data_parallel(batch, cache, logits, pool);
    std::fill(feature_slot_.begin(), feature_slot_.end(), -1);
    for (size_t k = 0; k < batch.feature_layers.size(); ++k) {
      const int l = batch.feature_layers[k];
      if (l < 0 || l >= c.n_layers || batch.features == nullptr)
        fail("{}: the input of layer {} asked for (of {} layers, into {})", c.name, l, c.n_layers,
             batch.features == nullptr ? "no buffer" : "a buffer");
      feature_slot_[static_cast<size_t>(l)] = static_cast<int>(k);
    }
    embed_tokens(batch);
    if (spec_.per_layer_embd > 0) per_layer_inputs(batch, pool);
    place_tokens(batch, cache);
    if (delta_) delta_->begin_batch(batch, cache);
    if (batch.routing_margins != nullptr)
      std::fill_n(batch.routing_margins, T, std::numeric_limits<float>::infinity());
    // Each block leaves its output in ws.proj; the residual add happens in the next block's
    // first per-token pass (and for the logit rows before the final norm), so it costs no
    // serial pass of its own.
    proj_pending_ = false;
    for (int l = 0; l < c.n_layers; ++l) {
      attention_block(l, batch, cache, pool);
      feed_forward_block(l, T, batch.bf16_rows_begin, pool, batch.routing_margins);
    }
    if (!batch.hidden_rows.empty()) compute_hidden(batch, pool);
    if (batch.token_hidden != nullptr) {
      per_token(pool, T, [&](int64_t t) {
        final_hidden(t, batch.token_hidden + t * c.n_embd, output_norm_);
      });
    }
    compute_logits(batch, logits, pool, output_norm_, output_);
    if (batch.mtp_catch_up) mtp_catch_up(batch, cache, pool);
  }

  // Data parallelism (model/data_parallel.h): this rank's sequences of the batch through every
  // layer (a rank with none still serves its experts to the others), then the final rows of
  // every rank's logit and hidden-state rows, and their tokens' routing margins, gathered on rank
  // 0, which computes the logits and hidden states of the whole batch as one process does.
  void forward_data_parallel(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const Batch& local = dp_batch_->select(batch, cache, dp_->rank(), dp_->size());
    const int64_t T = local.num_tokens();
    float* margins = batch.routing_margins != nullptr ? ws_.dp_margins.data() : nullptr;
    if (margins != nullptr) std::fill_n(margins, T, std::numeric_limits<float>::infinity());
    proj_pending_ = false;
    if (T > 0) {
      embed_tokens(local);
      if (spec_.per_layer_embd > 0) per_layer_inputs(local, pool);
      place_tokens(local, cache);
      if (delta_) delta_->begin_batch(local, cache);
      for (int l = 0; l < c.n_layers; ++l) {
        attention_block(l, local, cache, pool);
        feed_forward_block(l, T, local.bf16_rows_begin, pool, margins);
      }
    } else if (dp_experts_) {  // the MoE layers' exchanges, as the ranks with tokens make them
      for (int l = 0; l < c.n_layers; ++l)  // (not the MTP layers past them)
        if (const DecoderLayer& layer = layers_[static_cast<size_t>(l)]; layer.moe)
          moe_->forward(*layer.moe, nullptr, 0, nullptr, pool);
    }
    share_final_rows(batch, margins);
    if (dp_->rank() == 0 && !batch.hidden_rows.empty()) compute_hidden(batch, pool);
    compute_logits(batch, logits, pool, output_norm_, output_);  // (each rank its vocabulary slice)
  }

  // Data parallelism: each rank's final residual rows of the batch's logit and hidden-state
  // rows (LocalBatch::final_rows_of), then its tokens' routing margins (`margins`, when asked
  // for), to every rank (each computes its slice of the vocabulary for every row), which puts
  // them at their batch rows of ws.x (and rank 0 the margins in batch.routing_margins).
  void share_final_rows(const Batch& batch, const float* margins) {
    const int64_t n = config_.n_embd;
    const int ranks = dp_->size();
    const std::span<const int32_t> global = dp_batch_->global_rows();
    dp_rows_.clear();
    const int64_t rows = dp_batch_->final_rows_of(batch, dp_->rank(), &dp_rows_);
    for (int64_t k = 0; k < rows; ++k) {
      const int32_t g = dp_rows_[static_cast<size_t>(k)];
      const auto i = std::lower_bound(global.begin(), global.end(), g) - global.begin();
      float* out = &ws_.dp_send[static_cast<size_t>(k * n)];
      std::copy_n(&ws_.x[static_cast<size_t>(i * n)], n, out);
      if (proj_pending_) kernels::add_inplace(out, &ws_.proj[static_cast<size_t>(i * n)], n);
    }
    if (margins != nullptr) std::copy_n(margins, global.size(), &ws_.dp_send[static_cast<size_t>(rows * n)]);
    std::array<int64_t, 64> counts{};
    if (ranks > std::ssize(counts)) fail("data parallelism over more than {} ranks", counts.size());
    for (int r = 0; r < ranks; ++r)
      counts[static_cast<size_t>(r)] = dp_batch_->final_rows_of(batch, r, nullptr) * n +
                                       (margins != nullptr ? dp_batch_->tokens_of(batch, r, nullptr) : 0);
    const bool root = dp_->rank() == 0;
    dp_->allgatherv(ws_.dp_send.data(), ws_.dp_gathered.data(),
                    std::span(counts.data(), static_cast<size_t>(ranks)));
    proj_pending_ = false;
    const float* in = ws_.dp_gathered.data();
    for (int r = 0; r < ranks; ++r) {
      dp_rows_.clear();
      dp_batch_->final_rows_of(batch, r, &dp_rows_);
      for (const int32_t g : dp_rows_) {
        std::copy_n(in, n, &ws_.x[static_cast<size_t>(g * n)]);
        in += n;
      }
      if (margins == nullptr) continue;
      dp_rows_.clear();
      dp_batch_->tokens_of(batch, r, &dp_rows_);
      for (const int32_t g : dp_rows_) {
        if (root) batch.routing_margins[g] = *in;
        ++in;
      }
    }
  }

  // ws.x [T, n_embd] = the batch's token embeddings (scaled where the architecture does).
  void embed_tokens(const Batch& batch) {
    const ModelConfig& c = config_;
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      const int32_t token = batch.tokens[static_cast<size_t>(t)];
      float* row = &ws_.x[static_cast<size_t>(t * c.n_embd)];
      kernels::dequantize_row(token_embd_, token, row);
      if (spec_.scale_embedding)  // in float, as llama.cpp computes it
        kernels::scale_inplace(row, std::sqrt(static_cast<float>(c.n_embd)), c.n_embd);
    }
  }

  // The checks of a forward pass's batch, then (rank 0 of a split model) the batch to the other
  // ranks, which run it with this one.
  void check_and_tell_followers(const Batch& batch) {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens();
    if (T > max_tokens_)
      fail("batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
    check_batch(batch, c.n_vocab, rope_.full.max_positions());
    lora_.begin_batch(batch);
    if (dist::Communicator* ranks = followers()) {  // the other ranks run the same batch
      if (!batch.feature_layers.empty() || batch.token_hidden != nullptr || batch.mtp_catch_up)
        fail("{}: a model split over ranks gives no hidden states for drafters", c.name);
      if (pp_ != nullptr && batch.routing_margins != nullptr)
        fail("{}: a pipeline's ranks report no routing margins", c.name);
      dist::encode_forward(message_, batch);
      ranks->broadcast(message_);
    }
  }

  int pipeline_depth() const override { return pp_ != nullptr ? pp_->size() : 1; }

  void launch_forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool,
                      int slot) override {
    if (pp_ == nullptr) return forward(batch, cache, logits, pool);
    if (slot < 0 || slot >= pp_->size() || pipeline_slot_busy_[static_cast<size_t>(slot)])
      fail("{}: pipeline slot {} is not free", config_.name, slot);
    check_and_tell_followers(batch);
    launch_pipeline(batch, cache, pool, slot);
    pipeline_slot_busy_[static_cast<size_t>(slot)] = 1;
  }

  void finish_forward(const Batch& batch, float* logits, ThreadPool& pool, int slot) override {
    if (pp_ == nullptr) return;
    if (slot < 0 || slot >= pp_->size() || !pipeline_slot_busy_[static_cast<size_t>(slot)])
      fail("{}: no batch in flight in pipeline slot {}", config_.name, slot);
    pipeline_slot_busy_[static_cast<size_t>(slot)] = 0;
    finish_pipeline(batch, logits, pool, slot);
  }

  // Pipeline parallelism (dist/model_parallel.h): the batch's tokens in micro-batches through
  // this rank's layers, each micro-batch received from the rank before (rank 0: embedded here)
  // and sent on to the next, so that the ranks work on different micro-batches at once. The last
  // rank sends the final residual stream of the logit and hidden-state rows to rank 0, which
  // posts their receive here (into its slot's rows, `pipeline_back`) and finishes them in
  // finish_pipeline as the whole model does; in between it may launch further batches (several
  // steps in flight). A micro-batch may cut a sequence's tokens: its later part attends over the
  // K/V (and continues the recurrent state) its earlier part left in this rank's cache, as
  // chunked prefill does between steps.
  void launch_pipeline(const Batch& batch, kv::KvCache& cache, ThreadPool& pool, int slot) {
    const int64_t n = config_.n_embd;
    const int rank = pp_->rank(), last = pp_->size() - 1;
    // pipeline_out is written again below: the last rank's sends of the batch before (left in
    // flight so that it goes on to this batch at once) must be done with it.
    pp_->wait_sends();
    plan_micro_batches(batch.num_tokens());
    int64_t back = 0;  // rank 0: the final rows posted so far
    for (size_t m = 0; m < micro_batches_.size(); ++m) {
      const auto [begin, end] = micro_batches_[m];
      const Batch part = micro_batch(batch, begin, end);
      const int64_t T = end - begin;
      if (rank == 0) {
        embed_tokens(part);
      } else {
        pp_->recv(rank - 1, ws_.x.data(), T * n);
      }
      place_tokens(part, cache);
      if (delta_) delta_->begin_batch(part, cache);
      proj_pending_ = false;
      for (int l = layer_begin_; l < layer_end_; ++l) {
        attention_block(l, part, cache, pool);
        feed_forward_block(l, T, part.bf16_rows_begin, pool, nullptr);
      }
      if (proj_pending_) per_token(pool, T, [&](int64_t t) { add_residual(t); });
      proj_pending_ = false;
      float* out = &ws_.pipeline_out[static_cast<size_t>(begin * n)];  // (this micro-batch's rows)
      if (rank != last) {
        std::copy_n(ws_.x.data(), T * n, out);
        pp_->send(rank + 1, out, T * n);
        // Delivered before the next micro-batch's compute: MPI moves a message this large
        // (rendezvous) only while the sender is inside an MPI call, so a send left in flight
        // would wait for this rank's next call and the next rank would wait with it (measured:
        // no overlap at all). The next rank is idle or about to be, so this returns promptly.
        pp_->wait_sends();
      } else if (const int64_t rows = final_rows(batch, begin, end, out, true); rows > 0) {
        pp_->send(0, out, rows * n);
      }
      if (rank == 0) {  // where the last rank's rows of this micro-batch go
        const int64_t rows = final_rows(batch, begin, end, nullptr, false);
        int64_t& ticket = pipeline_tickets_[static_cast<size_t>(slot) * max_micro_batches_ + m];
        ticket = -1;
        if (rows == 0) continue;
        ticket = pp_->recv_later(last, &pipeline_back(slot)[static_cast<size_t>(back * n)], rows * n);
        back += rows;
      }
    }
  }

  // Rank 0: waits for the final rows of the batch launched in `slot`, puts them into the
  // residual stream and computes the logits (and hidden states) from them. The other ranks
  // have nothing to finish.
  void finish_pipeline(const Batch& batch, float* logits, ThreadPool& pool, int slot) {
    if (pp_->rank() != 0) return;
    const int64_t n = config_.n_embd;
    plan_micro_batches(batch.num_tokens());  // (as at its launch)
    int64_t back = 0;
    for (size_t m = 0; m < micro_batches_.size(); ++m) {
      const int64_t ticket = pipeline_tickets_[static_cast<size_t>(slot) * max_micro_batches_ + m];
      if (ticket < 0) continue;
      pp_->wait_recv(ticket);
      const auto [begin, end] = micro_batches_[m];
      back += final_rows(batch, begin, end, &pipeline_back(slot)[static_cast<size_t>(back * n)], false);
    }
    if (!batch.hidden_rows.empty()) compute_hidden(batch, pool);
    compute_logits(batch, logits, pool, output_norm_, output_);
  }

  // Rank 0: the final rows of the batch in pipeline slot `slot`, [max_tokens, n_embd].
  std::span<float> pipeline_back(int slot) {
    const auto size = static_cast<size_t>(max_tokens_ * config_.n_embd);
    return std::span<float>(ws_.pipeline_back).subspan(static_cast<size_t>(slot) * size, size);
  }

  // A step's micro-batches (pipeline parallelism): token ranges of about kMicroBatchTokens, at
  // most kMicroBatchesPerRank per rank, one for a small step (a micro-batch of a few decode
  // tokens would cost every rank a pass over its weights for little).
  void plan_micro_batches(int64_t T) {
    const int64_t parts =
        std::clamp<int64_t>(T / kMicroBatchTokens, 1, int64_t{kMicroBatchesPerRank} * pp_->size());
    micro_batches_.clear();  // (capacity reserved at load)
    for (int64_t m = 0; m < parts; ++m) micro_batches_.emplace_back(T * m / parts, T * (m + 1) / parts);
  }

  // Tokens [begin, end) of the batch as a batch of their own: the sequences' entries cut to
  // them, no logit or hidden rows (rank 0 computes those for the whole batch).
  Batch micro_batch(const Batch& batch, int64_t begin, int64_t end) {
    micro_entries_.clear();  // (capacity reserved at load)
    for (const BatchSequence& seq : batch.sequences) {
      const int64_t lo = std::max(seq.token_begin, begin), hi = std::min(seq.token_end, end);
      if (lo >= hi) continue;
      BatchSequence& part = micro_entries_.emplace_back(seq);
      part.token_begin = lo - begin;
      part.token_end = hi - begin;
      part.mtp_prev_hidden = nullptr;
    }
    const auto T = static_cast<size_t>(end - begin);
    Batch part{batch.tokens.subspan(static_cast<size_t>(begin), T),
               batch.positions.subspan(static_cast<size_t>(begin), T), micro_entries_, {}};
    part.bf16_rows_begin = batch.bf16_rows_begin <= begin
                               ? 0
                               : std::min<int64_t>(batch.bf16_rows_begin - begin, end - begin);
    return part;
  }

  // The batch's logit rows, then its hidden-state rows, that lie in tokens [begin, end), as the
  // last rank of a pipeline sends them to rank 0: counted, and with `rows` packed from this
  // micro-batch's residual stream (pack) or unpacked into the whole batch's (rank 0).
  int64_t final_rows(const Batch& batch, int64_t begin, int64_t end, float* rows, bool pack) {
    const int64_t n = config_.n_embd;
    int64_t k = 0;
    for (const std::span<const int32_t> list : {batch.logit_rows, batch.hidden_rows}) {
      for (const int32_t t : list) {
        if (t < begin || t >= end) continue;
        if (rows != nullptr && pack) std::copy_n(&ws_.x[(t - begin) * n], n, rows + k * n);
        if (rows != nullptr && !pack) std::copy_n(rows + k * n, n, &ws_.x[t * n]);
        ++k;
      }
    }
    return k;
  }

  void forward_mtp(const Batch& batch, const float* hidden_in, kv::KvCache& cache, float* logits,
                   float* hidden_out, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    if (!c.mtp && !spec_.eagle3)
      fail("{}: the model was loaded without its multi-token-prediction block", c.name);
    const int64_t T = batch.num_tokens();
    if (T > max_tokens_)
      fail("batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
    check_batch(batch, c.n_vocab, rope_.full.max_positions());
    lora_.begin_batch(batch);
    place_tokens(batch, cache);
    run_mtp_block(batch, cache, pool, [&](int64_t t) { return hidden_in + t * c.n_embd; });
    const auto R = static_cast<int64_t>(batch.logit_rows.size());
    // An EAGLE-3 head chains its residual stream before the output norm (llama.cpp's
    // eagle3_prenorm); an MTP block its normed final hidden state.
    const float* chained_norm = spec_.eagle3 ? nullptr : mtp_blocks_[0].norm;
    per_token(pool, R, [&](int64_t r) {
      final_hidden(batch.logit_rows[static_cast<size_t>(r)], hidden_out + r * c.n_embd, chained_norm);
    });
    compute_logits(batch, logits, pool, mtp_blocks_[0].norm, mtp_blocks_[0].head);
    if (!draft_to_target_.empty()) spread_draft_logits(logits, R);
  }

 private:
  // Head sizes and kv heads the ArchSpec sets (MLA: its key and value sizes, a kv head per
  // head), its RoPE factor and YaRN; a value head size of the file's own that differs is
  // refused unless the spec implements it.
  void apply_attention_geometry(const std::string& file_name) {
    ModelConfig& c = config_;
    if (spec_.rope_attn_factor > 0) c.rope_attn_factor = spec_.rope_attn_factor;
    if (spec_.rope_yarn) c.rope_yarn = *spec_.rope_yarn;
    if (spec_.mla) {
      c.head_dim = spec_.mla->key_dims();
      c.value_head_dim = spec_.mla->value_dims != c.head_dim ? spec_.mla->value_dims : 0;
      c.n_kv_heads = c.n_heads;
      c.layer_n_kv_heads.clear();
    } else if (c.value_head_dim > 0) {
      fail("{}: value head size {} differs from the key head size {}: not supported", file_name,
           c.value_head_dim, c.head_dim);
    }
  }

  // The attention sub-layer's tensors of layer i: MLA's (ArchSpec::mla) or the q/k/v
  // projections' (layer_weights.h).
  void load_attention(WeightLoader& w, int i, DecoderLayer& layer) {
    if (!spec_.mla) return load_layer_attention(w, spec_, config_, i, layer);
    const ModelConfig& c = config_;
    const std::string p = layer_prefix(i);
    layer.attn_norm = w.vector(p + "attn_norm.weight", c.n_embd);
    layer.mla = load_mla_layer(w, p, *spec_.mla, c.n_heads, c.n_embd);
    layer.wo = w.matrix(p + "attn_output.weight", c.n_embd, int64_t{c.n_heads} * spec_.mla->value_dims);
    layer.ffn_norm = w.vector(p + spec_.ffn_norm + ".weight", c.n_embd);
  }

  // The per-layer geometry the ArchSpec and the file give (ModelConfig's sliding_* fields,
  // kv_source_layers): Gemma 4's sliding layers have their own head size, kv heads and rotated
  // dimensions, and its last layers read the K/V of earlier ones.
  void apply_layer_geometry(const std::string& file_name) {
    ModelConfig& c = config_;
    if (spec_.sliding_head_dim > 0 && spec_.sliding_head_dim != c.head_dim)
      c.sliding_head_dim = spec_.sliding_head_dim;
    if (spec_.sliding_rope_dims > 0 && spec_.sliding_rope_dims != c.rope_dims)
      c.sliding_rope_dims = spec_.sliding_rope_dims;
    if (!c.layer_n_kv_heads.empty()) {  // one count for each kind of layer
      int full = 0, sliding = 0;
      for (int l = 0; l < c.n_layers; ++l) {
        const int v = c.layer_n_kv_heads[static_cast<size_t>(l)];
        int& kind = c.layer_slides(l) ? sliding : full;
        if (kind != 0 && kind != v)
          fail("{}: kv head counts differ between layers of one kind ({} and {}): not supported",
               file_name, kind, v);
        kind = v;
      }
      c.n_kv_heads = full > 0 ? full : sliding;
      c.sliding_n_kv_heads = sliding > 0 && sliding != c.n_kv_heads ? sliding : 0;
    }
    if (!c.layer_n_ff.empty() && spec_.moe)
      fail("{}: per-layer feed-forward sizes with experts are not supported", file_name);
    if (spec_.shared_kv_layers > 0) {
      // llama.cpp's reuse: a KV-sharing layer reads the last sliding layer before them (the
      // second to last KV layer) if it slides, else the last full one (the last KV layer).
      const int first_shared = c.n_layers - spec_.shared_kv_layers;
      const int last_sliding = first_shared - 2, last_full = first_shared - 1;
      if (first_shared < 2 || !c.layer_slides(last_sliding) || c.layer_slides(last_full))
        fail("{}: {} KV-sharing layers of {} need a sliding then a full layer before them",
             file_name, spec_.shared_kv_layers, c.n_layers);
      c.kv_source_layers.resize(static_cast<size_t>(c.n_layers));
      for (int l = 0; l < c.n_layers; ++l) {
        c.kv_source_layers[static_cast<size_t>(l)] =
            l < first_shared ? l : (c.layer_slides(l) ? last_sliding : last_full);
      }
    }
    for (int l = 0; l < c.n_layers; ++l) {
      if (c.rope_dims_of(l) > c.head_dim_of(l) || c.rope_dims_of(l) % 2 != 0)
        fail("{}: layer {} rotates {} dimensions of heads of {}", file_name, l, c.rope_dims_of(l),
             c.head_dim_of(l));
    }
  }

  // Gemma 4's per-layer tensors beyond the shared ones (layer_weights.h).
  void load_gemma4_layer_extras(WeightLoader& w, int i, DecoderLayer& layer) {
    const std::string p = layer_prefix(i);
    if (spec_.layer_output_scale && w.has(p + "layer_output_scale.weight"))
      layer.out_scale = w.vector(p + "layer_output_scale.weight", 1)[0];
    if (spec_.per_layer_embd > 0) {
      const int n = spec_.per_layer_embd, n_embd = config_.n_embd;
      layer.ple_gate = w.matrix(p + "inp_gate.weight", n, n_embd);
      layer.ple_proj = w.matrix(p + "proj.weight", n_embd, n);
      layer.ple_post_norm = w.vector(p + "post_norm.weight", n_embd);
    }
  }

  // Runs fn(t) for every token, split over the threads when the batch is large enough for a
  // parallel region to pay (a region costs about a microsecond; one token's norm less).
  template <typename Fn>
  static void per_token(ThreadPool& pool, int64_t T, Fn&& fn) {
    constexpr int64_t kTokensPerThread = 4;
    pool.parallel_for(T, kTokensPerThread, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) fn(t);
    });
  }

  // Per-layer embeddings (ArchSpec::per_layer_embd), as llama.cpp's project_per_layer_inputs:
  // for each token, per_layer_model_proj of its scaled embedding (ws.x) over sqrt(n_embd), each
  // layer's part normed by per_layer_proj_norm, plus its row of per_layer_token_embd times
  // sqrt(per_layer_embd), all over sqrt(2). [T, n_layers * per_layer_embd] in ws.ple_inputs.
  void per_layer_inputs(const Batch& batch, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens(), n_ple = spec_.per_layer_embd;
    const int64_t n = n_ple * c.n_layers;
    kernels::matmul(ple_model_proj_, ws_.x.data(), T, ws_.ple_inputs.data(), ws_.scratch, pool,
                    kernels::active_kernels(), batch.bf16_rows_begin);
    const float proj_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
    const float row_scale = std::sqrt(static_cast<float>(n_ple));
    const float input_scale = 1.0f / std::sqrt(2.0f);
    per_token(pool, T, [&](int64_t t) {
      float* in = &ws_.ple_inputs[static_cast<size_t>(t * n)];
      float* row = &ws_.ple_rows[static_cast<size_t>(t * n)];
      kernels::dequantize_row(ple_table_, batch.tokens[static_cast<size_t>(t)], row);
      kernels::scale_inplace(in, proj_scale, n);
      for (int l = 0; l < c.n_layers; ++l)
        kernels::rms_norm(in + l * n_ple, ple_proj_norm_, in + l * n_ple, n_ple, c.rms_eps);
      for (int64_t i = 0; i < n; ++i) in[i] = (in[i] + row[i] * row_scale) * input_scale;
    });
  }

  // The KV slot of every token in every group of the cache: block * block_size + offset.
  // (check_batch has checked the sequences.)
  void place_tokens(const Batch& batch, const kv::KvCache& cache) {
    exact_.plan(batch, cache);
    for (const BatchSequence& seq : batch.sequences) {
      for (size_t g = 0; g < cache.groups().size(); ++g) {
        for (int64_t t = seq.token_begin; t < seq.token_end; ++t) {
          ws_.slots[g * static_cast<size_t>(max_tokens_) + static_cast<size_t>(t)] =
              kv_slot((*seq.block_tables)[g], batch.positions[static_cast<size_t>(t)],
                      cache.block_size(), g);
        }
      }
    }
  }

  // x[t] += proj[t]: the residual connection of the block that wrote ws.proj.
  void add_residual(int64_t t) {
    const int64_t n = config_.n_embd;
    kernels::add_inplace(&ws_.x[t * n], &ws_.proj[t * n], n);
  }

  void allocate_workspace() {
    const ModelConfig& c = config_;
    const auto T = static_cast<size_t>(max_tokens_);
    const auto value_dim = static_cast<size_t>(std::max(c.max_head_dim(), c.value_head_dim));
    const auto q_dim = static_cast<size_t>(c.max_q_dim()),
               kv_dim = std::max(static_cast<size_t>(c.max_kv_dim()), c.n_kv_heads * value_dim),
               attn_dim = static_cast<size_t>(c.n_heads) * value_dim;
    const auto n_ff = static_cast<size_t>(c.max_n_ff());
    const auto floats = [&](size_t n) { return ws_.memory.allocate_array<float>(n); };
    ws_.x = floats(T * c.n_embd);
    ws_.h = floats(T * c.n_embd);
    ws_.q = floats(T * q_dim);
    if (spec_.gated_attention) {
      ws_.q_gated = floats(T * 2 * q_dim);
      ws_.attn_gate = floats(T * q_dim);
    }
    ws_.k = floats(T * kv_dim);
    ws_.v = floats(T * kv_dim);
    ws_.attn = floats(T * attn_dim);
    ws_.proj = floats(T * c.n_embd);
    const bool any_dense =
        spec_.moe_beside_dense_mlp ||
        std::any_of(layers_.begin(), layers_.end(), [](const DecoderLayer& l) { return !l.moe; });
    if (spec_.moe_beside_dense_mlp && moe_config_) {
      ws_.ones_embd = floats(static_cast<size_t>(c.n_embd));
      std::fill(ws_.ones_embd.begin(), ws_.ones_embd.end(), 1.0f);
      ws_.router_in = floats(T * static_cast<size_t>(c.n_embd));
      ws_.moe_out = floats(T * static_cast<size_t>(c.n_embd));
    }
    if (any_dense) {
      ws_.gate = floats(T * n_ff);
      ws_.up = floats(T * n_ff);
    }
    if (spec_.per_layer_embd > 0) {
      const size_t n_ple = static_cast<size_t>(spec_.per_layer_embd);
      ws_.ple_inputs = floats(T * n_ple * static_cast<size_t>(c.n_layers));
      ws_.ple_rows = floats(T * n_ple * static_cast<size_t>(c.n_layers));
      ws_.ple_gate = floats(T * n_ple);
    }
    ws_.ones = floats(static_cast<size_t>(c.max_head_dim()));
    std::fill(ws_.ones.begin(), ws_.ones.end(), 1.0f);
    if (moe_config_)
      moe_ = std::make_unique<MoeBlock>(*moe_config_, c.n_embd, max_tokens_, dp_experts_ ? dp_ : nullptr);
    if (spec_.mla) mla_ = std::make_unique<MlaBlock>(*spec_.mla, c.n_heads, c.n_embd, max_tokens_);
    if (delta_config_)
      delta_ = std::make_unique<DeltaNetBlock>(*delta_config_, *spec_.delta_net, c.n_embd, max_tokens_);
    ws_.last = floats(T * c.n_embd);
    if (c.mtp || spec_.eagle3) ws_.mtp_in = floats(T * 2 * static_cast<size_t>(c.n_embd));
    if (fc_norm_ != nullptr) ws_.fc_in = floats(T * static_cast<size_t>(fc_.cols));
    if (!draft_to_target_.empty()) ws_.draft_row = floats(static_cast<size_t>(output_.rows));
    feature_slot_.assign(static_cast<size_t>(c.n_layers), -1);
    if (vocab_ranks_ != nullptr) {
      const auto rows = static_cast<size_t>(std::min<int64_t>(max_tokens_, kTpLogitRows));
      ws_.tp_logits = floats(rows * static_cast<size_t>(vocab_counts_[0]));
      if (vocab_ranks_->rank() == 0) ws_.tp_gathered = floats(rows * static_cast<size_t>(c.n_vocab));
    }
    if (pp_ != nullptr) {
      ws_.pipeline_out = floats(T * c.n_embd);
      const auto depth = static_cast<size_t>(pp_->size());
      if (pp_->rank() == 0) ws_.pipeline_back = floats(depth * T * c.n_embd);
      pipeline_slot_busy_.assign(depth, 0);
      max_micro_batches_ = static_cast<size_t>(kMicroBatchesPerRank * pp_->size());
      micro_batches_.reserve(max_micro_batches_);
      pipeline_tickets_.assign(depth * max_micro_batches_, -1);
      micro_entries_.reserve(T);  // (an entry holds a token at least)
    }
    if (dp_ != nullptr) {
      ws_.dp_send = floats(2 * T * c.n_embd + T);
      ws_.dp_gathered = floats(2 * T * c.n_embd + T);
      ws_.dp_margins = floats(T);
      dp_batch_ = std::make_unique<LocalBatch>(max_tokens_);
      dp_rows_.reserve(2 * T);
    }
    ws_.slots = ws_.memory.allocate_array<int64_t>(kv::kMaxKvGroups * T);
    ws_.scratch.reserve(max_tokens_,
                        std::max<int64_t>({c.n_embd, any_dense ? int64_t(n_ff) : 0, int64_t(q_dim),
                                           int64_t(attn_dim),
                                           int64_t{spec_.per_layer_embd},
                                           c.mtp || spec_.eagle3 ? 2 * int64_t{c.n_embd} : 0,
                                           fc_.cols}));
    ws_.memory.prefault();  // every forward pass uses it: fault it in now, not in the first one
  }

  void attention_block(int l, const Batch& batch, kv::KvCache& cache, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    DecoderWorkspace& ws = ws_;
    const int64_t T = batch.num_tokens();
    const int head_dim = layer.head_dim;
    const int64_t q_dim = int64_t{c.n_heads} * head_dim;
    const bool pending = proj_pending_;
    // The layer's input for an EAGLE-3 drafter (Batch::features), where it asks for this one.
    const int feature = batch.features != nullptr && l < std::ssize(feature_slot_)
                            ? feature_slot_[static_cast<size_t>(l)]
                            : -1;
    const auto n_features = static_cast<int64_t>(batch.feature_layers.size());
    per_token(pool, T, [&](int64_t t) {
      if (pending) add_residual(t);  // the previous layer's feed-forward output
      if (feature >= 0)
        std::copy_n(&ws.x[t * c.n_embd], c.n_embd, batch.features + (t * n_features + feature) * c.n_embd);
      if (layer.reads_fused_input) return;
      kernels::rms_norm(&ws.x[t * c.n_embd], layer.attn_norm, &ws.h[t * c.n_embd], c.n_embd,
                        c.rms_eps);
    });
    if (layer.delta_net) {  // a recurrent layer: the state slot instead of K/V
      delta_->forward(*layer.delta_net, batch, ws.h.data(), cache, ws.proj.data(), pool,
                      batch.bf16_rows_begin);
      return;
    }
    if (layer.mla) {
      mla_inputs(l, batch, cache, pool);
    } else {
      qkv_inputs(l, batch, cache, pool);
    }
    const kernels::AttentionShape shape{c.n_heads,
                                        layer.n_kv_heads,
                                        head_dim,
                                        spec_.attention_scale,
                                        layer.sliding ? spec_.sliding_window : 0,
                                        spec_.attention_softcap,
                                        layer.attn_sinks,
                                        layer.value_dim};
    // A layer that reads another's K/V reads them from the cache alone: the staged copies of
    // this step are the last writing layer's by then.
    const bool exact = exact_.active() && layer.kv_layer == l;
    attend_all(batch, cache, layer.kv_layer, shape, pool, exact);
    if (exact) exact_.end_layer(l, cache);
    if (spec_.gated_attention) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.attn[t * q_dim];
        const float* gate = &ws.attn_gate[t * q_dim];
        for (int64_t i = 0; i < q_dim; ++i) out[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
      });
    }
    kernels::matmul(layer.wo, ws.attn.data(), T, ws.proj.data(), ws.scratch, pool,  // [T, n_embd]
                    kernels::active_kernels(), batch.bf16_rows_begin);
    lora_.apply(&layer.wo, ws.attn.data(), T, ws.proj.data(), pool);
    if (tp_ != nullptr) tp_->allreduce_sum(ws.proj.data(), T * c.n_embd);  // every rank's heads
    if (layer.bo || layer.post_attn_norm) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.proj[t * c.n_embd];
        if (layer.bo) kernels::add_inplace(out, layer.bo, c.n_embd);
        if (layer.post_attn_norm)
          kernels::rms_norm(out, layer.post_attn_norm, out, c.n_embd, c.rms_eps);
      });
    }
  }

  // Layer l's queries, keys and values of ws.h from its q/k/v projections (biases, norms,
  // RoPE); its K/V written to the cache.
  void qkv_inputs(int l, const Batch& batch, kv::KvCache& cache, ThreadPool& pool) {
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    const int n_heads = config_.n_heads, head_dim = layer.head_dim;
    const int64_t T = batch.num_tokens(), q_dim = int64_t{n_heads} * head_dim,
                  kv_dim = int64_t{layer.n_kv_heads} * head_dim;
    DecoderWorkspace& ws = ws_;
    // A layer that reads another's K/V (ModelConfig::kv_layer) projects only its queries; one
    // without attn_v takes its keys' projection as its values.
    const bool own_kv = layer.kv_layer == l;
    const kernels::MatmulTarget qkv[] = {
        {&layer.wq, spec_.gated_attention ? ws.q_gated.data() : ws.q.data()},  // [T, q_dim] (x2)
        {&layer.wk, ws.k.data()},                                              // k: [T, kv_dim]
        {&layer.wv, ws.v.data()}};                                             // v: [T, kv_dim]
    const size_t n_targets = !own_kv ? 1 : (layer.value_from_key ? 2 : 3);
    const float* qkv_in = layer.reads_fused_input ? ws.mtp_in.data() : ws.h.data();
    kernels::matmul_many(std::span(qkv, n_targets), qkv_in, T, ws.scratch, pool,
                         kernels::active_kernels(), batch.bf16_rows_begin);
    lora_.apply_many(std::span(qkv, n_targets), qkv_in, T, pool);
    const int64_t* slots = &ws.slots[static_cast<size_t>(cache.group_of(layer.kv_layer) * max_tokens_)];
    const int32_t* positions = batch.positions.data();
    // Keys stored equalized (set_key_equalizer) in a quantized cache; queries meet them alike,
    // with the equalizer of the layer whose K/V they read.
    const bool quantized_keys = cache.key_type() != DType::F16;
    const bool equalize = quantized_keys && own_kv && !layer.key_equalizer.empty();
    const std::vector<float>& kv_equalizer = layers_[static_cast<size_t>(layer.kv_layer)].key_equalizer;
    const float* q_equalizer = quantized_keys && !kv_equalizer.empty() ? kv_equalizer.data() : nullptr;
    const bool exact = exact_.active() && own_kv;
    if (exact) exact_.begin_layer(l, cache);
    per_token(pool, T, [&](int64_t t) {  // every token writes its own KV slot
      if (spec_.gated_attention) split_query_and_gate(t);
      if (layer.bq) kernels::add_inplace(&ws.q[t * q_dim], layer.bq, q_dim);
      if (layer.q_norm) norm_heads(&ws.q[t * q_dim], n_heads, head_dim, layer.q_norm);
      rotate(layer, &ws.q[t * q_dim], n_heads, positions[t]);
      if (q_equalizer != nullptr)
        for (int h = 0; h < n_heads; ++h)
          for (int c = 0; c < head_dim; ++c) ws.q[t * q_dim + h * head_dim + c] *= q_equalizer[c];
      if (!own_kv) return;
      float* k = &ws.k[t * kv_dim];
      float* v = &ws.v[t * kv_dim];
      if (layer.value_from_key) std::copy_n(k, kv_dim, v);
      if (layer.bk) kernels::add_inplace(k, layer.bk, kv_dim);
      if (layer.bv) kernels::add_inplace(v, layer.bv, kv_dim);
      if (layer.k_norm) norm_heads(k, layer.n_kv_heads, head_dim, layer.k_norm);
      if (spec_.value_norm) norm_heads(v, layer.n_kv_heads, head_dim, ws.ones.data());
      rotate(layer, k, layer.n_kv_heads, positions[t]);
      if (equalize)
        for (int h = 0; h < layer.n_kv_heads; ++h)
          for (int c = 0; c < head_dim; ++c) k[h * head_dim + c] /= layer.key_equalizer[static_cast<size_t>(c)];
      cache.write(l, slots[t], k, v);
      if (exact) exact_.store(l, t, positions[t], k, v, cache);
    });
  }

  // Layer l's queries, keys and values of ws.h through its latent attention (model/mla.h); its
  // K/V written to the cache.
  void mla_inputs(int l, const Batch& batch, kv::KvCache& cache, ThreadPool& pool) {
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    DecoderWorkspace& ws = ws_;
    const int64_t T = batch.num_tokens();
    mla_->project(*layer.mla, ws.h.data(), T, batch.positions.data(), *layer.rope, spec_.rope_mode,
                  config_.rms_eps, ws.q.data(), ws.k.data(), ws.v.data(), pool,
                  batch.bf16_rows_begin);
    const int64_t k_dim = int64_t{layer.n_kv_heads} * layer.head_dim,
                  v_dim = int64_t{layer.n_kv_heads} * layer.value_dim;
    const int64_t* slots = &ws.slots[static_cast<size_t>(cache.group_of(l) * max_tokens_)];
    if (exact_.active()) exact_.begin_layer(l, cache);
    per_token(pool, T, [&](int64_t t) {
      cache.write(l, slots[t], &ws.k[t * k_dim], &ws.v[t * v_dim]);
      if (exact_.active())
        exact_.store(l, t, batch.positions[static_cast<size_t>(t)], &ws.k[t * k_dim], &ws.v[t * v_dim], cache);
    });
  }

  // Token t's gated query projection [n_heads][query head_dim, gate head_dim] into ws.q and
  // ws.attn_gate, [n_heads * head_dim] each.
  void split_query_and_gate(int64_t t) {
    const int64_t hd = config_.head_dim, q_dim = int64_t{config_.n_heads} * hd;
    const float* both = &ws_.q_gated[t * 2 * q_dim];
    for (int h = 0; h < config_.n_heads; ++h) {
      std::copy_n(both + 2 * h * hd, hd, &ws_.q[t * q_dim + h * hd]);
      std::copy_n(both + 2 * h * hd + hd, hd, &ws_.attn_gate[t * q_dim + h * hd]);
    }
  }

  // Tensor and data parallelism: this rank's vocabulary slice of R rows of logits, every rank's put
  // together on rank 0 into `logits` [R, n_vocab] (the others pass nullptr), kTpLogitRows rows
  // at a time (so that the buffers stay small beside a large vocabulary).
  void gather_logits(int64_t R, float* logits, ThreadPool& pool) {
    const int64_t n_vocab = config_.n_vocab;
    const auto ranks = static_cast<size_t>(vocab_ranks_->size());
    std::array<int64_t, 64> counts{};
    if (ranks > counts.size()) fail("tensor parallelism over more than {} ranks", counts.size());
    const bool root = vocab_ranks_->rank() == 0;
    if (root && logits == nullptr) fail("rank 0 of a tensor-parallel model got no logits buffer");
    for (int64_t first = 0; first < R; first += kTpLogitRows) {
      const int64_t rows = std::min(kTpLogitRows, R - first);
      kernels::matmul(output_, &ws_.last[static_cast<size_t>(first * config_.n_embd)], rows,
                      ws_.tp_logits.data(), ws_.scratch, pool);  // [rows, slice]
      for (size_t r = 0; r < ranks; ++r) counts[r] = rows * vocab_counts_[r];
      vocab_ranks_->gather(ws_.tp_logits.data(), root ? ws_.tp_gathered.data() : nullptr,
                  std::span(counts.data(), ranks));
      if (!root) continue;
      // Rank r's block holds the rows of its slice: each goes to its columns of the row.
      int64_t offset = 0, column = 0;
      for (size_t r = 0; r < ranks; ++r) {
        const int64_t width = vocab_counts_[r];
        for (int64_t row = 0; row < rows; ++row)
          std::copy_n(&ws_.tp_gathered[static_cast<size_t>(offset + row * width)], width,
                      logits + (first + row) * n_vocab + column);
        offset += rows * width;
        column += width;
      }
    }
  }
  static constexpr int64_t kTpLogitRows = 16;
  // Pipeline parallelism: a step's tokens per micro-batch (about; a step of fewer is one), and
  // micro-batches per rank at most. Smaller ones keep more ranks busy at once and multiply
  // better less: 64 rows is where the int8 products are near their best.
  static constexpr int64_t kMicroBatchTokens = 64;
  static constexpr int kMicroBatchesPerRank = 4;

  // An EAGLE-3 head's logits over its draft vocabulary, R rows of output_.rows in `logits`, moved
  // in place to rows of n_vocab: each draft token's logit at its target id (d2t), -inf at the
  // ids it cannot propose. Rows go from the last, whose new place lies past every earlier
  // row's old one.
  void spread_draft_logits(float* logits, int64_t R) {
    const int64_t n_draft = output_.rows, n_vocab = config_.n_vocab;
    for (int64_t r = R - 1; r >= 0; --r) {
      std::copy_n(logits + r * n_draft, n_draft, ws_.draft_row.data());
      float* row = logits + r * n_vocab;
      std::fill_n(row, n_vocab, -std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < n_draft; ++i)
        row[draft_to_target_[static_cast<size_t>(i)]] = ws_.draft_row[static_cast<size_t>(i)];
    }
  }

  // Multi-token-prediction block l (after the trunk's layers) as llama.cpp's Qwen3.5 MTP graph
  // runs it: a full-attention decoder layer of the model's kind, fed eh_proj of [enorm(embedding
  // of the token); hnorm(hidden state of the position before)], and read out through
  // shared_head_norm / shared_head_head, or the model's output norm and output where the file
  // has none of its own. The first block's layer is layers_[n_layers] and its K/V the cache's
  // layer n_layers (ModelConfig::mtp); drafting runs only that one.
  void load_mtp_block(const gguf::GgufFile& file, WeightLoader& w, int l) {
    const ModelConfig& c = config_;
    if (!c.layer_n_ff.empty() || !c.layer_n_kv_heads.empty() || !c.kv_source_layers.empty() ||
        !spec_.sliding_layers.empty() || spec_.per_layer_embd > 0)
      fail("{}: multi-token-prediction layers with per-layer shapes are not implemented",
           file.name());
    const std::string p = layer_prefix(l);
    DecoderLayer& layer = layers_.emplace_back();
    load_attention(w, l, layer);
    layer.head_dim = c.head_dim;
    layer.value_dim = c.value_head_dim > 0 ? c.value_head_dim : c.head_dim;
    layer.n_kv_heads = c.n_kv_heads;
    layer.n_ff = c.n_ff;
    layer.kv_layer = l;  // the cache's extra layer (Model::kv_config)
    if (moe_config_ && moe_config_->moe_layer(l)) {
      layer.moe = load_moe_layer(w, p, *moe_config_, *spec_.moe, c.n_embd);
    } else {
      load_layer_dense_ffn(w, spec_, c, l, layer);
    }
    const std::string n = p + "nextn.";
    MtpBlock& mtp = mtp_blocks_.emplace_back();
    mtp.eh_proj = w.matrix(n + "eh_proj.weight", c.n_embd, 2 * int64_t{c.n_embd});
    mtp.enorm = w.vector(n + "enorm.weight", c.n_embd);
    mtp.hnorm = w.vector(n + "hnorm.weight", c.n_embd);
    if (w.has(n + "embed_tokens.weight")) {
      w.keep_rows(n + "embed_tokens.weight", false);
      mtp.embed = w.matrix(n + "embed_tokens.weight", c.n_vocab, c.n_embd);
    } else {
      mtp.embed = token_embd_;
    }
    mtp.norm = w.has(n + "shared_head_norm.weight") ? w.vector(n + "shared_head_norm.weight", c.n_embd)
                                                      : output_norm_;
    mtp.head = w.has(n + "shared_head_head.weight")
                   ? w.matrix(n + "shared_head_head.weight", c.n_vocab, c.n_embd)
                   : output_;
  }

  // Batch::mtp_catch_up, after the trunk (whose final hidden states are in batch.token_hidden):
  // the MTP block over every token, token t paired with the hidden state of the position before
  // it: the row before it in its entry, the row of that position in another entry of the same
  // sequence, the entry's mtp_prev_hidden, or zeros.
  void mtp_catch_up(const Batch& batch, kv::KvCache& cache, ThreadPool& pool) {
    const ModelConfig& c = config_;
    if (!c.mtp) fail("{}: MTP catch-up on a model loaded without its MTP block", c.name);
    if (batch.token_hidden == nullptr) fail("MTP catch-up without the batch's token_hidden");
    const int64_t n = c.n_embd;
    const auto hidden_before = [&](int64_t t) -> const float* {
      for (const BatchSequence& seq : batch.sequences) {
        if (t < seq.token_begin || t >= seq.token_end) continue;
        const int64_t row = row_before(batch, seq, t);
        return row >= 0 ? batch.token_hidden + row * n : seq.mtp_prev_hidden;
      }
      return nullptr;
    };
    run_mtp_block(batch, cache, pool, hidden_before);
  }

  // The MTP block over the batch's tokens (their KV slots placed), token t paired with
  // hidden(t) ([n_embd], nullptr: zeros); leaves its output in ws.x (+ ws.proj) as the trunk's
  // layers do, for final_hidden. An MTP block starts its residual stream at eh_proj of
  // [enorm(embedding); hnorm(hidden)]; an EAGLE-3 head's layer attends over that pair itself,
  // and its stream starts at the hidden state g (or hnorm(g), norm_before_residual).
  template <typename HiddenOf>
  void run_mtp_block(const Batch& batch, kv::KvCache& cache, ThreadPool& pool, HiddenOf&& hidden) {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens(), n = c.n_embd;
    DecoderWorkspace& ws = ws_;
    const MtpBlock& block = mtp_blocks_[0];
    const bool eagle3 = spec_.eagle3.has_value();
    const bool normed_residual = eagle3 && spec_.eagle3->norm_before_residual;
    per_token(pool, T, [&](int64_t t) {
      float* in = &ws.mtp_in[static_cast<size_t>(t * 2 * n)];
      kernels::dequantize_row(block.embed, batch.tokens[static_cast<size_t>(t)], in);
      kernels::rms_norm(in, block.enorm, in, n, c.rms_eps);
      const float* h = hidden(t);
      if (h != nullptr) {
        kernels::rms_norm(h, block.hnorm, in + n, n, c.rms_eps);
      } else {
        std::fill_n(in + n, n, 0.0f);  // the norm of zeros
      }
      if (!eagle3) return;
      float* x = &ws.x[static_cast<size_t>(t * n)];
      if (normed_residual || h == nullptr) {
        std::copy_n(in + n, n, x);
      } else {
        std::copy_n(h, n, x);
      }
    });
    if (!eagle3) {
      kernels::matmul(block.eh_proj, ws.mtp_in.data(), T, ws.x.data(), ws.scratch, pool,  // [T, n_embd]
                      kernels::active_kernels(), batch.bf16_rows_begin);
    }
    proj_pending_ = false;
    const int l = eagle3 ? 0 : c.n_layers;  // the block's layer in layers_ and in the cache
    attention_block(l, batch, cache, pool);
    feed_forward_block(l, T, batch.bf16_rows_begin, pool, nullptr);
  }

  // Interleaved M-RoPE for text (ArchSpec::interleaved_mrope): a frequency divisor per rotated
  // pair, 1 for pairs on the first three position axes and +inf (no rotation: the fourth axis
  // holds 0 for text) for the others, as ggml's imrope assigns the axes; empty when every pair
  // rotates or the file has no sections.
  static std::vector<float> interleaved_mrope_text_divisors(const gguf::GgufFile& file,
                                                            int rope_dims) {
    const std::string key = file.architecture() + ".rope.dimension_sections";
    const gguf::Array* array = file.get_array(key);
    if (array == nullptr) return {};
    int sections[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < std::min<size_t>(4, array->items.size()); ++i) {
      const std::optional<int64_t> v = array->items[i].as_int();
      if (!v || *v < 0) fail("{}: '{}' holds a value that is not a size", file.name(), key);
      sections[i] = static_cast<int>(*v);
    }
    const int total = sections[0] + sections[1] + sections[2] + sections[3];
    if (total <= 0 || total > rope_dims / 2)
      fail("{}: '{}' sums to {} for {} rotated pairs", file.name(), key, total, rope_dims / 2);
    std::vector<float> divisors(static_cast<size_t>(rope_dims / 2), 1.0f);
    bool any_fixed = false;
    for (int pair = 0; pair < rope_dims / 2; ++pair) {
      const int sector = pair % total;
      const bool text_axis = (sector % 3 == 0 && sector < 3 * sections[0]) ||
                             (sector % 3 == 1 && sector < 3 * sections[1]) ||
                             (sector % 3 == 2 && sector < 3 * sections[2]);
      if (!text_axis) {
        divisors[static_cast<size_t>(pair)] = std::numeric_limits<float>::infinity();
        any_fixed = true;
      }
    }
    return any_fixed ? divisors : std::vector<float>{};
  }

  // RMSNorm of each of n_heads vectors of head_dim in x, in place, with one weight vector.
  void norm_heads(float* x, int n_heads, int head_dim, const float* weight) const {
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + int64_t{h} * head_dim;
      kernels::rms_norm(head, weight, head, head_dim, config_.rms_eps);
    }
  }

  // RoPE of n_heads heads of the layer's size at position pos, with the layer's table.
  void rotate(const DecoderLayer& layer, float* x, int n_heads, int32_t pos) const {
    if (spec_.rope_mode == RopeMode::kNeox) {
      layer.rope->apply_neox(x, n_heads, layer.head_dim, pos);
    } else {
      layer.rope->apply_normal(x, n_heads, layer.head_dim, pos);
    }
  }

  // Attention of every sequence in the batch, split into tiles (kv head x a few tokens) that run
  // in one parallel region.
  void attend_all(const Batch& batch, const kv::KvCache& cache, int l,
                  const kernels::AttentionShape& shape, ThreadPool& pool, bool exact) {
    DecoderWorkspace& ws = ws_;
    const int64_t q_dim = int64_t{shape.n_heads} * shape.head_dim;
    const int64_t out_dim = int64_t{shape.n_heads} * shape.value_head_dim();
    const int64_t tile_tokens = kernels::attention_tile_tokens(shape);
    const auto tiles_of = [&](const BatchSequence& seq) {
      return (seq.token_end - seq.token_begin + tile_tokens - 1) / tile_tokens * shape.n_kv_heads;
    };
    int64_t total_tiles = 0;
    for (const BatchSequence& seq : batch.sequences) total_tiles += tiles_of(seq);
    struct TileRef {
      const BatchSequence* seq;
      int64_t t0, t_end;  // its tokens [t0, t_end) of the batch
      int kv_head;
    };
    const auto find_tile = [&](int64_t i) -> std::optional<TileRef> {
      int64_t first = 0;  // index of the sequence's first tile
      for (const BatchSequence& seq : batch.sequences) {
        const int64_t tiles = tiles_of(seq);
        if (i < first + tiles) {
          const int64_t t0 = seq.token_begin + (i - first) / shape.n_kv_heads * tile_tokens;
          return TileRef{&seq, t0, std::min(t0 + tile_tokens, seq.token_end),
                         static_cast<int>((i - first) % shape.n_kv_heads)};
        }
        first += tiles;
      }
      return std::nullopt;
    };
    // Tiles differ in cost (a decode token over its whole context, a prefill tile over part of
    // it), so they are handed out one at a time rather than split into equal ranges. With the
    // threads taking turns, a thread's next tile is most likely `threads` further on: its K/V
    // are fetched meanwhile.
    const int64_t threads = pool.num_threads();
    const auto group = static_cast<size_t>(cache.group_of(l));
    pool.for_each_dynamic(total_tiles, [&](int64_t i) {
      const std::optional<TileRef> ref = find_tile(i);
      if (!ref) return;
      const kernels::AttentionTile tile{
          &ws.q[ref->t0 * q_dim], &batch.positions[static_cast<size_t>(ref->t0)],
          static_cast<int>(ref->t_end - ref->t0), ref->kv_head, &ws.attn[ref->t0 * out_dim]};
      std::optional<kernels::AttentionPrefetch> next;
      if (const std::optional<TileRef> n = find_tile(i + threads)) {
        const int32_t first_position = batch.positions[static_cast<size_t>(n->t0)];
        const int32_t last_position = batch.positions[static_cast<size_t>(n->t_end - 1)];
        next = kernels::AttentionPrefetch{
            (*n->seq->block_tables)[group], n->kv_head,
            shape.window > 0 ? std::max(0, first_position - shape.window + 1) : 0,
            int64_t{last_position} + 1};
      }
      const auto entry = static_cast<size_t>(ref->seq - batch.sequences.data());
      kernels::attend_tile(tile, cache, l, (*ref->seq->block_tables)[group], shape,
                           next ? &*next : nullptr, kernels::active_kernels(),
                           exact ? exact_.blocks(entry) : nullptr);
    });
  }

  // Rows from bf16_from on may take the bf16 route (model/batch.h).
  void feed_forward_block(int l, int64_t T, int64_t bf16_from, ThreadPool& pool,
                          float* routing_margins) {
    const ModelConfig& c = config_;
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    DecoderWorkspace& ws = ws_;
    per_token(pool, T, [&](int64_t t) {
      add_residual(t);  // the attention output
      kernels::rms_norm(&ws.x[t * c.n_embd], layer.ffn_norm, &ws.h[t * c.n_embd], c.n_embd,
                        c.rms_eps);
    });
    if (layer.moe && layer.pre_moe_norm) {
      experts_beside_mlp(layer, T, bf16_from, pool, routing_margins);
    } else if (layer.moe) {
      moe_->forward(*layer.moe, ws.h.data(), T, ws.proj.data(), pool,  // [T, n_embd]
                    routing_margins);
      if (tp_ != nullptr) tp_->allreduce_sum(ws.proj.data(), T * c.n_embd);  // every rank's experts
    } else {
      dense_feed_forward(layer, T, bf16_from, pool);
    }
    // A layer that finishes the residual stream itself (Gemma 4) adds its output in the same
    // pass as the norm (and, without per-layer embeddings, scales the stream there too).
    const bool finish = layer.finishes_residual();
    const bool scale_now = finish && !layer.ple_post_norm && layer.out_scale != 1.0f;
    if (layer.post_ffn_norm || finish) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.proj[t * c.n_embd];
        if (layer.post_ffn_norm) kernels::rms_norm(out, layer.post_ffn_norm, out, c.n_embd, c.rms_eps);
        if (!finish) return;
        add_residual(t);
        if (scale_now) kernels::scale_inplace(&ws.x[t * c.n_embd], layer.out_scale, c.n_embd);
      });
    }
    proj_pending_ = !finish;
    if (finish && layer.ple_post_norm) per_layer_embedding(l, T, bf16_from, pool);
  }

  // A layer's per-layer embedding (Gemma 4's E models), once its output is in the residual
  // stream x: x += post_norm(proj(gelu(inp_gate x) * this layer's input)), then x *= the
  // layer's output scale (in the same pass).
  void per_layer_embedding(int l, int64_t T, int64_t bf16_from, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    DecoderWorkspace& ws = ws_;
    const int64_t n_ple = spec_.per_layer_embd, n = n_ple * c.n_layers;
    kernels::matmul(layer.ple_gate, ws.x.data(), T, ws.ple_gate.data(), ws.scratch, pool,
                    kernels::active_kernels(), bf16_from);  // [T, n_ple]
    per_token(pool, T, [&](int64_t t) {
      kernels::gelu_mul(&ws.ple_gate[static_cast<size_t>(t * n_ple)],
                        &ws.ple_inputs[static_cast<size_t>(t * n + l * n_ple)], n_ple);
    });
    kernels::matmul(layer.ple_proj, ws.ple_gate.data(), T, ws.proj.data(), ws.scratch, pool,
                    kernels::active_kernels(), bf16_from);  // [T, n_embd]
    per_token(pool, T, [&](int64_t t) {
      float* out = &ws.proj[t * c.n_embd];
      kernels::rms_norm(out, layer.ple_post_norm, out, c.n_embd, c.rms_eps);
      add_residual(t);
      if (layer.out_scale != 1.0f)
        kernels::scale_inplace(&ws.x[t * c.n_embd], layer.out_scale, c.n_embd);
    });
  }

  // ArchSpec::moe_beside_dense_mlp (Gemma 4's 26B-A4B), as llama.cpp's gemma4.cpp: ws.proj =
  // post_mlp_norm(mlp(ws.h)) + post_moe_norm(experts(pre_moe_norm(x))), the router scoring
  // rms_norm(x) / sqrt(n_embd) * router_scale. ws.x holds the stream after attention.
  void experts_beside_mlp(const DecoderLayer& layer, int64_t T, int64_t bf16_from,
                          ThreadPool& pool, float* routing_margins) {
    const ModelConfig& c = config_;
    DecoderWorkspace& ws = ws_;
    const int64_t n = c.n_embd;
    dense_feed_forward(layer, T, bf16_from, pool);
    const float router_norm = 1.0f / std::sqrt(static_cast<float>(n));
    per_token(pool, T, [&](int64_t t) {
      float* mlp = &ws.proj[t * n];
      kernels::rms_norm(mlp, layer.post_mlp_norm, mlp, n, c.rms_eps);
      const float* x = &ws.x[t * n];
      kernels::rms_norm(x, layer.pre_moe_norm, &ws.h[t * n], n, c.rms_eps);
      float* r = &ws.router_in[t * n];
      kernels::rms_norm(x, ws.ones_embd.data(), r, n, c.rms_eps);
      for (int64_t i = 0; i < n; ++i) r[i] = r[i] * router_norm * layer.router_scale[i];
    });
    moe_->forward(*layer.moe, ws.h.data(), T, ws.moe_out.data(), pool, routing_margins,
                  ws.router_in.data());
    per_token(pool, T, [&](int64_t t) {
      float* moe = &ws.moe_out[t * n];
      kernels::rms_norm(moe, layer.post_moe_norm, moe, n, c.rms_eps);
      kernels::add_inplace(&ws.proj[t * n], moe, n);
    });
  }

  // ws.proj[T, n_embd] = the gated feed-forward of ws.h.
  void dense_feed_forward(const DecoderLayer& layer, int64_t T, int64_t bf16_from,
                          ThreadPool& pool) {
    DecoderWorkspace& ws = ws_;
    const kernels::MatmulTarget gate_up[] = {{&layer.w_gate, ws.gate.data()},  // [T, n_ff]
                                             {&layer.w_up, ws.up.data()}};     // [T, n_ff]
    kernels::matmul_many(gate_up, ws.h.data(), T, ws.scratch, pool, kernels::active_kernels(),
                         bf16_from);
    lora_.apply_many(gate_up, ws.h.data(), T, pool);
    const int64_t n_ff = layer.n_ff;  // the layer's (Gemma 4's differ)
    per_token(pool, T, [&](int64_t t) {
      if (spec_.activation == FfnActivation::kGeluTanh) {
        kernels::gelu_mul(&ws.gate[t * n_ff], &ws.up[t * n_ff], n_ff);
      } else {
        kernels::silu_mul(&ws.gate[t * n_ff], &ws.up[t * n_ff], n_ff);
      }
    });
    kernels::matmul(layer.w_down, ws.gate.data(), T, ws.proj.data(), ws.scratch,  // [T, n_embd]
                    pool, kernels::active_kernels(), bf16_from);
    lora_.apply(&layer.w_down, ws.gate.data(), T, ws.proj.data(), pool);
    if (tp_ != nullptr) tp_->allreduce_sum(ws.proj.data(), T * config_.n_embd);  // every rank's columns
  }

  // The final hidden states of the rows asked for (embeddings): the last layer's residual add
  // and the output norm, as the logit rows get them, written to the caller's buffer.
  void compute_hidden(const Batch& batch, ThreadPool& pool) {
    const ModelConfig& c = config_;
    if (batch.hidden == nullptr) fail("batch asks for hidden states without a buffer for them");
    const auto R = static_cast<int64_t>(batch.hidden_rows.size());
    per_token(pool, R, [&](int64_t r) {
      final_hidden(batch.hidden_rows[static_cast<size_t>(r)], batch.hidden + r * c.n_embd,
                   output_norm_);
    });
  }

  // out[n_embd] = the final norm (`norm`: the output norm, or the MTP block's; none: nullptr) of token t's
  // residual stream after the last layer: the last layer's residual add happens here, into
  // `out`, so a token asked for twice is not added to twice.
  void final_hidden(int64_t t, float* out, const float* norm) const {
    const int64_t n = config_.n_embd;
    std::copy_n(&ws_.x[t * n], n, out);
    if (proj_pending_) kernels::add_inplace(out, &ws_.proj[t * n], n);
    if (norm != nullptr) kernels::rms_norm(out, norm, out, n, config_.rms_eps);
  }

  // Logits of the batch's logit rows through `norm` and the vocabulary projection `head` (the
  // model's, or the MTP block's).
  void compute_logits(const Batch& batch, float* logits, ThreadPool& pool, const float* norm,
                      const WeightMatrix& head) {
    const ModelConfig& c = config_;
    DecoderWorkspace& ws = ws_;
    const auto R = static_cast<int64_t>(batch.logit_rows.size());
    if (R == 0) return;  // a step of embedding requests only
    for (int64_t r = 0; r < R; ++r)
      final_hidden(batch.logit_rows[static_cast<size_t>(r)], &ws.last[r * c.n_embd], norm);
    if (vocab_ranks_ != nullptr) {
      gather_logits(R, logits, pool);
      if (logits == nullptr) return;  // a rank other than 0
    } else {
      kernels::matmul(head, ws.last.data(), R, logits, ws.scratch, pool);  // [R, n_vocab]
    }
    if (spec_.final_softcap > 0) {
      // In runs of the rows, all threads on it even for one row (a decode step's 262,144 logits).
      const float cap = spec_.final_softcap;
      constexpr int64_t kRun = 16384;
      pool.parallel_for(R * c.n_vocab, kRun, [&](int64_t begin, int64_t end) {
        kernels::softcap(logits + begin, end - begin, 1.0f / cap, cap);
      });
    }
  }

  ModelConfig config_;
  ArchSpec spec_;
  int64_t max_tokens_;
  WeightMatrix token_embd_;   // [n_vocab, n_embd]
  const float* output_norm_;  // [n_embd]
  WeightMatrix output_;       // [n_vocab, n_embd], token_embd_ when tied
  std::vector<DecoderLayer> layers_;
  std::shared_ptr<HugePageArena> weights_memory_;  // what the pointers above point into
  LoraAdapters lora_;  // bound to layers_' weights by address: layers_ never moves once loaded
  std::optional<MoeConfig> moe_config_;  // ArchSpec::moe's, as the file sets it
  std::unique_ptr<MoeBlock> moe_;        // the MoE layers' work buffers
  std::unique_ptr<MlaBlock> mla_;        // the latent attention's work buffers (ArchSpec::mla)
  std::optional<DeltaNetConfig> delta_config_;  // ArchSpec::delta_net's, as the file sets it
  std::unique_ptr<DeltaNetBlock> delta_;         // the recurrent layers' work buffers
  // The multi-token-prediction blocks (ModelConfig::n_nextn_layers; drafting runs the first,
  // ModelConfig::mtp); their decoder layers follow the trunk's in layers_.
  struct MtpBlock {
    WeightMatrix eh_proj;           // [n_embd, 2 * n_embd] of [normed embedding; normed hidden]
    const float* enorm = nullptr;   // [n_embd]
    const float* hnorm = nullptr;   // [n_embd]
    WeightMatrix embed;             // [n_vocab, n_embd] its own, or the model's token_embd_
    const float* norm = nullptr;    // [n_embd] shared_head_norm, or the output norm
    WeightMatrix head;              // [n_vocab, n_embd] shared_head_head, or the output
  };
  std::vector<MtpBlock> mtp_blocks_;
  // An EAGLE-3 head (ArchSpec::eagle3; mtp_blocks_[0] holds its norms, embeddings and output):
  // fc [n_embd, target layers x target n_embd], its optional input norm, and the target id of
  // each draft-vocabulary token (empty: the same vocabulary).
  kernels::WeightMatrix fc_;
  const float* fc_norm_ = nullptr;
  std::vector<int32_t> draft_to_target_;
  // Per layer, its place in Batch::feature_layers of the running forward (-1: not asked for).
  std::vector<int> feature_slot_;
  // Tensor parallelism (ModelOptions::tp; null: the whole model here): the ranks, and rank 0's
  // message buffer.
  dist::Communicator* tp_ = nullptr;
  std::vector<uint8_t> message_;  // rank 0's messages to the others (any split)
  // Tensor and data parallelism: the ranks that split the vocabulary projection (tp_ or dp_),
  // each rank's share of the vocabulary and where this rank's starts.
  dist::Communicator* vocab_ranks_ = nullptr;
  std::vector<int64_t> vocab_counts_;
  int64_t vocab_begin_ = 0;
  // Pipeline parallelism (ModelOptions::pp; null: every layer here): the ranks, the layers
  // [layer_begin_, layer_end_) this one runs, and the running step's micro-batches (token
  // ranges) and the entries of the one in hand.
  dist::Communicator* pp_ = nullptr;
  // Data parallelism (ModelOptions::dp; null: one process): the ranks, whether the experts are
  // spread over them (--expert-parallel), the running step's part of this rank, and the batch
  // rows of a rank's final rows or tokens (gather_final_rows).
  dist::Communicator* dp_ = nullptr;
  bool dp_experts_ = false;
  std::unique_ptr<LocalBatch> dp_batch_;
  std::vector<int32_t> dp_rows_;
  // Rank 0 of a pipeline, several batches in flight (launch_forward): each slot's batch's
  // receive tickets by micro-batch ([depth, max_micro_batches_], -1: no rows), and whether
  // the slot holds a batch.
  std::vector<int64_t> pipeline_tickets_;
  std::vector<uint8_t> pipeline_slot_busy_;
  size_t max_micro_batches_ = 0;  // (plan_micro_batches makes at most this many)
  int layer_begin_ = 0, layer_end_ = 0;
  std::vector<std::pair<int64_t, int64_t>> micro_batches_;
  std::vector<BatchSequence> micro_entries_;
  RopeTables rope_;
  DecoderWorkspace ws_;
  ExactCopies exact_;  // a quantized cache's exact copies, this batch's side
  // Whether ws.proj holds a layer output not yet added to ws.x (a layer leaves its feed-forward
  // output there for the next layer's first pass, unless it finishes the residual itself).
  bool proj_pending_ = false;
  // Per-layer embeddings (ArchSpec::per_layer_embd).
  WeightMatrix ple_table_;              // [n_vocab, n_layers * per_layer_embd], rows read in place
  WeightMatrix ple_model_proj_;         // [n_layers * per_layer_embd, n_embd]
  const float* ple_proj_norm_ = nullptr;  // [per_layer_embd]
};

}  // namespace

std::vector<bool> sliding_layer_pattern(const gguf::GgufFile& file, int n_layers,
                                        int default_period) {
  const std::string key = file.architecture() + ".attention.sliding_window_pattern";
  std::vector<bool> sliding(static_cast<size_t>(n_layers));
  const gguf::Value* value = file.find(key);
  if (const gguf::Array* flags = value != nullptr && value->is_array() ? file.get_array(key) : nullptr) {
    if (std::ssize(flags->items) != n_layers)
      fail("{}: '{}' has {} flags for {} layers", file.name(), key, flags->items.size(), n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const std::optional<bool> flag = flags->items[static_cast<size_t>(l)].as_bool();
      if (!flag) fail("{}: '{}' holds a value that is not a flag", file.name(), key);
      sliding[static_cast<size_t>(l)] = *flag;
    }
    return sliding;
  }
  const int64_t period = file.get_int(key).value_or(default_period);
  if (period < 0) fail("{}: '{}' = {} is negative", file.name(), key, period);
  for (int l = 0; l < n_layers; ++l)
    sliding[static_cast<size_t>(l)] = period == 0 || l % period < period - 1;
  return sliding;
}

std::vector<std::string> rope_factor_tensors(const ArchSpec& spec) {
  std::vector<std::string> names;
  if (spec.rope_freq_factors) names.emplace_back("rope_freqs.weight");
  if (spec.long_rope) {
    names.emplace_back("rope_factors_long.weight");
    names.emplace_back("rope_factors_short.weight");
  }
  return names;
}

std::string rope_factor_tensor(const gguf::GgufFile& file, const ArchSpec& spec,
                               const ModelConfig& c, int64_t max_context) {
  if (spec.long_rope) {  // LongRoPE (Phi-3): the long factors beyond the original context
    const std::string a = c.architecture + ".rope.scaling.";
    const int64_t original = file.get_int(a + "original_context_length").value_or(c.context_length);
    return max_context > original ? "rope_factors_long.weight" : "rope_factors_short.weight";
  }
  return spec.rope_freq_factors ? "rope_freqs.weight" : "";
}

RopeTables make_rope_tables(const ModelConfig& c, const ArchSpec& spec, int64_t max_context,
                            std::span<const float> freq_factors) {
  RopeTables tables;
  // mscale: llama.cpp's yarn_attn_factor (model/config.h).
  tables.full = kernels::RopeTable(max_context, c.rope_dims, c.rope_freq_base, c.rope_freq_scale,
                                   freq_factors, c.rope_attn_factor, c.rope_yarn);
  // The sliding layers' own table: another base or scale (Gemma 3), other rotated dimensions,
  // or frequency divisors that only the full layers take (Gemma 4).
  const int sliding_dims = c.sliding_rope_dims > 0 ? c.sliding_rope_dims : c.rope_dims;
  tables.own_sliding =
      (spec.sliding_rope_base > 0 && spec.sliding_rope_base != c.rope_freq_base) ||
      spec.sliding_rope_scale != c.rope_freq_scale || sliding_dims != c.rope_dims ||
      (spec.full_layers_take_rope_freqs && !freq_factors.empty());
  if (tables.own_sliding) {
    tables.sliding = kernels::RopeTable(
        max_context, sliding_dims, spec.sliding_rope_base > 0 ? spec.sliding_rope_base : c.rope_freq_base,
        spec.sliding_rope_scale, {}, c.rope_attn_factor, c.rope_yarn);
  }
  return tables;
}

std::unique_ptr<Model> make_decoder(const gguf::GgufFile& file, const ModelOptions& options,
                                    ArchSpec spec) {
  if (options.device == Device::kCuda) {
    const auto split = [](const dist::Communicator* ranks) { return ranks != nullptr && ranks->size() > 1; };
    if (split(options.tp) || split(options.pp) || split(options.dp))
      fail("{}: a model split over ranks runs on the CPU executor only (--device cuda)", file.name());
    if (!options.lora.empty())
      fail("{}: LoRA adapters run on the CPU executor only (--device cuda)", file.name());
    return make_cuda_decoder(file, options, std::move(spec));
  }
  return std::make_unique<Decoder>(file, options, std::move(spec));
}

}  // namespace inferd::model
