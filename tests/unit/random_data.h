// Seeded random test data shared by the kernel tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::testing {

// n normal floats with standard deviation `scale`, the same for the same seed.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = dist(rng);
  return out;
}

// n values of a quantized type as random blocks: random quant bits and sub-block scales, with the
// fp16 block scales (d, and dmin or m) set so that values come out roughly normal-sized times
// `scale`. Every bit pattern of the quant and scale bytes is a valid block, so this covers the
// layouts without a weight quantizer. Types without an entry below get all-random bytes.
inline std::vector<uint8_t> random_blocks(DType type, int64_t n, uint32_t seed,
                                          float scale = 1.0f) {
  struct Scales {
    size_t d_at;
    float d;  // d = scale * this (times a random factor in [0.5, 1.5))
    int min_at = -1;
    float min = 0;  // dmin (or m) = d * this
    bool signed_d = false;
  };
  Scales s{0, 0.0f};
  switch (type) {
    case DType::Q5_0:
      s = {offsetof(BlockQ5_0, d), 1.0f / 9, -1, 0, true};
      break;
    case DType::Q5_1:
      s = {offsetof(BlockQ5_1, d), 1.0f / 9, offsetof(BlockQ5_1, m), -15.5f};
      break;
    case DType::IQ4_NL:
      s = {offsetof(BlockIQ4_NL, d), 1.0f / 70, -1, 0, true};
      break;
    case DType::Q2_K:
      s = {offsetof(BlockQ2_K, d), 1.0f / 10, offsetof(BlockQ2_K, dmin), 1.5f};
      break;
    case DType::Q3_K:
      s = {offsetof(BlockQ3_K, d), 1.0f / 40, -1, 0, true};
      break;
    case DType::Q4_K:
      s = {offsetof(BlockQ4_K, d), 1.0f / 150, offsetof(BlockQ4_K, dmin), 7.5f};
      break;
    case DType::Q5_K:
      s = {offsetof(BlockQ5_K, d), 1.0f / 300, offsetof(BlockQ5_K, dmin), 15.5f};
      break;
    case DType::Q6_K:
      s = {offsetof(BlockQ6_K, d), 1.0f / 1400, -1, 0, true};
      break;
    case DType::IQ4_XS:
      s = {offsetof(BlockIQ4_XS, d), 1.0f / 1300, -1, 0, true};
      break;
    // The i-quants: d times (2 s + 1) times a codebook magnitude (up to 43, 62, 15 or 1).
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
      s = {0, 1.0f / 25, -1, 0, true};
      break;
    case DType::IQ3_XXS:
      s = {0, 1.0f / 60, -1, 0, true};
      break;
    case DType::IQ3_S:
      s = {0, 1.0f / 120, -1, 0, true};
      break;
    case DType::IQ1_S:
    case DType::IQ1_M:  // its d is spread over the scale words' top nibbles (below)
      s = {0, 1.0f / 8, -1, 0, true};
      break;
    default:
      break;
  }
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(*row_bytes(type, static_cast<uint64_t>(n))));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng() >> 24);
  if (s.d == 0) return out;
  std::uniform_real_distribution<float> factor(0.5f, 1.5f);
  const DTypeInfo& info = dtype_info(type);
  for (size_t at = 0; at < out.size(); at += info.block_bytes) {
    float d = scale * s.d * factor(rng);
    if (s.signed_d && (rng() & 1)) d = -d;
    const uint16_t d16 = fp32_to_fp16(d);
    if (type == DType::IQ1_M) {
      // Nibble k of d is the top nibble of scale word k (the words follow qs and qh).
      for (size_t k = 0; k < 4; ++k) {
        uint8_t& high = out[at + offsetof(BlockIQ1_M, scales) + 2 * k + 1];
        high = static_cast<uint8_t>((high & 0x0F) | (((d16 >> (4 * k)) & 0x0F) << 4));
      }
      continue;
    }
    std::memcpy(&out[at + s.d_at], &d16, 2);
    if (s.min_at >= 0) {
      const uint16_t m16 = fp32_to_fp16(d * s.min * factor(rng));
      std::memcpy(&out[at + static_cast<size_t>(s.min_at)], &m16, 2);
    }
  }
  return out;
}

}  // namespace inferd::testing
