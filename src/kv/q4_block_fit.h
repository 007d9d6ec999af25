// Q4_0 blocks for the KV cache, fitted by least squares. llama.cpp's Q4_0 rule (d = the value
// of largest magnitude / -8) lets that one value set the step of all 32, and uses only the 15
// levels on its side well. Here a block tries 5 steps around it (as llama-quantize's search for
// its k-quants' scales, make_qx_quants, tries 19), rounds the values with each, and keeps the one
// whose least-squares scale d = sum(x q) / sum(q q) leaves the smallest squared error; d is that
// least-squares scale. The blocks are ordinary Q4_0 blocks (x = d (q -
// 8)): every reader of the cache stays as it is. The rule's own step is one of the candidates,
// and least squares can only lower its error, so no block comes out worse than llama.cpp's
// (but for the rounding of d to fp16).
#pragma once

#include <cstdint>

#include "tensor/quant_blocks.h"

namespace inferd::kv {

// n values (a multiple of 32) into n / 32 Q4_0 blocks.
void quantize_q4_0_least_squares(const float* x, BlockQ4_0* blocks, int64_t n);

}  // namespace inferd::kv
