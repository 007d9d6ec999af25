#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::kernels {

double sum_of_squares(const float* x, int64_t n) {
  // Eight partial sums: a single chain of dependent additions would cost a few cycles per value.
  constexpr int kLanes = 8;
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) partial[j] += double(x[i + j]) * x[i + j];
  }
  double sum = 0;
  for (double p : partial) sum += p;
  for (; i < n; ++i) sum += double(x[i]) * x[i];
  return sum;
}

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  const double sum = sum_of_squares(x, n);  // ggml accumulates the squares in double too
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void silu_mul(float* a, const float* b, int64_t n) {
  active_kernels().silu_mul(a, b, n);
}

void gelu_mul(float* a, const float* b, int64_t n) {
  active_kernels().gelu_mul(a, b, n);
}

void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit) {
  active_kernels().swiglu_oai(g, u, n, alpha, limit);
}

void softcap(float* x, int64_t n, float in_scale, float cap) {
  active_kernels().softcap(x, n, in_scale, cap);
}

void add_inplace(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void scale_inplace(float* a, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] *= s;
}

namespace {

// The pair index (fractional) whose frequency turns `turns` times over the original context:
// base^(-2i/rot_dims) * original_context = 2 pi turns, solved for i. In float, as ggml.
float yarn_correction_dim(int rot_dims, int64_t original_context, float turns, float base) {
  return static_cast<float>(rot_dims) *
         std::log(static_cast<float>(original_context) / (turns * 2 * std::numbers::pi_v<float>)) /
         (2 * std::log(base));
}

// Per rotated pair, how much of its original (unscaled) angle YaRN keeps: ext_factor below the
// low correction dim, 0 above the high one, a linear ramp between (ggml's rope_yarn_ramp, with
// its floor of 0.001 on the ramp's width). [rot_dims / 2]
std::vector<float> yarn_extrapolation_mix(int rot_dims, float freq_base, const YarnScaling& yarn) {
  float low = yarn_correction_dim(rot_dims, yarn.original_context, yarn.beta_fast, freq_base);
  float high = yarn_correction_dim(rot_dims, yarn.original_context, yarn.beta_slow, freq_base);
  if (yarn.round_dims) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(0.0f, low);
  high = std::min(static_cast<float>(rot_dims - 1), high);
  std::vector<float> mix(static_cast<size_t>(rot_dims / 2));
  for (int i = 0; i < rot_dims / 2; ++i) {
    const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
    mix[static_cast<size_t>(i)] = (1 - std::min(1.0f, std::max(0.0f, y))) * yarn.ext_factor;
  }
  return mix;
}

void check_yarn(const YarnScaling& yarn, float freq_scale) {
  if (yarn.ext_factor == 0.0f) return;
  if (yarn.original_context <= 0 || !(freq_scale > 0.0f) || !(yarn.beta_fast > 0.0f) ||
      !(yarn.beta_slow > 0.0f)) {
    fail("rope: YaRN needs a positive original context ({}), scale ({}) and betas ({}, {})",
         yarn.original_context, freq_scale, yarn.beta_fast, yarn.beta_slow);
  }
}

}  // namespace

RopeTable::RopeTable(int64_t max_positions, int rot_dims, float freq_base, float freq_scale,
                     std::span<const float> freq_factors, float mscale, const YarnScaling& yarn)
    : max_positions_(max_positions), rot_dims_(rot_dims) {
  if (rot_dims <= 0 || rot_dims % 2 != 0)
    fail("rope: dimension count {} must be even and positive", rot_dims);
  const int half = rot_dims / 2;
  if (!freq_factors.empty() && std::ssize(freq_factors) != half)
    fail("rope: {} frequency factors for {} rotated pairs", freq_factors.size(), half);
  for (const float f : freq_factors) {
    if (!(f > 0.0f) || !std::isfinite(f)) fail("rope: frequency factor {} is not positive", f);
  }
  check_yarn(yarn, freq_scale);
  const bool use_yarn = yarn.ext_factor != 0.0f;
  const std::vector<float> mix =
      use_yarn ? yarn_extrapolation_mix(rot_dims, freq_base, yarn) : std::vector<float>();
  if (use_yarn) mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  cos_.resize(static_cast<size_t>(max_positions * half));
  sin_.resize(cos_.size());
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(rot_dims));
  for (int64_t p = 0; p < max_positions; ++p) {
    float theta = static_cast<float>(p);
    for (int i = 0; i < half; ++i) {
      // As ggml: the factor divides the unscaled angle, then the linear scale applies.
      const float original =
          freq_factors.empty() ? theta : theta / freq_factors[static_cast<size_t>(i)];
      float angle = freq_scale * original;
      if (use_yarn) {
        const float m = mix[static_cast<size_t>(i)];
        angle = angle * (1 - m) + original * m;
      }
      cos_[static_cast<size_t>(p * half + i)] = std::cos(angle) * mscale;
      sin_[static_cast<size_t>(p * half + i)] = std::sin(angle) * mscale;
      theta *= theta_scale;
    }
  }
}

// Pair i is (i0, i1) = (2i, 2i+1) in normal mode and (i, i + half) in neox mode.
template <bool kNeox>
static void rotate(float* x, int n_heads, int head_dim, int half, const float* c, const float* s) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int i0 = kNeox ? i : 2 * i;
      const int i1 = kNeox ? i + half : 2 * i + 1;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * c[i] - x1 * s[i];
      v[i1] = x0 * s[i] + x1 * c[i];
    }
  }
}

void RopeTable::apply_normal(float* x, int n_heads, int head_dim, int64_t pos) const {
  const int half = rot_dims_ / 2;
  const size_t row = static_cast<size_t>(pos * half);
  rotate<false>(x, n_heads, head_dim, half, &cos_[row], &sin_[row]);
}

void RopeTable::apply_neox(float* x, int n_heads, int head_dim, int64_t pos) const {
  const int half = rot_dims_ / 2;
  const size_t row = static_cast<size_t>(pos * half);
  rotate<true>(x, n_heads, head_dim, half, &cos_[row], &sin_[row]);
}

}  // namespace inferd::kernels
