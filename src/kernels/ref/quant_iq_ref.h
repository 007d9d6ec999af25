// Scalar reference kernels of the i-quants of 1-3 bits (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M; tensor/quant_blocks.h), multiplied with Q8_K activations as llama.cpp pairs
// them. Dequantization gives gguf-py's floats bit for bit (the same float operations in the
// same order). The dots sum integers per super-block and scale once per super-block (a final
// factor of 1/8 or 1/4 after the sum for the types whose scales are half-integers): the
// definition of correct for the SIMD kernels, which give the same bits.
#pragma once

#include <cstdint>

#include "kernels/iq_tiles.h"

namespace inferd::kernels::ref {

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);

void dequantize_row_iq2_xxs(const void* row, float* out, int64_t n);
void dequantize_row_iq2_xs(const void* row, float* out, int64_t n);
void dequantize_row_iq2_s(const void* row, float* out, int64_t n);
void dequantize_row_iq3_xxs(const void* row, float* out, int64_t n);
void dequantize_row_iq3_s(const void* row, float* out, int64_t n);
void dequantize_row_iq1_s(const void* row, float* out, int64_t n);
void dequantize_row_iq1_m(const void* row, float* out, int64_t n);

// The prompt tile of kernels/iq_tiles.h (IqTileFn), in plain integers and floats.
void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace inferd::kernels::ref
