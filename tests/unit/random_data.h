// Seeded random test data shared by the kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace inferd::testing {

// n normal floats with standard deviation `scale`, the same for the same seed.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = dist(rng);
  return out;
}

}  // namespace inferd::testing
