// The codebooks of the i-quant weight types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M; tensor/quant_blocks.h): each stores a group of 8 (or 4) weights as the index of a point
// of a fixed list. Byte j of a word is coordinate j of the point. The lists are the format's
// data (iq_grids.cpp, written by scripts/make-iq-grids from gguf-py).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace inferd {

// Magnitudes 8, 25 or 43, 8 a point.
extern const uint64_t kIq2XxsGrid[256];
extern const uint64_t kIq2XsGrid[512];
extern const uint64_t kIq2SGrid[1024];
// Magnitudes 4..62 (IQ3_XXS) or 1..15 (IQ3_S), 4 a point.
extern const uint32_t kIq3XxsGrid[256];
extern const uint32_t kIq3SGrid[512];
// -1, 0 or 1 as int8 bytes, 8 a point; IQ1_S and IQ1_M add a shift of +-1/8 to each.
extern const uint64_t kIq1SGrid[2048];

// The signs of 8 weights from 7 stored bits (IQ2_XXS, IQ2_XS, IQ3_XXS): bit j set makes weight j
// negative; the eighth is set when the first seven have an odd count, so every group has an
// even number of negative weights.
constexpr uint8_t iq_signs_of(uint32_t seven_bits) {
  const auto bits = static_cast<uint8_t>(seven_bits & 127u);
  return static_cast<uint8_t>(bits | ((std::popcount(bits) & 1) << 7));
}

// iq_signs_of of every 7-bit field, computed at compile time: a table for the kernels (a
// popcount a group would be a library call where POPCNT is not enabled).
inline constexpr std::array<uint8_t, 128> kIqSigns = [] {
  std::array<uint8_t, 128> t{};
  for (uint32_t i = 0; i < 128; ++i) t[i] = iq_signs_of(i);
  return t;
}();

// IQ1_S/IQ1_M's shift of every weight of a group, in units of the group's scale.
constexpr float kIq1Delta = 0.125f;

}  // namespace inferd
