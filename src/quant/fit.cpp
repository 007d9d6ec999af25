#include "quant/fit.h"

#include <algorithm>

#include "tensor/quant_blocks.h"

namespace inferd::quant {
namespace {

int clamp_int(int v, int lo, int hi) {
  return std::min(std::max(v, lo), hi);
}

// The value of largest magnitude, with its sign; the magnitude goes to *magnitude.
float signed_peak(int n, const float* x, float* magnitude) {
  float peak = 0;
  float mag = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > mag) {
      mag = std::fabs(x[i]);
      peak = x[i];
    }
  }
  *magnitude = mag;
  return peak;
}

}  // namespace

float fit_symmetric(int n, int nmax, const float* x, int8_t* levels) {
  float magnitude = 0;
  const float peak = signed_peak(n, x, &magnitude);
  if (magnitude < kTinyGroup) {
    std::fill(levels, levels + n, int8_t{0});
    return 0;
  }
  auto level = [&](float inv, int i) { return clamp_int(round_int(inv * x[i]), -nmax, nmax - 1); };
  // Weighted sums of x*q and q*q for the rounding at inverse scale `inv`; the least-squares
  // scale is sum_xq / sum_qq and the error it leaves falls as sum_xq^2 / sum_qq grows.
  auto sums = [&](float inv, float& sum_xq, float& sum_qq) {
    sum_xq = 0;
    sum_qq = 0;
    for (int i = 0; i < n; ++i) {
      const int q = level(inv, i);
      const float w = x[i] * x[i];
      sum_xq += w * x[i] * q;
      sum_qq += w * q * q;
    }
  };
  auto keep = [&](float inv) {
    for (int i = 0; i < n; ++i) levels[i] = static_cast<int8_t>(nmax + level(inv, i));
  };

  float inv = -nmax / peak;
  float sum_xq = 0;
  float sum_qq = 0;
  sums(inv, sum_xq, sum_qq);
  keep(inv);
  float scale = sum_qq != 0 ? sum_xq / sum_qq : 0.0f;
  float explained = scale * sum_xq;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inv = -(nmax + 0.1f * step) / peak;
    sums(inv, sum_xq, sum_qq);
    if (sum_qq > 0 && sum_xq * sum_xq > explained * sum_qq) {
      keep(inv);
      scale = sum_xq / sum_qq;
      explained = scale * sum_xq;
    }
  }
  return scale;
}

float fit_symmetric_refined(int n, int nmax, const float* x, int8_t* levels) {
  float magnitude = 0;
  const float peak = signed_peak(n, x, &magnitude);
  if (magnitude < kTinyGroup) {
    std::fill(levels, levels + n, int8_t{0});
    return 0;
  }
  const float inv = -nmax / peak;
  float sum_xq = 0;
  float sum_qq = 0;
  for (int i = 0; i < n; ++i) {
    const int q = clamp_int(round_int(inv * x[i]), -nmax, nmax - 1);
    levels[i] = static_cast<int8_t>(q);
    const float w = x[i] * x[i];
    sum_xq += w * x[i] * q;
    sum_qq += w * q * q;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int moved = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      // The sums without value i; the scale they fit says where value i belongs.
      float others_xq = sum_xq - w * x[i] * levels[i];
      if (others_xq <= 0) continue;
      float others_qq = sum_qq - w * levels[i] * levels[i];
      const int q = clamp_int(round_int(x[i] * others_qq / others_xq), -nmax, nmax - 1);
      if (q == levels[i]) continue;
      others_xq += w * x[i] * q;
      others_qq += w * q * q;
      // Better when (xq^2 / qq) grows.
      if (others_qq > 0 && others_xq * others_xq * sum_qq > sum_xq * sum_xq * others_qq) {
        levels[i] = static_cast<int8_t>(q);
        sum_xq = others_xq;
        sum_qq = others_qq;
        ++moved;
      }
    }
    if (moved == 0) break;
  }
  for (int i = 0; i < n; ++i) levels[i] = static_cast<int8_t>(levels[i] + nmax);
  return sum_qq > 0 ? sum_xq / sum_qq : 0.0f;
}

