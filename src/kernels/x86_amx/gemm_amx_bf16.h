// AMX-BF16 group kernels for the bf16 route (kernels.h, PackedKernels: prompt tokens): a
// group's weights are dequantized to bf16 once per call and multiplied by the bf16 activations
// of every token with TDPBF16PS, the float sums staying in the tiles across the whole row.
// Reached only through the dispatch table, on CPUs with AMX-BF16 and AVX512_BF16.
#pragma once

#include <cstdint>

namespace inferd::kernels::amx {

// x: bf16 activations tiled as kernels.h says (x_stride = cols); y: [n_tokens, y_stride] floats.
// n_groups (1 or 2) adjacent groups, as GroupGemmBf16Fn says.
void q4_bf16_group(const uint8_t* group, int64_t n_groups, int64_t blocks, const uint16_t* x,
                   int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
void q8_0_bf16_group(const uint8_t* group, int64_t n_groups, int64_t blocks, const uint16_t* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace inferd::kernels::amx
