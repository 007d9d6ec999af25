// Scalar reference kernels for the 32-wide block formats and the float formats.
#pragma once

#include <cstdint>

namespace inferd::kernels::ref {

void quantize_row_q8_0(const float* x, void* out, int64_t n);
void quantize_row_q8_1(const float* x, void* out, int64_t n);
void quantize_row_f16(const float* x, void* out, int64_t n);
void quantize_row_bf16(const float* x, void* out, int64_t n);
void quantize_row_f32(const float* x, void* out, int64_t n);

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
float dot_f16_f16(int64_t n, const void* w, const void* a);
float dot_bf16_bf16(int64_t n, const void* w, const void* a);
float dot_f32_f32(int64_t n, const void* w, const void* a);

void dequantize_row_q4_0(const void* row, float* out, int64_t n);
void dequantize_row_q4_1(const void* row, float* out, int64_t n);
void dequantize_row_q8_0(const void* row, float* out, int64_t n);
void dequantize_row_f16(const void* row, float* out, int64_t n);
void dequantize_row_bf16(const void* row, float* out, int64_t n);
void dequantize_row_f32(const void* row, float* out, int64_t n);

// a[i] = silu(a[i]) * b[i]
void silu_mul(float* a, const float* b, int64_t n);
// KernelTable::lora_up: a value at a time, std::fma over j in order.
void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y);
// a[i] = gelu_tanh(a[i]) * b[i], as a[i] / (1 + exp(-2u)) (KernelTable::gelu_mul)
void gelu_mul(float* a, const float* b, int64_t n);
// gpt-oss's clamped SwiGLU (KernelTable::swiglu_oai)
void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit);
// x[i] = cap * tanh(x[i] * in_scale)
void softcap(float* x, int64_t n, float in_scale, float cap);
int64_t argmax(const float* x, int64_t n);
void mask_logits(const uint32_t* allowed, float* x, int64_t n);

// Weight-side quantizers (tests build quantized weights with these).
void quantize_row_q4_0(const float* x, void* out, int64_t n);
void quantize_row_q4_1(const float* x, void* out, int64_t n);

}  // namespace inferd::kernels::ref