float fit_with_min(int n, int nmax, const float* x, const float* weights, uint8_t* levels,
                   float* min_out, float rmin, float rdelta, int nstep, bool absolute_error) {
  float lo = x[0];
  float hi = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the offset only ever subtracts: a group of positives keeps 0
  if (hi == lo) {
    std::fill(levels, levels + n, uint8_t{0});
    *min_out = -lo;
    return 0;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* q) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      float diff = scale * q[i] + offset - x[i];
      diff = absolute_error ? std::fabs(diff) : diff * diff;
      err += weights[i] * diff;
    }
    return err;
  };

  // Start from the plain min/max rounding. Each better fit found moves the grid's origin to
  // its own offset, so the later candidate scales are taken relative to the best offset yet.
  float inv = nmax / (hi - lo);
  float scale = 1 / inv;
  float offset = lo;  // value = scale * q + offset, offset <= 0
  for (int i = 0; i < n; ++i) {
    levels[i] = static_cast<uint8_t>(clamp_int(round_int(inv * (x[i] - offset)), 0, nmax));
  }
  float best_error = error_of(scale, offset, levels);

  uint8_t trial[256];
  for (int step = 0; step <= nstep; ++step) {
    inv = (rmin + rdelta * step + nmax) / (hi - offset);
    float sum_q = 0;
    float sum_qq = 0;
    float sum_xq = 0;
    for (int i = 0; i < n; ++i) {
      const int q = clamp_int(round_int(inv * (x[i] - offset)), 0, nmax);
      trial[i] = static_cast<uint8_t>(q);
      const float w = weights[i];
      sum_q += w * q;
      sum_qq += w * q * q;
      sum_xq += w * q * x[i];
    }
    // Weighted least squares for x ~ s * q + m over this rounding.
    const float det = sum_w * sum_qq - sum_q * sum_q;
    if (!(det > 0)) continue;
    float s = (sum_w * sum_xq - sum_x * sum_q) / det;
    float m = (sum_qq * sum_x - sum_q * sum_xq) / det;
    if (m > 0) {  // a positive offset is not representable: refit the scale alone
      m = 0;
      s = sum_xq / sum_qq;
    }
    const float err = error_of(s, m, trial);
    if (err < best_error) {
      std::copy(trial, trial + n, levels);
      best_error = err;
      scale = s;
      offset = m;
    }
  }
  *min_out = -offset;
  return scale;
}

int nearest_iq4_level(float v) {
  const int8_t* t = kIq4Values;
  if (v <= t[0]) return 0;
  if (v >= t[15]) return 15;
  int lo = 0;
  int hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < t[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - t[lo] < t[hi] - v ? lo : hi;
}

float fit_iq4(int n, const float* x, int ntry) {
  float magnitude = 0;
  const float peak = signed_peak(n, x, &magnitude);
  if (magnitude < kTinyGroup) return 0;
  const float level0 = kIq4Values[0];
  auto sums = [&](float inv, float& sum_xq, float& sum_qq) {
    sum_xq = 0;
    sum_qq = 0;
    for (int i = 0; i < n; ++i) {
      const float q = kIq4Values[nearest_iq4_level(inv * x[i])];
      const float w = x[i] * x[i];
      sum_xq += w * q * x[i];
      sum_qq += w * q * q;
    }
  };
  // The peak on the outermost level (-127), with the sign that puts it there.
  float d = ntry > 0 ? -peak / level0 : peak / level0;
  float sum_xq = 0;
  float sum_qq = 0;
  sums(1 / d, sum_xq, sum_qq);
  d = sum_qq > 0 ? sum_xq / sum_qq : 0.0f;
  float explained = d * sum_xq;
  for (int t = -ntry; t <= ntry; ++t) {
    sums((t + level0) / peak, sum_xq, sum_qq);
    if (sum_qq > 0 && sum_xq * sum_xq > explained * sum_qq) {
      d = sum_xq / sum_qq;
      explained = d * sum_xq;
    }
  }
  return d;
}

}  // namespace inferd::quant
