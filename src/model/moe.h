// The mixture-of-experts feed-forward block (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss, GLM-4.5,
// DeepSeek-V2/V3): a router scores every expert for each token, the top expert_used_count are
// run and their outputs summed with the router's weights; optionally a shared expert that every
// token runs. Owns the MoE hyperparameters (read from `<arch>.expert_*`), each layer's expert weights and the work
// buffers of one forward pass; the decoder (model/decoder.cpp) calls it where a dense layer
// runs its gated feed-forward.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/weights.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::model {

// How router logits become the experts' weights (llama.cpp's expert_gating_func values 1-3).
enum class ExpertGating {
  kSoftmax = 1,        // softmax over all experts, the top k's probabilities
  kSigmoid = 2,        // sigmoid of each logit
  kSoftmaxWeight = 3,  // top k by logit, then a softmax over those k (gpt-oss)
};

enum class ExpertActivation {
  kSilu,       // silu(gate) * up
  kGeluTanh,   // gelu_tanh(gate) * up (Gemma 4)
  kSwigluOai,  // min(gate, 7) * sigmoid(1.702 min(gate, 7)) * (clamp(up, -7, 7) + 1) (gpt-oss)
};

// What an architecture fixes about its experts; keys in the file override the first two.
struct MoeSpec {
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize_weights = false;  // divide the top k's weights by their sum
  ExpertActivation activation = ExpertActivation::kSilu;
  bool biases = false;  // a bias on the router and on every expert matrix (gpt-oss)
  // ffn_{gate,up,down}_shexp run by every token, scaled by sigmoid(ffn_gate_inp_shexp . x)
  // (Qwen2-MoE); Mixtral-style files have none.
  bool shared_expert = false;
  // `expert_shared_count` shared experts of the routed experts' width, stored as one of count x
  // that width, run by every token and added without a gate (GLM-4.5); none when the count is 0
  // or absent.
  bool counted_shared_experts = false;
  // `expert_group_count` groups of consecutive experts, of which a token chooses among the
  // `expert_group_used_count` whose two best selection scores sum highest (DeepSeek-V3); other
  // families refuse the keys.
  bool expert_groups = false;
  // ffn_down_exps.scale: one number an expert that multiplies its output (Gemma 4).
  bool expert_scales = false;
  // An expert is `feed_forward_length` wide, whatever `expert_feed_forward_length` says
  // (Mixtral under the llama architecture, as llama.cpp reads it); otherwise that key, or
  // without it feed_forward_length / expert_used_count (the Qwen MoE files).
  bool expert_ff_is_ff = false;
};

struct MoeConfig {
  int n_experts = 0;
  int n_used = 0;             // experts each token runs
  int n_ff_expert = 0;        // an expert's feed-forward size
  int n_ff_shared = 0;        // the shared expert's (0: none)
  bool shared_gated = true;   // the shared expert's output times sigmoid(ffn_gate_inp_shexp . x)
  int leading_dense = 0;      // layers [0, leading_dense) are dense
  int n_groups = 1;           // expert groups (MoeSpec::expert_groups; 1: none)
  int n_groups_used = 0;      // the groups a token may choose from
  ExpertGating gating = ExpertGating::kSoftmax;
  bool normalize_weights = false;
  float weights_scale = 1.0f;  // the top k's weights times this
  ExpertActivation activation = ExpertActivation::kSilu;
  // Expert parallelism (dist/model_parallel.h): the experts [expert_begin, expert_end) this
  // rank holds and runs; the others' outputs come from their ranks through the all-reduce that
  // follows the block. expert_end 0: every expert.
  int expert_begin = 0;
  int expert_end = 0;
  bool runs_expert(int e) const { return e >= expert_begin && (expert_end == 0 || e < expert_end); }

  // Reads `<arch>.expert_*` with the spec's defaults. Keys that change the computation and
  // that inferd does not implement (expert groups, clamped SwiGLU limits, latent experts...)
  // are an inferd::Error naming them. `n_ff` is `feed_forward_length` (the fallback expert size
  // n_ff / n_used, as llama.cpp takes it).
  static MoeConfig from_gguf(const gguf::GgufFile& file, const MoeSpec& spec, int n_ff);
  bool moe_layer(int layer) const { return layer >= leading_dense; }
};

