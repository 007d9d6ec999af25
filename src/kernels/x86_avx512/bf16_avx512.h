// AVX-512 BF16 dot product for BF16 weights (vdpbf16ps: pairs of bf16 products summed in
// fp32), and an AVX-512 float -> bf16 conversion with the reference's rounding. Reached only
// through the dispatch table (the dot product after a cpuid check for AVX512_BF16).
#pragma once

#include <cstdint>

namespace inferd::kernels::avx512 {

float dot_bf16_bf16(int64_t n, const void* w, const void* a);
// n floats to bf16, bit for bit as fp32_to_bf16 (tensor/half.h).
void quantize_row_bf16(const float* x, void* out, int64_t n);

}  // namespace inferd::kernels::avx512
