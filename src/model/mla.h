// Multi-head latent attention (MLA: DeepSeek-V2/V3 and the families built on them), decompressed
// into ordinary per-head keys and values for the paged KV cache. Owns the MLA hyperparameters
// (`<arch>.attention.q_lora_rank`, `kv_lora_rank`, the MLA head sizes), each layer's projection
// weights and the work buffers of one forward pass; the decoder (model/decoder.cpp) calls it
// where other layers project their q, k and v, then attends as for any other layer.
//
// Per token x (the normed residual stream): q = q_b(norm(q_a x)) (or a plain attn_q) with
// n_heads heads of nope + rope dimensions; attn_kv_a_mqa x = [c (kv_lora_rank); k_pe (rope)],
// c RMS-normed; each head's key [k_nope_h; k_pe] with k_nope_h from c and one k_pe shared by
// all heads, its value v_h from c. RoPE rotates each head's last `rope` dimensions (queries) and
// k_pe. Older files decompress with one attn_kv_b ([k_nope_h; v_h] per head); newer ones with
// attn_k_b (per head [kv_lora_rank, nope], the transpose of what decompresses: llama.cpp
// multiplies it into the query instead, its "absorption") and attn_v_b (per head [v,
// kv_lora_rank]).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::model {

struct MlaConfig {
  int q_lora_rank = 0;   // 0: queries from a plain attn_q
  int kv_lora_rank = 0;  // the compressed latent c
  int nope_dims = 0;     // a key head's dimensions without RoPE
  int rope_dims = 0;     // a key head's rotated dimensions (k_pe, shared by the heads)
  int value_dims = 0;    // a value head's size
  // Decompression by attn_k_b and attn_v_b (the files that give the MLA head sizes) instead of
  // one attn_kv_b (older files).
  bool split_kv_b = false;
  int key_dims() const { return nope_dims + rope_dims; }
};

struct MlaLayer {
  kernels::WeightMatrix q_a;         // [q_lora_rank, n_embd] (q_lora_rank > 0)
  const float* q_a_norm = nullptr;   // [q_lora_rank]
  kernels::WeightMatrix q_b;         // [n_heads * key_dims, q_lora_rank]
  kernels::WeightMatrix q;           // [n_heads * key_dims, n_embd] (q_lora_rank 0)
  kernels::WeightMatrix kv_a;        // [kv_lora_rank + rope_dims, n_embd]
  const float* kv_a_norm = nullptr;  // [kv_lora_rank]
  // Either attn_kv_b, [n_heads * (nope + value), kv_lora_rank] ([k_nope_h; v_h] per head), or
  // k_b (attn_k_b transposed, in F32) [n_heads * nope, kv_lora_rank] and v_b (attn_v_b)
  // [n_heads * value, kv_lora_rank].
  kernels::WeightMatrix kv_b;
  kernels::WeightMatrix k_b, v_b;
};

// The MLA tensors of layer prefix `p` ("blk.N."), checked against the config's shapes:
// attn_q_a/attn_q_a_norm/attn_q_b when q_lora_rank > 0 (else attn_q), and attn_k_b with
// attn_v_b (MlaConfig::split_kv_b) or attn_kv_b.
MlaLayer load_mla_layer(const WeightLoader& w, const std::string& p, const MlaConfig& c,
                        int n_heads, int n_embd);

// Work buffers for up to max_tokens tokens, allocated once.
class MlaBlock {
 public:
  MlaBlock(const MlaConfig& config, int n_heads, int n_embd, int64_t max_tokens);
  // The queries q [T, n_heads * key_dims], keys k [T, n_heads * key_dims] and values v [T,
  // n_heads * value_dims] of h [T, n_embd] (tokens at `positions`), rotated with `rope` in
  // `mode`. No allocation. Rows from bf16_from on may take the bf16 route (model/batch.h).
  void project(const MlaLayer& layer, const float* h, int64_t n_tokens, const int32_t* positions,
               const kernels::RopeTable& rope, RopeMode mode, float rms_eps, float* q, float* k,
               float* v, ThreadPool& pool, int64_t bf16_from);

 private:
  MlaConfig config_;
  int n_heads_;
  HugePageArena memory_;
  std::span<float> q_a_;     // [T, q_lora_rank]
  std::span<float> kv_a_;    // [T, kv_lora_rank + rope_dims]
  std::span<float> latent_;  // [T, kv_lora_rank] c, normed
  std::span<float> kv_b_;    // [T, n_heads * (nope + value)] or [T, n_heads * nope] (k_b)
  std::span<float> v_b_;     // [T, n_heads * value] (v_b)
  kernels::ActivationScratch scratch_;
};

}  // namespace inferd::model
