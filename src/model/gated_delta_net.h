// The Gated DeltaNet mixer of hybrid models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next): on the layers
// it runs, it replaces attention. Instead of keys and values that grow with the context, each
// sequence carries a fixed-size state per layer: the last (kernel - 1) inputs of a short causal
// convolution, and per value head a [head_dim x head_dim] matrix updated by the gated delta
// rule (kernels/delta_net.h). A token costs the same at position 100 as at 32k.
//
// Per token x (the layer's normed input), per layer:
//   qkv = conv1d_silu(W_qkv x) -> q, k (key heads, l2-normed), v (value heads)
//   z = W_gate x;  beta = sigmoid(W_beta x);  g = softplus(W_alpha x + dt_bias) * a  (a < 0)
//   per value head h: S_h = exp(g_h) S_h;  S_h += k (beta_h (v_h - S_h k))^T;  o_h = S_h q / sqrt(d)
//   out = W_out [rms_norm(o_h) * norm * silu(z_h)]_h
// Value heads outnumber key heads by a whole ratio; which key head a value head reads differs
// by family (DeltaNetSpec).
//
// The state of every sequence lives in the KV cache's state slots (kv/kv_cache.h), one slot per
// sequence holding all recurrent layers' state; this block owns the hyperparameters, the layer
// weights and the work buffers of one forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/weights.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::model {

// What a family fixes about its Gated DeltaNet layers.
struct DeltaNetSpec {
  // Value head h reads key head h / (n_v_heads / n_k_heads) (Qwen3-Next, as its reference
  // repeat_interleave), instead of h % n_k_heads (Qwen3.5, whose converter orders the value
  // heads so that the key heads tile).
  bool interleaved_key_heads = false;
  // One ssm_beta_alpha tensor [2 * n_v_heads, n_embd] whose rows go per key head: that head's
  // value heads' beta rows, then their alpha rows (Qwen3-Next), instead of ssm_beta and
  // ssm_alpha (Qwen3.5).
  bool combined_beta_alpha = false;
};

struct DeltaNetConfig {
  int conv_kernel = 0;  // ssm.conv_kernel: taps of the causal convolution
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  int head_dim = 0;     // ssm.state_size: key and value head size
  float rms_eps = 1e-6f;
  std::vector<bool> recurrent_layers;  // one flag per layer

  // Reads `<arch>.ssm.*` and which layers are recurrent (`attention.recurrent_layers`, or one
  // full-attention layer every `full_attention_interval`, default 4, as llama.cpp). Shapes it
  // does not run (inner size other than value heads x head size, value heads not a multiple of
  // key heads, a head size the kernels do not take) are an inferd::Error naming the key.
  static DeltaNetConfig from_gguf(const gguf::GgufFile& file, int n_layers, float rms_eps);

  int64_t key_dim() const { return int64_t{n_k_heads} * head_dim; }
  int64_t value_dim() const { return int64_t{n_v_heads} * head_dim; }
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q; k; v]
  // One layer's state in a slot: the convolution's history [conv_kernel - 1, conv_channels],
  // then the delta-rule matrices [n_v_heads, head_dim (value), head_dim (key)].
  // Both rounded up to 16 floats, so that every matrix starts on a cache line (the kernels
  // run about 30% slower on rows that do not).
  int64_t conv_state_floats() const { return round16(int64_t{conv_kernel - 1} * conv_channels()); }
  int64_t layer_state_floats() const {
    return conv_state_floats() + round16(value_dim() * int64_t{head_dim});
  }
  static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
  int num_recurrent_layers() const;
};

struct DeltaNetLayer {
  kernels::WeightMatrix w_qkv;    // [conv_channels, n_embd]
  kernels::WeightMatrix w_gate;   // z: [value_dim, n_embd]
  kernels::WeightMatrix w_beta;   // [n_v_heads, n_embd] (Qwen3-Next: [2 n_v_heads, n_embd] with alpha)
  kernels::WeightMatrix w_alpha;  // [n_v_heads, n_embd] (absent with combined_beta_alpha)
  const float* conv = nullptr;     // [conv_channels, conv_kernel], oldest tap first
  const float* dt_bias = nullptr;  // [n_v_heads]
  const float* a = nullptr;        // [n_v_heads], negative: -exp(A_log)
  const float* norm = nullptr;     // [head_dim]
  kernels::WeightMatrix w_out;     // [n_embd, value_dim]
  int64_t state_offset = 0;        // floats into a state slot where this layer's state starts
};

// Loads layer prefix `p` ("blk.N.")'s Gated DeltaNet tensors.
DeltaNetLayer load_delta_net_layer(const WeightLoader& w, const std::string& p,
                                   const DeltaNetConfig& c, const DeltaNetSpec& spec, int n_embd);

class DeltaNetBlock {
 public:
  DeltaNetBlock(const DeltaNetConfig& config, const DeltaNetSpec& spec, int n_embd,
                int64_t max_tokens);
  // Orders the batch's entries by sequence (state slot) and position, and zeroes the state of
  // every sequence whose first token here is at position 0 (a fresh sequence, or one
  // recomputed after preemption). Call once per batch, before the first layer. A sequence may
  // come as two entries (model/batch.h: a recomputed one's prompt and generated tokens take
  // different kernel routes); they must be consecutive in position and are run in that order.
  void begin_batch(const Batch& batch, kv::KvCache& cache);
  // out[T, n_embd] = the mixer's output for h[T, n_embd] (the layer's normed input), each
  // sequence's tokens in order from its state slot, which is left holding the state after its
  // last token. No allocation.
  void forward(const DeltaNetLayer& layer, const Batch& batch, const float* h, kv::KvCache& cache,
               float* out, ThreadPool& pool, int64_t bf16_rows_begin);
  const DeltaNetConfig& config() const { return config_; }

 private:
  int key_head_of(int value_head) const {
    return spec_.interleaved_key_heads ? value_head / (config_.n_v_heads / config_.n_k_heads)
                                       : value_head % config_.n_k_heads;
  }
  // Convolution, q/k normalisation, gates of one entry's tokens [t0, t1).
  void prepare_entry(const DeltaNetLayer& layer, float* conv_state, int64_t t0, int64_t t1);
  // One batch entry: its sequence's state slot and first position; begin_batch sorts them.
  struct Entry {
    int32_t slot;
    int32_t first_position;
    int32_t index;  // into Batch::sequences
  };

  DeltaNetConfig config_;
  DeltaNetSpec spec_;
  int n_embd_;
  HugePageArena memory_;
  std::span<float> mixed_;  // [T, conv_channels] the input projection, then its convolution
  std::span<float> conv_;   // [T, conv_channels] after the convolution and SiLU: [q; k; v]
  std::span<float> z_;      // [T, value_dim] the output gate
  std::span<float> ba_;     // [T, 2 n_v_heads] beta and alpha projections
  std::span<float> beta_;   // [T, n_v_heads] sigmoid(beta)
  std::span<float> g_;      // [T, n_v_heads] log of the decay
  std::span<float> o_;      // [T, value_dim] the heads' outputs, then gated and normed
  std::vector<Entry> entries_;        // the batch's entries by (slot, first position); reserved
  std::vector<int32_t> slot_begin_;   // where each sequence's entries start in entries_, + end
  kernels::ActivationScratch act_;
};

}  // namespace inferd::model
