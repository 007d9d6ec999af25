// The read kernels of the memory-bandwidth probe (kernels/read_bandwidth.h): stream a range of
// memory through the ISA's widest loads, as the matmuls stream their weights. The result, the
// sum of the range's 64-bit little-endian words modulo 2^64 (a last partial word zero-padded),
// depends on every byte, so no load can be optimised away, and is the same for every ISA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace inferd::kernels {

// How far ahead of their loads the vector kernels prefetch.
inline constexpr size_t kReadPrefetchBytes = 768;

namespace ref {
uint64_t read_stream(const uint8_t* p, size_t bytes);
}
namespace avx2 {
uint64_t read_stream(const uint8_t* p, size_t bytes);  // 32-byte loads
}
namespace avx512 {
uint64_t read_stream(const uint8_t* p, size_t bytes);  // 64-byte loads
}

namespace detail {
// The words of [p, p + bytes) as the kernels sum them, one at a time: their tails.
inline uint64_t read_stream_tail(const uint8_t* p, size_t bytes) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = 0;
    for (int b = 0; b < 8; ++b) w |= uint64_t{p[i + b]} << (8 * b);
    sum += w;
  }
  uint64_t last = 0;
  for (size_t b = 0; i + b < bytes; ++b) last |= uint64_t{p[i + b]} << (8 * b);
  return sum + last;
}
}  // namespace detail

}  // namespace inferd::kernels
