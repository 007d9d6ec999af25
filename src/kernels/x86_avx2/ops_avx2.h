// AVX2 + FMA element-wise kernels: activations, fp16 conversion.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx2 {

// a[i] = silu(a[i]) * b[i]
void silu_mul(float* a, const float* b, int64_t n);
void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y);
// a[i] = gelu_tanh(a[i]) * b[i], as the reference computes it (a / (1 + exp(-2u))).
void gelu_mul(float* a, const float* b, int64_t n);
// gpt-oss's clamped SwiGLU, as the reference.
void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit);
// x[i] = cap * tanh(x[i] * in_scale), tanh8 of exp_avx2.h.
void softcap(float* x, int64_t n, float in_scale, float cap);

// The first index of the largest value, as the reference: a max pass, then a search for it.
int64_t argmax(const float* x, int64_t n);

// As the reference: 8 lanes at a time, each word of `allowed` skipped when all its bits are set.
void mask_logits(const uint32_t* allowed, float* x, int64_t n);

// n floats to fp16 with F16C (round to nearest even, as fp32_to_fp16): F16 activations and the
// KV cache.
void quantize_row_f16(const float* x, void* out, int64_t n);

}  // namespace inferd::kernels::avx2
