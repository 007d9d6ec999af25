// Rng: xoshiro256** seeded through splitmix64. Small, fast, and the same sequence for the same
// seed on every platform, so a seeded request always produces the same text.
#pragma once

#include <cstdint>

namespace inferd::sampling {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1) with 24 bits of precision (a float's mantissa).
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }

 private:
  uint64_t s_[4];
};

}  // namespace inferd::sampling
