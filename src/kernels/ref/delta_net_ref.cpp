#include "kernels/ref/delta_net_ref.h"

#include <algorithm>
#include <cmath>

namespace inferd::kernels::ref {
namespace {

float dot(const float* a, const float* b, int d) {
  float sum = 0.0f;
  for (int i = 0; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

void recurrent(float* state, int d, int64_t n_tokens, const float* q, const float* k,
               int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
               const float* beta, int64_t gb_stride, float scale, float* out, int64_t out_stride) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* q_t = q + t * qk_stride;
    const float* k_t = k + t * qk_stride;
    const float* v_t = v + t * v_stride;
    const float decay = std::exp(g[t * gb_stride]), b = beta[t * gb_stride];
    for (int j = 0; j < d; ++j) {
      float* row = state + int64_t{j} * d;
      for (int i = 0; i < d; ++i) row[i] *= decay;
      const float delta = (v_t[j] - dot(row, k_t, d)) * b;
      for (int i = 0; i < d; ++i) row[i] += delta * k_t[i];
      out[t * out_stride + j] = scale * dot(row, q_t, d);
    }
  }
}

// One chunk of c tokens, S0 the state at its start and G_t the sum of g over tokens 0..t of the
// chunk. Unrolling the recurrence, the state after token t is
//   S_t = exp(G_t) S0 + sum_{s <= t} exp(G_t - G_s) k_s u_s^T
// where u_s is token s's delta, and the deltas solve a unit lower-triangular system:
//   u_t = beta_t (v_t - exp(G_t) S0^T k_t - sum_{s < t} exp(G_t - G_s) (k_t . k_s) u_s).
// Then out_t = scale (exp(G_t) S0^T q_t + sum_{s <= t} exp(G_t - G_s) (q_t . k_s) u_s).
void chunked(float* state, int d, int64_t n_tokens, const float* q, const float* k,
             int64_t qk_stride, const float* v, int64_t v_stride, const float* g, const float* beta,
             int64_t gb_stride, float scale, float* out, int64_t out_stride, float* scratch) {
  constexpr int kC = kDeltaNetChunk;
  const DeltaNetScratch at = delta_net_scratch_layout(d);
  float* ks0 = scratch + at.kq_state;  // [c][d] S0^T k_t
  float* qs0 = ks0 + int64_t{kC} * d;  // [c][d] S0^T q_t
  float* u = scratch + at.u;           // [c][d]
  float* kk = scratch + at.gram;       // [c][c] exp(G_t - G_s) (k_t . k_s), s < t
  float* qk = kk + kC * kC;            // [c][c] exp(G_t - G_s) (q_t . k_s), s <= t
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kC) {
    const int c = static_cast<int>(std::min<int64_t>(kC, n_tokens - t0));
    const auto k_at = [&](int t) { return k + (t0 + t) * qk_stride; };
    const auto q_at = [&](int t) { return q + (t0 + t) * qk_stride; };
    double cum[kC];  // G_t in double: exp(G_t - G_s) must not lose the digits of a small difference
    double sum = 0;
    for (int t = 0; t < c; ++t) cum[t] = sum += g[(t0 + t) * gb_stride];
    for (int t = 0; t < c; ++t) {
      for (int j = 0; j < d; ++j) {
        const float* row = state + int64_t{j} * d;
        ks0[t * d + j] = dot(row, k_at(t), d);
        qs0[t * d + j] = dot(row, q_at(t), d);
      }
      for (int s = 0; s <= t; ++s) {
        const float decay = std::exp(static_cast<float>(cum[t] - cum[s]));
        kk[t * kC + s] = decay * dot(k_at(t), k_at(s), d);
        qk[t * kC + s] = decay * dot(q_at(t), k_at(s), d);
      }
    }
    for (int t = 0; t < c; ++t) {
      const float decay = std::exp(static_cast<float>(cum[t]));
      const float b = beta[(t0 + t) * gb_stride];
      const float* v_t = v + (t0 + t) * v_stride;
      for (int j = 0; j < d; ++j) {
        float r = v_t[j] - decay * ks0[t * d + j];
        for (int s = 0; s < t; ++s) r -= kk[t * kC + s] * u[s * d + j];
        u[t * d + j] = b * r;
      }
      float* o = out + (t0 + t) * out_stride;
      for (int j = 0; j < d; ++j) {
        float acc = decay * qs0[t * d + j];
        for (int s = 0; s <= t; ++s) acc += qk[t * kC + s] * u[s * d + j];
        o[j] = scale * acc;
      }
    }
    // S_c = exp(G_last) S0 + sum_s exp(G_last - G_s) k_s u_s^T
    float to_end[kC];
    for (int s = 0; s < c; ++s) to_end[s] = std::exp(static_cast<float>(cum[c - 1] - cum[s]));
    const float last = std::exp(static_cast<float>(cum[c - 1]));
    for (int j = 0; j < d; ++j) {
      float* row = state + int64_t{j} * d;
      for (int i = 0; i < d; ++i) row[i] *= last;
      for (int s = 0; s < c; ++s) {
        const float weight = to_end[s] * u[s * d + j];
        for (int i = 0; i < d; ++i) row[i] += weight * k_at(s)[i];
      }
    }
  }
}

void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace

DeltaNetKernels delta_net_kernels() {
  return {recurrent, chunked, silu};
}

}  // namespace inferd::kernels::ref
