// Block layouts of the quantized GGUF weight formats and of the int8 activation formats
// they are multiplied with. Byte-exact with the files (static_asserts below).
#pragma once

#include <cstdint>

namespace inferd {

constexpr int kQK = 32;    // values per block of the 32-wide formats
constexpr int kQKK = 256;  // values per super-block of the k-quants

// Q4_0: x = d * (q - 8); q in [0, 15]; value j in the low nibble of qs[j], value j+16 in the high.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q; also the activation format paired with Q4_0 and Q8_0 weights.
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kQK];
};
// Q8_1: Q8_0 plus s = d * sum(q), the activation format paired with Q4_1 (it folds the min).
struct BlockQ8_1 {
  uint16_t d;  // fp16
  uint16_t s;  // fp16
  int8_t qs[kQK];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

}  // namespace inferd