// One MoE layer's weights; every expert a matrix of its own, packed like dense weights.
struct MoeLayer {
  kernels::WeightMatrix router;         // [n_experts, n_embd]
  const float* router_bias = nullptr;   // [n_experts] added to the logits (gpt-oss)
  const float* selection_bias = nullptr;  // [n_experts] exp_probs_b: changes the choice only
  std::vector<kernels::WeightMatrix> gate, up;  // [n_experts] of [n_ff_expert, n_embd]
  std::vector<kernels::WeightMatrix> down;      // [n_experts] of [n_embd, n_ff_expert]
  const float* gate_bias = nullptr;  // [n_experts, n_ff_expert]
  const float* up_bias = nullptr;    // [n_experts, n_ff_expert]
  const float* down_bias = nullptr;  // [n_experts, n_embd]
  const float* expert_scale = nullptr;  // [n_experts] MoeSpec::expert_scales
  // The shared expert (MoeConfig::n_ff_shared > 0).
  kernels::WeightMatrix shared_gate, shared_up;  // [n_ff_shared, n_embd]
  kernels::WeightMatrix shared_down;             // [n_embd, n_ff_shared]
  kernels::WeightMatrix shared_gate_inp;         // [1, n_embd] MoeConfig::shared_gated
};

// Loads the MoE tensors of layer prefix `p` ("blk.N."): merged 3-D expert tensors
// (ffn_{gate,up,down}_exps, or ffn_gate_up_exps with [gate; up] per expert), or Mixtral's
// older per-expert 2-D tensors ffn_{gate,up,down}.E.weight. Only the experts this rank runs
// (MoeConfig::runs_expert); the router whole.
MoeLayer load_moe_layer(const WeightLoader& w, const std::string& p, const MoeConfig& c,
                        const MoeSpec& spec, int n_embd);

// Work buffers of the MoE block for up to max_tokens tokens per forward, allocated once.
//
// With `all_to_all` (expert parallelism over data-parallel ranks, dist/model_parallel.h): every
// rank holds the experts [E r / N, E (r + 1) / N) of MoeConfig::expert_begin/end and runs its
// own tokens (its sequences') through the router. Each token then goes, with its choice (the
// experts' ids and weights), once to every rank that holds one of its chosen experts (an
// all-to-all); each rank runs its experts on what it received and sends back the weighted
// output of each slot it holds (a second all-to-all, in the order received), and the token's
// rank adds them in slot order, then the shared expert, which every rank holds whole: the same
// values added in the same order as one process, so the same bits. (Sending each rank's sum of
// its slots instead would carry fewer bytes, but add in another order.)
// Every rank calls forward once per MoE layer, also with no tokens of its own: the others' may
// need its experts.
class MoeBlock {
 public:
  MoeBlock(const MoeConfig& config, int n_embd, int64_t max_tokens,
           dist::Communicator* all_to_all = nullptr);
  // out[T, n_embd] = the MoE feed-forward of h[T, n_embd]. No allocation. With `margins`
  // ([T]), each token's value is lowered to this layer's routing margin when smaller: the gap
  // between the last chosen expert and the best one left out, in logits for softmax gating
  // (log-probability ratio), for sigmoid gating the least change of their two logits that
  // swaps them (the score gap over the steeper sigmoid slope), and in the selection score
  // otherwise; with expert groups also the gap between the last chosen group and the next (in
  // the same units). With `router_input`
  // ([T, n_embd]) the router scores that instead of h (Gemma 4 routes on its own norm of the
  // residual stream).
  void forward(const MoeLayer& layer, const float* h, int64_t n_tokens, float* out,
               ThreadPool& pool, float* margins = nullptr, const float* router_input = nullptr);
  const MoeConfig& config() const { return config_; }

