// The shared decoder (model/decoder.h): RMSNorm, RoPE, grouped-query attention over the paged
// KV cache, gated feed-forward, optional tied output embedding, and the variations an ArchSpec
// switches on.
#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include <fmt/core.h>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/layer_weights.h"
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
  // Gated DeltaNet instead of attention (ArchSpec::delta_net, a recurrent layer): wq..wo unset.
  std::optional<DeltaNetLayer> delta_net;
  bool sliding = false;         // attends over a window of recent keys only
  const kernels::RopeTable* rope = nullptr;  // the model's table for this layer
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
    if (spec_.attention_scale <= 0)
      spec_.attention_scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
    const ModelConfig& c = config_;
    if (c.head_dim > 256)
      fail("{}: head size {} is above the supported 256", file.name(), c.head_dim);
    if (!spec_.sliding_layers.empty() && std::ssize(spec_.sliding_layers) != c.n_layers)
      fail("{}: sliding-window flags for {} of {} layers", file.name(), spec_.sliding_layers.size(),
           c.n_layers);
    if (spec_.sliding_window > 0) {  // the KV cache gives these layers a group of their own
      config_.sliding_window = spec_.sliding_window;
      config_.sliding_layers = spec_.sliding_layers;
    }
    if (spec_.moe) moe_config_ = MoeConfig::from_gguf(file, *spec_.moe, c.n_ff);
    if (spec_.delta_net) {
      delta_config_ = DeltaNetConfig::from_gguf(file, c.n_layers, c.rms_eps);
      config_.recurrent_layers = delta_config_->recurrent_layers;
    }
    WeightLoader w(file);
    // Looked up row by row; multiplied too when the output is tied to it.
    w.keep_rows("token_embd.weight", !w.has("output.weight"));
    token_embd_ = w.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    output_norm_ = w.vector("output_norm.weight", c.n_embd);
    output_ = w.has("output.weight") ? w.matrix("output.weight", c.n_vocab, c.n_embd) : token_embd_;
    for (int i = 0; i < c.n_layers; ++i) {
      DecoderLayer& layer = layers_.emplace_back();
      if (delta_config_ && delta_config_->recurrent_layers[static_cast<size_t>(i)]) {
        const std::string p = layer_prefix(i);
        layer.attn_norm = w.vector(p + "attn_norm.weight", c.n_embd);
        layer.ffn_norm = w.vector(p + spec_.ffn_norm + ".weight", c.n_embd);
        layer.delta_net = load_delta_net_layer(w, p, *delta_config_, *spec_.delta_net, c.n_embd);
        layer.delta_net->state_offset = config_.recurrent_state_floats;
        config_.recurrent_state_floats += delta_config_->layer_state_floats();
      } else {
        load_layer_attention(w, spec_, c, i, layer);
      }
      if (moe_config_ && moe_config_->moe_layer(i)) {
        layer.moe = load_moe_layer(w, layer_prefix(i), *moe_config_, *spec_.moe, c.n_embd);
      } else {
        load_layer_dense_ffn(w, spec_, c, i, layer);
      }
      if (spec_.attention_sinks)
        layer.attn_sinks = w.vector(layer_prefix(i) + "attn_sinks.weight", c.n_heads);
    }
    if (spec_.keeps_nextn_layers && c.n_nextn_layers > 0) load_nextn_layers(file, w);
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
    rope_ = make_rope_tables(c, spec_, max_context,
                             freq_factors ? std::span<const float>(freq_factors, size_t(c.rope_dims / 2))
                                          : std::span<const float>());
    for (DecoderLayer& layer : layers_) layer.rope = &rope_.for_layer(layer.sliding);
    allocate_workspace();
  }

  const ModelConfig& config() const override { return config_; }

  void forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens();
    if (T > max_tokens_)
      fail("batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
    check_batch(batch, c.n_vocab, rope_.full.max_positions());
    DecoderWorkspace& ws = ws_;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t token = batch.tokens[static_cast<size_t>(t)];
      float* row = &ws.x[static_cast<size_t>(t * c.n_embd)];
      kernels::dequantize_row(token_embd_, token, row);
      if (spec_.scale_embedding)  // in float, as llama.cpp computes it
        kernels::scale_inplace(row, std::sqrt(static_cast<float>(c.n_embd)), c.n_embd);
    }
    place_tokens(batch, cache);
    if (delta_) delta_->begin_batch(batch, cache);
    if (batch.routing_margins != nullptr)
      std::fill_n(batch.routing_margins, T, std::numeric_limits<float>::infinity());
    // Each block leaves its output in ws.proj; the residual add happens in the next block's
    // first per-token pass (and for the logit rows before the final norm), so it costs no
    // serial pass of its own.
    for (int l = 0; l < c.n_layers; ++l) {
      attention_block(l, batch, cache, pool);
      feed_forward_block(l, T, batch.bf16_rows_begin, pool, batch.routing_margins);
    }
    if (!batch.hidden_rows.empty()) compute_hidden(batch, pool);
    compute_logits(batch, logits, pool);
  }

 private:
  // Runs fn(t) for every token, split over the threads when the batch is large enough for a
  // parallel region to pay (a region costs about a microsecond; one token's norm less).
  template <typename Fn>
  static void per_token(ThreadPool& pool, int64_t T, Fn&& fn) {
    constexpr int64_t kTokensPerThread = 4;
    pool.parallel_for(T, kTokensPerThread, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) fn(t);
    });
  }

  // The KV slot of every token in every group of the cache: block * block_size + offset.
  // (check_batch has checked the sequences.)
  void place_tokens(const Batch& batch, const kv::KvCache& cache) {
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
    const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
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
    ws_.attn = floats(T * q_dim);
    ws_.proj = floats(T * c.n_embd);
    const bool any_dense = std::any_of(layers_.begin(), layers_.end(),
                                       [](const DecoderLayer& l) { return !l.moe; });
    if (any_dense) {
      ws_.gate = floats(T * c.n_ff);
      ws_.up = floats(T * c.n_ff);
    }
    if (moe_config_) moe_ = std::make_unique<MoeBlock>(*moe_config_, c.n_embd, max_tokens_);
    if (delta_config_)
      delta_ = std::make_unique<DeltaNetBlock>(*delta_config_, *spec_.delta_net, c.n_embd, max_tokens_);
    ws_.last = floats(T * c.n_embd);
    ws_.slots = ws_.memory.allocate_array<int64_t>(kv::kMaxKvGroups * T);
    ws_.scratch.reserve(max_tokens_,
                        std::max<int64_t>({c.n_embd, any_dense ? c.n_ff : 0, int64_t(q_dim)}));
    ws_.memory.prefault();  // every forward pass uses it: fault it in now, not in the first one
  }

  void attention_block(int l, const Batch& batch, kv::KvCache& cache, ThreadPool& pool) {
    const ModelConfig& c = config_;
    const DecoderLayer& layer = layers_[static_cast<size_t>(l)];
    DecoderWorkspace& ws = ws_;
    const int64_t T = batch.num_tokens();
    const int64_t q_dim = int64_t{c.n_heads} * c.head_dim,
                  kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
    per_token(pool, T, [&](int64_t t) {
      if (l > 0) add_residual(t);  // the previous layer's feed-forward output
      kernels::rms_norm(&ws.x[t * c.n_embd], layer.attn_norm, &ws.h[t * c.n_embd], c.n_embd,
                        c.rms_eps);
    });
    if (layer.delta_net) {  // a recurrent layer: the state slot instead of K/V
      delta_->forward(*layer.delta_net, batch, ws.h.data(), cache, ws.proj.data(), pool,
                      batch.bf16_rows_begin);
      return;
    }
    const kernels::MatmulTarget qkv[] = {
        {&layer.wq, spec_.gated_attention ? ws.q_gated.data() : ws.q.data()},  // [T, q_dim] (x2)
        {&layer.wk, ws.k.data()},                                              // k: [T, kv_dim]
        {&layer.wv, ws.v.data()}};                                             // v: [T, kv_dim]
    kernels::matmul_many(qkv, ws.h.data(), T, ws.scratch, pool, kernels::active_kernels(),
                         batch.bf16_rows_begin);
    const int64_t* slots = &ws.slots[static_cast<size_t>(cache.group_of(l) * max_tokens_)];
    per_token(pool, T, [&](int64_t t) {  // every token writes its own KV slot
      if (spec_.gated_attention) split_query_and_gate(t);
      if (layer.bq) kernels::add_inplace(&ws.q[t * q_dim], layer.bq, q_dim);
      if (layer.bk) kernels::add_inplace(&ws.k[t * kv_dim], layer.bk, kv_dim);
      if (layer.bv) kernels::add_inplace(&ws.v[t * kv_dim], layer.bv, kv_dim);
      if (layer.q_norm) norm_heads(&ws.q[t * q_dim], c.n_heads, layer.q_norm);
      if (layer.k_norm) norm_heads(&ws.k[t * kv_dim], c.n_kv_heads, layer.k_norm);
      const int32_t pos = batch.positions[static_cast<size_t>(t)];
      const auto rotate = [&](float* x, int n_heads) {
        if (spec_.rope_mode == RopeMode::kNeox) {
          layer.rope->apply_neox(x, n_heads, c.head_dim, pos);
        } else {
          layer.rope->apply_normal(x, n_heads, c.head_dim, pos);
        }
      };
      rotate(&ws.q[t * q_dim], c.n_heads);
      rotate(&ws.k[t * kv_dim], c.n_kv_heads);
      cache.write(l, slots[t], &ws.k[t * kv_dim], &ws.v[t * kv_dim]);
    });
    const kernels::AttentionShape shape{c.n_heads,
                                        c.n_kv_heads,
                                        c.head_dim,
                                        spec_.attention_scale,
                                        layer.sliding ? spec_.sliding_window : 0,
                                        spec_.attention_softcap,
                                        layer.attn_sinks};
    attend_all(batch, cache, l, shape, pool);
    if (spec_.gated_attention) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.attn[t * q_dim];
        const float* gate = &ws.attn_gate[t * q_dim];
        for (int64_t i = 0; i < q_dim; ++i) out[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
      });
    }
    kernels::matmul(layer.wo, ws.attn.data(), T, ws.proj.data(), ws.scratch, pool,  // [T, n_embd]
                    kernels::active_kernels(), batch.bf16_rows_begin);
    if (layer.bo || layer.post_attn_norm) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.proj[t * c.n_embd];
        if (layer.bo) kernels::add_inplace(out, layer.bo, c.n_embd);
        if (layer.post_attn_norm)
          kernels::rms_norm(out, layer.post_attn_norm, out, c.n_embd, c.rms_eps);
      });
    }
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

  // Loads the multi-token-prediction blocks after the trunk (ModelConfig::n_nextn_layers) as
  // they are, kept for the MTP drafter; the forward pass does not run them yet.
  void load_nextn_layers(const gguf::GgufFile& file, WeightLoader& w) {
    const ModelConfig& c = config_;
    for (int l = c.n_layers; l < c.n_layers + c.n_nextn_layers; ++l) {
      const std::string p = layer_prefix(l);
      for (const gguf::TensorInfo& t : file.tensors()) {
        if (!t.name.starts_with(p)) continue;
        if (t.shape.size() == 1) {
          nextn_vectors_.push_back(w.vector(t.name, int64_t(t.shape[0])));
        } else if (t.shape.size() == 2) {
          nextn_matrices_.push_back(w.matrix(t.name, int64_t(t.shape[1]), int64_t(t.shape[0])));
        } else {
          fail("{}: multi-token-prediction tensor '{}' has shape {}", file.name(), t.name,
               t.shape_string());
        }
      }
    }
    // Said once, at load, where a user reads the server's start-up lines.
    fmt::print(stderr,
               "[inferd] {}: {} multi-token-prediction layer(s) loaded and kept; they are not "
               "run until MTP drafting is implemented (the trunk's output is unchanged)\n",
               file.name(), c.n_nextn_layers);
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
  void norm_heads(float* x, int n_heads, const float* weight) const {
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + int64_t{h} * config_.head_dim;
      kernels::rms_norm(head, weight, head, config_.head_dim, config_.rms_eps);
    }
  }

  // Attention of every sequence in the batch, split into tiles (kv head x a few tokens) that run
  // in one parallel region.
  void attend_all(const Batch& batch, const kv::KvCache& cache, int l,
                  const kernels::AttentionShape& shape, ThreadPool& pool) {
    DecoderWorkspace& ws = ws_;
    const int64_t q_dim = int64_t{shape.n_heads} * shape.head_dim;
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
          static_cast<int>(ref->t_end - ref->t0), ref->kv_head, &ws.attn[ref->t0 * q_dim]};
      std::optional<kernels::AttentionPrefetch> next;
      if (const std::optional<TileRef> n = find_tile(i + threads)) {
        const int32_t first_position = batch.positions[static_cast<size_t>(n->t0)];
        const int32_t last_position = batch.positions[static_cast<size_t>(n->t_end - 1)];
        next = kernels::AttentionPrefetch{
            (*n->seq->block_tables)[group], n->kv_head,
            shape.window > 0 ? std::max(0, first_position - shape.window + 1) : 0,
            int64_t{last_position} + 1};
      }
      kernels::attend_tile(tile, cache, l, (*ref->seq->block_tables)[group], shape,
                           next ? &*next : nullptr);
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
    if (layer.moe) {
      moe_->forward(*layer.moe, ws.h.data(), T, ws.proj.data(), pool,  // [T, n_embd]
                    routing_margins);
    } else {
      dense_feed_forward(layer, T, bf16_from, pool);
    }
    if (layer.post_ffn_norm) {
      per_token(pool, T, [&](int64_t t) {
        float* out = &ws.proj[t * c.n_embd];
        kernels::rms_norm(out, layer.post_ffn_norm, out, c.n_embd, c.rms_eps);
      });
    }
  }

  // ws.proj[T, n_embd] = the gated feed-forward of ws.h.
  void dense_feed_forward(const DecoderLayer& layer, int64_t T, int64_t bf16_from,
                          ThreadPool& pool) {
    const ModelConfig& c = config_;
    DecoderWorkspace& ws = ws_;
    const kernels::MatmulTarget gate_up[] = {{&layer.w_gate, ws.gate.data()},  // [T, n_ff]
                                             {&layer.w_up, ws.up.data()}};     // [T, n_ff]
    kernels::matmul_many(gate_up, ws.h.data(), T, ws.scratch, pool, kernels::active_kernels(),
                         bf16_from);
    per_token(pool, T, [&](int64_t t) {
      if (spec_.activation == FfnActivation::kGeluTanh) {
        kernels::gelu_mul(&ws.gate[t * c.n_ff], &ws.up[t * c.n_ff], c.n_ff);
      } else {
        kernels::silu_mul(&ws.gate[t * c.n_ff], &ws.up[t * c.n_ff], c.n_ff);
      }
    });
    kernels::matmul(layer.w_down, ws.gate.data(), T, ws.proj.data(), ws.scratch,  // [T, n_embd]
                    pool, kernels::active_kernels(), bf16_from);
  }

  // The final hidden states of the rows asked for (embeddings): the last layer's residual add
  // and the output norm, as the logit rows get them, written to the caller's buffer.
  void compute_hidden(const Batch& batch, ThreadPool& pool) {
    const ModelConfig& c = config_;
    if (batch.hidden == nullptr) fail("batch asks for hidden states without a buffer for them");
    const auto R = static_cast<int64_t>(batch.hidden_rows.size());
    per_token(pool, R, [&](int64_t r) {
      final_hidden(batch.hidden_rows[static_cast<size_t>(r)], batch.hidden + r * c.n_embd);
    });
  }

  // out[n_embd] = the output norm of token t's residual stream after the last layer: the last
  // layer's residual add happens here, into `out`, so a token asked for twice is not added to
  // twice.
  void final_hidden(int64_t t, float* out) const {
    const int64_t n = config_.n_embd;
    std::copy_n(&ws_.x[t * n], n, out);
    kernels::add_inplace(out, &ws_.proj[t * n], n);
    kernels::rms_norm(out, output_norm_, out, n, config_.rms_eps);
  }

  void compute_logits(const Batch& batch, float* logits, ThreadPool& pool) {
    const ModelConfig& c = config_;
    DecoderWorkspace& ws = ws_;
    const auto R = static_cast<int64_t>(batch.logit_rows.size());
    if (R == 0) return;  // a step of embedding requests only
    for (int64_t r = 0; r < R; ++r)
      final_hidden(batch.logit_rows[static_cast<size_t>(r)], &ws.last[r * c.n_embd]);
    kernels::matmul(output_, ws.last.data(), R, logits, ws.scratch, pool);  // [R, n_vocab]
    if (spec_.final_softcap > 0) {
      const float cap = spec_.final_softcap;
      per_token(pool, R, [&](int64_t r) {
        float* row = logits + r * c.n_vocab;
        for (int64_t i = 0; i < c.n_vocab; ++i) row[i] = cap * std::tanh(row[i] / cap);
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
  std::optional<MoeConfig> moe_config_;  // ArchSpec::moe's, as the file sets it
  std::unique_ptr<MoeBlock> moe_;        // the MoE layers' work buffers
  std::optional<DeltaNetConfig> delta_config_;  // ArchSpec::delta_net's, as the file sets it
  std::unique_ptr<DeltaNetBlock> delta_;         // the recurrent layers' work buffers
  std::vector<kernels::WeightMatrix> nextn_matrices_;  // ArchSpec::keeps_nextn_layers
  std::vector<const float*> nextn_vectors_;
  RopeTables rope_;
  DecoderWorkspace ws_;
};

}  // namespace

std::vector<bool> sliding_layer_pattern(const gguf::GgufFile& file, int n_layers,
                                        int default_period) {
  const std::string key = file.architecture() + ".attention.sliding_window_pattern";
  std::vector<bool> sliding(static_cast<size_t>(n_layers));
  if (const gguf::Array* flags = file.get_array(key)) {
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
  tables.own_sliding =
      (spec.sliding_rope_base > 0 && spec.sliding_rope_base != c.rope_freq_base) ||
      spec.sliding_rope_scale != c.rope_freq_scale;
  if (tables.own_sliding) {
    tables.sliding = kernels::RopeTable(
        max_context, c.rope_dims, spec.sliding_rope_base > 0 ? spec.sliding_rope_base : c.rope_freq_base,
        spec.sliding_rope_scale, {}, c.rope_attn_factor, c.rope_yarn);
  }
  return tables;
}

std::unique_ptr<Model> make_decoder(const gguf::GgufFile& file, const ModelOptions& options,
                                    ArchSpec spec) {
  if (options.device == Device::kCuda) return make_cuda_decoder(file, options, std::move(spec));
  return std::make_unique<Decoder>(file, options, std::move(spec));
}

}  // namespace inferd::model
