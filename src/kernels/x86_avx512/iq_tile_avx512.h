// AVX-512 VNNI version of the i-quant prompt tile (kernels/iq_tiles.h, IqTileFn): the same bits
// as ref::iq_tile_gemm.
#pragma once

#include <cstdint>

#include "kernels/iq_tiles.h"

namespace inferd::kernels::avx512 {

void iq_tile_gemm(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                  int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace inferd::kernels::avx512