 private:
  // Router logits (logits_) -> each token's experts and weights (selected_, weights_), then
  // place_slots.
  void route(const MoeLayer& layer, int64_t n_tokens, float* margins);
  // The slots of selected_ sorted by expert: expert_rows_[e] .. expert_rows_[e + 1] are expert
  // e's rows, row_of_ each slot's.
  void place_slots(int64_t n_tokens);
  // MoeConfig::n_groups: the scores of experts outside a token's best groups become -inf;
  // returns the group margin (MoeBlock::forward's units).
  float mask_groups(const float* probs, float* score) const;
  void run_chunk(const MoeLayer& layer, const float* h, const float* router_input,
                 int64_t n_tokens, float* out, ThreadPool& pool, float* margins);
  // The chosen experts this rank holds over the placed slots of n_tokens inputs, token t's at
  // h + t * h_stride, into down_ (and, with `shared`, the shared expert's gate and up products
  // over h too, whose rows are then n_embd apart).
  void expert_products(const MoeLayer& layer, const float* h, int64_t h_stride, int64_t n_tokens,
                       bool shared, ThreadPool& pool);
  // out[t] = the weighted sum of token t's slots this rank holds (and, with `shared`, plus the
  // shared expert's output).
  void sum_slots(const MoeLayer& layer, int64_t n_tokens, float* out, bool shared, ThreadPool& pool);
  void shared_expert(const MoeLayer& layer, const float* h, int64_t n_tokens, ThreadPool& pool);
  // put(i, v) for each value of slot s's weighted output (its expert's down output, its bias,
  // its scale, its weight), in i order: what sum_slots adds and weighted_slots sends, computed
  // alike so that both give the same bits.
  template <typename Put>
  void slot_values(const MoeLayer& layer, size_t s, Put&& put) const {
    const int64_t D = n_embd_;
    const float* d = &down_[static_cast<size_t>(row_of_[s]) * static_cast<size_t>(D)];
    const float wt = weights_[s];
    if (layer.expert_scale != nullptr) {  // (down * scale) * weight, as llama.cpp
      const float es = layer.expert_scale[selected_[s]];
      for (int64_t i = 0; i < D; ++i) put(i, d[i] * es * wt);
      return;
    }
    const float* bias = layer.down_bias ? layer.down_bias + int64_t{selected_[s]} * D : nullptr;
    for (int64_t i = 0; i < D; ++i) put(i, (bias ? d[i] + bias[i] : d[i]) * wt);
  }
  // The weighted output of each slot this rank holds of the placed n_tokens, as sum_slots
  // computes it, into slot_out_ from row out_first[t] on for token t.
  void weighted_slots(const MoeLayer& layer, int64_t n_tokens, const int64_t* out_first,
                      ThreadPool& pool);
  // o += the shared expert's output of the chunk's token t (shared_down_, shared_scale_).
  void add_shared(int64_t t, float* o) const;
  // The all-to-all form of forward (all_to_all_ set).
  void forward_across_ranks(const MoeLayer& layer, const float* h, const float* router_input,
                            int64_t n_tokens, float* out, ThreadPool& pool, float* margins);

  MoeConfig config_;
  int n_embd_;
  int64_t chunk_tokens_;  // tokens the buffers hold; longer batches run in chunks
  HugePageArena memory_;
  std::span<float> logits_;         // [C, n_experts]
  std::span<int32_t> selected_;     // [C, n_used] expert of each slot
  std::span<float> weights_;        // [C, n_used]
  std::span<int32_t> row_of_;       // [C, n_used] the slot's row in the expert-sorted buffers
  std::span<int32_t> expert_rows_;  // [n_experts + 1] first sorted row of each expert
  std::span<float> xs_;             // [C * n_used, n_embd] inputs sorted by expert
  std::span<float> gate_, up_;      // [C * n_used, n_ff_expert]
  std::span<float> down_;           // [C * n_used, n_embd]
  std::span<float> shared_gate_, shared_up_;  // [C, n_ff_shared]
  std::span<float> shared_down_;              // [C, n_embd]
  std::span<float> shared_scale_;             // [C] MoeConfig::shared_gated
  std::vector<kernels::GroupedProduct> items_;  // reserved for every expert and the shared one
  kernels::ActivationScratch scratch_;
  // The all-to-all form (T: the model's max_tokens, N ranks, a record: a token's input, then
  // its n_used expert ids (as floats, exact) and weights).
  dist::Communicator* all_to_all_ = nullptr;
  std::vector<int> rank_of_expert_;  // [n_experts]
  std::span<int32_t> local_selected_;  // [T, n_used] this rank's tokens' choices
  std::span<float> local_weights_;     // [T, n_used]
  std::span<uint64_t> sent_to_;        // [T] a bit per rank its record went to
  std::span<float> records_out_;       // [T * N, record] by destination rank
  std::span<float> records_in_;        // [T, record] by source rank, in its order
  // The weighted output of each slot held here of the records received, record by record and
  // in slot order within each, [<= T * n_used, n_embd]; the first of each record's
  // ([T + 1], running over the chunks); and those of this rank's tokens as they come back,
  // by rank, [<= T * n_used, n_embd].
  std::span<float> slot_out_;
  std::span<int64_t> own_slots_before_;
  std::span<float> slot_in_;
  std::vector<int64_t> send_counts_, recv_counts_, offsets_;  // [N] floats; records
};

}  // namespace inferd::model
