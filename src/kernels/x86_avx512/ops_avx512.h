// AVX-512 element-wise ops (kernels/ops.h): reached only through the dispatch table.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx512 {

// a[i] = silu(a[i]) * b[i], as the AVX2 version computes it, 16 lanes at a time.
void silu_mul(float* a, const float* b, int64_t n);
void lora_up(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low, const float* bt,
             float* const* y);
// a[i] = gelu_tanh(a[i]) * b[i], as the reference computes it (a / (1 + exp(-2u))).
void gelu_mul(float* a, const float* b, int64_t n);
// gpt-oss's clamped SwiGLU, as the reference.
void swiglu_oai(float* g, const float* u, int64_t n, float alpha, float limit);
// x[i] = cap * tanh(x[i] * in_scale), tanh16 of exp_avx512.h.
void softcap(float* x, int64_t n, float in_scale, float cap);

// The first index of the largest value, as the reference: a max pass, then a search for it.
int64_t argmax(const float* x, int64_t n);

// As the reference: a masked store of -inf into the forbidden lanes, 16 at a time.
void mask_logits(const uint32_t* allowed, float* x, int64_t n);

}  // namespace inferd::kernels::avx512
