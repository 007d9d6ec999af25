// Quantizers from float rows to the GGUF weight formats (tensor/quant_blocks.h), for
// `inferd quantize`. Each takes n values, a multiple of the format's block size, and writes
// n / block_size blocks. No importance matrix: every value counts by its own magnitude.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace inferd::quant {

// The 32-wide formats (blocks32.cpp).
void quantize_q4_0(const float* x, void* out, int64_t n);
void quantize_q4_1(const float* x, void* out, int64_t n);
void quantize_q5_0(const float* x, void* out, int64_t n);
void quantize_q5_1(const float* x, void* out, int64_t n);
void quantize_q8_0(const float* x, void* out, int64_t n);
void quantize_iq4_nl(const float* x, void* out, int64_t n);
// MXFP4 byte for byte as ggml's reference quantizer (quantize_row_mxfp4_ref) writes it.
void quantize_mxfp4(const float* x, void* out, int64_t n);

// The 256-wide k-quants and IQ4_XS (kquants.cpp).
void quantize_q2_k(const float* x, void* out, int64_t n);
void quantize_q3_k(const float* x, void* out, int64_t n);
void quantize_q4_k(const float* x, void* out, int64_t n);
void quantize_q5_k(const float* x, void* out, int64_t n);
void quantize_q6_k(const float* x, void* out, int64_t n);
void quantize_iq4_xs(const float* x, void* out, int64_t n);

using QuantizeFn = void (*)(const float* x, void* out, int64_t n);

// The quantizer writing `type` (also F32, F16 and BF16, the fallbacks); nullptr when there is
// none.
QuantizeFn quantizer_for(DType type);

}  // namespace inferd::quant
