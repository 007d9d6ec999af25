// MaskStats: how long constrained decoding spends on grammar masks, the step it adds before
// each sampled token. Every mask is counted; the most recent durations are kept in a ring
// (sized once) for the median and tail a benchmark or the server log reports.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace inferd::engine {

struct MaskStats {
  static constexpr size_t kWindow = 8192;
  int64_t masks = 0;
  double total_s = 0;
  std::array<float, kWindow> recent_us{};  // ring: mask i at i % kWindow

  void record(double seconds) {
    recent_us[static_cast<size_t>(masks) % kWindow] = static_cast<float>(seconds * 1e6);
    ++masks;
    total_s += seconds;
  }
  // The q-quantile (0..1) of the recent durations in microseconds; 0 before any mask. Copies
  // the window: for reports, not for the step loop.
  double quantile_us(double q) const {
    const size_t n = std::min<size_t>(static_cast<size_t>(masks), kWindow);
    if (n == 0) return 0;
    std::vector<float> v(recent_us.begin(), recent_us.begin() + static_cast<std::ptrdiff_t>(n));
    const auto k = static_cast<size_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(n - 1) + 0.5);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
};

}  // namespace inferd::engine
