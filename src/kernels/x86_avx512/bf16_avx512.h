// AVX-512 BF16 dot product for BF16 weights (vdpbf16ps: pairs of bf16 products summed in
// fp32). Reached only through the dispatch table after a cpuid check for AVX512_BF16.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx512 {

float dot_bf16_bf16(int64_t n, const void* w, const void* a);

}  // namespace inferd::kernels::avx512
