// Element-wise and row operations of the forward pass (norms, activations, RoPE, softmax).
// Plain C++ written so the compiler vectorizes it; the matmuls are in matmul.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace inferd::kernels {

// out = x / sqrt(mean(x^2) + eps) * weight, over one row of n. `out` may alias `x`.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);

// a[i] = silu(a[i]) * b[i]  (SwiGLU: a is the gate projection, b the up projection)
void silu_mul(float* a, const float* b, int64_t n);
// a[i] = gelu_tanh(a[i]) * b[i]  (GeGLU)
void gelu_mul(float* a, const float* b, int64_t n);

// a[i] += b[i]
void add_inplace(float* a, const float* b, int64_t n);
// a[i] *= s
void scale_inplace(float* a, float s, int64_t n);

// Rotary embedding tables: cos/sin of pos * theta_i for every position, precomputed once.
// theta_i = base^(-2i/rot_dims) / scale; the products are accumulated the way ggml does
// (repeated multiplication in float) so rotations agree with llama.cpp to the last bit.
class RopeTable {
 public:
  RopeTable() = default;
  // freq_factors, when given, holds rot_dims / 2 divisors of the pairs' frequencies (Llama 3.x
  // and LongRoPE files carry them as `rope_freqs.weight`): theta_i / freq_factors[i].
  // mscale multiplies every cos and sin (LongRoPE's attention factor; 1 elsewhere).
  RopeTable(int64_t max_positions, int rot_dims, float freq_base, float freq_scale,
            std::span<const float> freq_factors = {}, float mscale = 1.0f);
  // Rotates the first rot_dims of each of n_heads vectors of head_dim at `pos`.
  // Normal mode pairs (2i, 2i+1) (llama); neox mode pairs (i, i + rot_dims/2) (gemma, qwen).
  void apply_normal(float* x, int n_heads, int head_dim, int64_t pos) const;
  void apply_neox(float* x, int n_heads, int head_dim, int64_t pos) const;
  int64_t max_positions() const { return max_positions_; }

 private:
  int64_t max_positions_ = 0;
  int rot_dims_ = 0;
  std::vector<float> cos_, sin_;  // [max_positions, rot_dims / 2]
};

}  // namespace inferd::kernels
