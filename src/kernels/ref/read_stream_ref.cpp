// Scalar read kernel: four independent 64-bit sums, so the loads of one iteration overlap.
#include <cstring>

#include "kernels/read_stream.h"

namespace inferd::kernels::ref {

uint64_t read_stream(const uint8_t* p, size_t bytes) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof(w));  // little-endian x86: the words as the sum defines them
    a += w[0];
    b += w[1];
    c += w[2];
    d += w[3];
  }
  return a + b + c + d + detail::read_stream_tail(p + i, bytes - i);
}

}  // namespace inferd::kernels::ref
