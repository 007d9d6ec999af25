// AVX2 + FMA + F16C versions of the block-format kernels; same contracts as kernels/ref.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx2 {

void quantize_row_q8_0(const float* x, void* out, int64_t n);
void quantize_row_q8_1(const float* x, void* out, int64_t n);
// Q8_K (kernels/ref/quant_k_ref.h), byte for byte.
void quantize_row_q8_k(const float* x, void* out, int64_t n);
float dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
float dot_f16_f16(int64_t n, const void* w, const void* a);
float dot_bf16_bf16(int64_t n, const void* w, const void* a);
float dot_f32_f32(int64_t n, const void* w, const void* a);

}  // namespace inferd::kernels::avx2
