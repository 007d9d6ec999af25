// AVX2 row dots of the 1-3-bit i-quants with Q8_K activations; same contracts as
// kernels/ref/quant_iq_ref.h, and the same bits: each super-block's integer sum is exact, and
// the floats are combined in the reference's order.
#pragma once

#include <cstdint>

#include "kernels/iq_tiles.h"

namespace inferd::kernels::avx2 {

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);

// The i-quant prompt tile (kernels/iq_tiles.h, IqTileFn): the same bits as ref::iq_tile_gemm.
void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace inferd::kernels::avx2
