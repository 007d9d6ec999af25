// Element-wise and row operations of the forward pass (norms, activations, RoPE, softmax).
// Plain C++ written so the compiler vectorizes it; the matmuls are in matmul.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace inferd::kernels {

// sum(x[i]^2) for i < n, accumulated in double.
double sum_of_squares(const float* x, int64_t n);

// out = x / sqrt(mean(x^2) + eps) * weight, over one row of n. `out` may alias `x`.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);

// a[i] = silu(a[i]) * b[i]  (SwiGLU: a is the gate projection, b the up projection)
void silu_mul(float* a, const float* b, int64_t n);
// a[i] = gelu_tanh(a[i]) * b[i]  (GeGLU)
void gelu_mul(float* a, const float* b, int64_t n);
// gpt-oss's experts: x = min(g[i], limit), y = clamp(u[i], -limit, limit),
// g[i] = x * sigmoid(alpha x) * (y + 1)
void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit);
// x[i] = cap * tanh(x[i] * in_scale)  (soft-capping of attention scores and logits)
void softcap(float* x, int64_t n, float in_scale, float cap);

// a[i] += b[i]
void add_inplace(float* a, const float* b, int64_t n);
// a[i] *= s
void scale_inplace(float* a, float s, int64_t n);

// YaRN context extension (`rope.scaling.type` yarn: gpt-oss, long-context Qwen), as ggml
// computes it. Pairs that turn many times within the original context keep their angle (they
// encode local order, which interpolation would blur); pairs that turn less than once are fully
// interpolated (freq_scale x angle); between the two "correction dims" the angle blends
// linearly by pair index, and cos and sin grow by 1 + 0.1 ln(1 / freq_scale).
struct YarnScaling {
  float ext_factor = 0.0f;       // weight of the blend toward the original angles; 0: YaRN off
  float beta_fast = 32.0f;       // pairs turning more than beta_fast times keep their angle...
  float beta_slow = 1.0f;        // ...fewer than beta_slow times: fully interpolated
  int64_t original_context = 0;  // the context trained before the extension (n_ctx_orig)
  // true: the low correction dim floored and the high one ceiled, as ggml does for every model
  // (gpt-oss included, in the llama.cpp we compare with). false: both as computed, as HF does
  // for configs with `truncate: false` (gpt-oss's own).
  bool round_dims = true;
};

// Rotary embedding tables: cos/sin of pos * theta_i for every position, precomputed once.
// theta_i = base^(-2i/rot_dims) / scale; the products are accumulated the way ggml does
// (repeated multiplication in float) so rotations agree with llama.cpp to the last bit.
class RopeTable {
 public:
  RopeTable() = default;
  // freq_factors, when given, holds rot_dims / 2 divisors of the pairs' frequencies (Llama 3.x
  // and LongRoPE files carry them as `rope_freqs.weight`): theta_i / freq_factors[i].
  // mscale multiplies every cos and sin (ggml's attn_factor: LongRoPE's attention factor,
  // `rope.scaling.attn_factor`; 1 elsewhere); YaRN, when on, multiplies them by its own
  // 1 + 0.1 ln(1 / freq_scale) as well.
  RopeTable(int64_t max_positions, int rot_dims, float freq_base, float freq_scale,
            std::span<const float> freq_factors = {}, float mscale = 1.0f,
            const YarnScaling& yarn = {});
  // Rotates the first rot_dims of each of n_heads vectors of head_dim at `pos`.
  // Normal mode pairs (2i, 2i+1) (llama); neox mode pairs (i, i + rot_dims/2) (gemma, qwen).
  void apply_normal(float* x, int n_heads, int head_dim, int64_t pos) const;
  void apply_neox(float* x, int n_heads, int head_dim, int64_t pos) const;
  int64_t max_positions() const { return max_positions_; }
  // The tables themselves, [max_positions, rot_dims / 2] each (a device executor uploads them).
  std::span<const float> cos_values() const { return cos_; }
  std::span<const float> sin_values() const { return sin_; }

 private:
  int64_t max_positions_ = 0;
  int rot_dims_ = 0;
  std::vector<float> cos_, sin_;  // [max_positions, rot_dims / 2]
};

}  // namespace inferd::kernels
