#include "kv/q4_block_fit.h"

#include <algorithm>
#include <cmath>

#include "tensor/half.h"

namespace inferd::kv {
namespace {

constexpr int kBlock = 32;
// Candidate steps: the largest magnitude maps to -(8 + kTrialStep * i), i in [-kTrials, kTrials].
// On normal random blocks (the rotated cache's values are close to that) the squared error is
// 11.2% below llama.cpp's rule with these 5 and 11.3% with 19 steps 0.1 apart (make_qx_quants'
// range), at a quarter of the cost.
constexpr int kTrials = 2;
constexpr float kTrialStep = 0.4f;

// x rounded to the nearest integer, ties to even, for |x| < 2^22: adding and taking away 1.5 x
// 2^23 leaves no fraction bits. Unlike std::nearbyint, it inlines and vectorizes in a baseline
// x86-64 build.
inline float round_to_integer(float x) {
  constexpr float kMagic = 12582912.0f;
  return (x + kMagic) - kMagic;
}

void fit_block(const float* x, BlockQ4_0& block) {
  float max = 0;  // the value of largest magnitude, with its sign
  for (int j = 0; j < kBlock; ++j)
    if (std::fabs(x[j]) > std::fabs(max)) max = x[j];
  float best_q[kBlock] = {};
  float best_d = 0;
  if (max != 0) {
    float best_gain = -1;  // sum(x q)^2 / sum(q q): the squared error's reduction by d
    for (int i = -kTrials; i <= kTrials; ++i) {
      const float inverse = -(8.0f + kTrialStep * static_cast<float>(i)) / max;
      float q[kBlock];
      for (int j = 0; j < kBlock; ++j)
        q[j] = std::min(7.0f, std::max(-8.0f, round_to_integer(x[j] * inverse)));
      // Sums in kLanes running parts, so that the compiler keeps them in one vector register.
      constexpr int kLanes = 4;
      float xq_part[kLanes] = {}, qq_part[kLanes] = {};
      for (int j = 0; j < kBlock; j += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          xq_part[l] += x[j + l] * q[j + l];
          qq_part[l] += q[j + l] * q[j + l];
        }
      }
      const float xq = (xq_part[0] + xq_part[1]) + (xq_part[2] + xq_part[3]);
      const float qq = (qq_part[0] + qq_part[1]) + (qq_part[2] + qq_part[3]);
      if (qq == 0) continue;
      const float gain = xq * xq / qq;
      if (gain > best_gain) {
        best_gain = gain;
        best_d = xq / qq;
        std::copy_n(q, kBlock, best_q);
      }
    }
  }
  block.d = fp32_to_fp16(best_d);
  for (int j = 0; j < kBlock / 2; ++j)  // value j in the low nibble of byte j, j + 16 in the high
    block.qs[j] = static_cast<uint8_t>((static_cast<int>(best_q[j]) + 8) |
                                       (static_cast<int>(best_q[j + kBlock / 2]) + 8) << 4);
}

}  // namespace

void quantize_q4_0_least_squares(const float* x, BlockQ4_0* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kBlock; ++b) fit_block(x + b * kBlock, blocks[b]);
}

}  // namespace inferd::kv
