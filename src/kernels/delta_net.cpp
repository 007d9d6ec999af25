#include "kernels/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/error.h"

namespace inferd::kernels {

DeltaNetScratch delta_net_scratch_layout(int d) {
  const auto padded = [](int64_t floats) { return (floats + 15) / 16 * 16; };
  const int64_t c = kDeltaNetChunk;
  DeltaNetScratch s{};
  s.state_t = 0;
  s.kq = s.state_t + padded(int64_t{d} * d);
  s.k_t = s.kq + padded(2 * c * d);
  s.kq_state = s.k_t + padded(int64_t{d} * c);
  s.u = s.kq_state + padded(2 * c * d);
  s.gram = s.u + padded(c * d);
  s.inverse = s.gram + padded(2 * c * c);
  s.total = s.inverse + padded(c * c);
  return s;
}

int64_t delta_net_chunked_scratch_floats(int d) {
  return delta_net_scratch_layout(d).total;
}

namespace {

// The weighted window sums of one token, taps known at compile time (the models' kernel is 4) so
// that the loop over channels vectorizes; rows[i] is the window row of tap i.
template <int kTaps>
void conv_taps(const float* const* rows, const float* w, int64_t channels, float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    float sum = 0.0f;
    for (int i = 0; i < kTaps; ++i) sum += w[c * kTaps + i] * rows[i][c];
    out[c] = sum;
  }
}

void conv_taps_any(const float* const* rows, int taps, const float* w, int64_t channels,
                   float* out) {
  std::fill(out, out + channels, 0.0f);
  for (int i = 0; i < taps; ++i) {
    for (int64_t c = 0; c < channels; ++c) out[c] += w[c * taps + i] * rows[i][c];
  }
}

}  // namespace

void causal_conv1d_silu(float* history, int kernel, int64_t channels, const float* x,
                        int64_t x_stride, int64_t n_tokens, const float* w, float* out,
                        int64_t out_stride, const KernelTable& table) {
  if (kernel < 1 || kernel > kMaxConvTaps)
    fail("causal_conv1d_silu: kernel {} is not in [1, {}]", kernel, kMaxConvTaps);
  const int64_t kept = kernel - 1;  // history rows
  const float* rows[kMaxConvTaps];
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < kernel; ++i) {
      const int64_t at = t + i;  // window row
      rows[i] = at < kept ? history + at * channels : x + (at - kept) * x_stride;
    }
    float* o = out + t * out_stride;
    if (kernel == 4) {
      conv_taps<4>(rows, w, channels, o);
    } else {
      conv_taps_any(rows, kernel, w, channels, o);
    }
    table.delta_net.silu(o, channels);
  }
  // The window's last `kept` rows: older history rows move up, then the new x rows.
  const int64_t from_history = std::max<int64_t>(0, kept - n_tokens);
  if (from_history > 0 && n_tokens > 0) {
    std::memmove(history, history + n_tokens * channels,
                 static_cast<size_t>(from_history * channels) * sizeof(float));
  }
  for (int64_t r = from_history; r < kept; ++r) {
    const float* row = x + (n_tokens - (kept - r)) * x_stride;
    std::memcpy(history + r * channels, row, static_cast<size_t>(channels) * sizeof(float));
  }
}

void l2_norm_rows(float* x, int64_t n_rows, int d, int64_t stride, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * stride;
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum_of_squares(row, d)) + eps);
    for (int i = 0; i < d; ++i) row[i] *= inv;
  }
}

void gated_rms_norm(float* x, const float* z, const float* w, int d, float eps,
                    const KernelTable& table) {
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_of_squares(x, d) / d) + eps);
  constexpr int kPiece = 256;  // silu(z) a piece at a time, on the stack
  float gate[kPiece];
  for (int i0 = 0; i0 < d; i0 += kPiece) {
    const int n = std::min(kPiece, d - i0);
    std::memcpy(gate, z + i0, static_cast<size_t>(n) * sizeof(float));
    table.delta_net.silu(gate, n);
    for (int i = 0; i < n; ++i) x[i0 + i] = x[i0 + i] * inv * w[i0 + i] * gate[i];
  }
}

}  // namespace inferd::kernels
