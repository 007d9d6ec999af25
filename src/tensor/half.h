// IEEE half (fp16) and bfloat16 conversions to and from float, bit-exact and branch-light.
// Used by the weight formats (fp16 block scales), the KV cache and the reference kernels.
#pragma once

#include <bit>
#include <cstdint>

namespace inferd {

inline float fp16_to_fp32(uint16_t h) {
  // Shift the half into float position, rescale the exponent by 2^112, and fix infinities/NaNs.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t bits = static_cast<uint32_t>(h & 0x7FFF) << 13;
  float magnitude = std::bit_cast<float>(bits) * 0x1.0p112f;  // handles normals and subnormals
  if ((h & 0x7C00) == 0x7C00) magnitude = std::bit_cast<float>(bits | 0x7F800000u);  // inf/nan
  return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
}

inline uint16_t fp32_to_fp16(float f) {
  // Round to nearest even, with overflow to infinity and gradual underflow to subnormals.
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7FFFFFFF;
  if (x > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00);   // NaN
  if (x >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to >= 65520: inf
  if (x < 0x38800000) {  // below the smallest normal half: subnormal or zero
    // Adding 0.5 makes the FPU's own round-to-nearest-even produce the subnormal mantissa.
    float shifted = std::bit_cast<float>(x) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000u));
  }
  const uint32_t mantissa_odd = (x >> 13) & 1;
  x += 0xC8000FFFu + mantissa_odd;  // rebias exponent (-112 << 23) and round half to even
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7FFF + ((x >> 16) & 1);  // round half to even
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace inferd
