// The prompt path of the 1-3-bit i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S). Their codebooks (256-2048 points) fit no byte shuffle, so no tile can unpack them in
// registers as the packed layouts are; instead 16 rows of one 256-column super-block are decoded
// once into signed int8 operands (IqTile) and then multiplied with every token of the prompt,
// which pays the decoding once per block instead of once per block and token (the row dots').
// The results are the reference row dots' bits (kernels/ref/quant_iq_ref.h): the integer sums
// are exact and the float steps the same, block by block in order.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels {

constexpr int kIqTileRows = 16;
constexpr int kIqTileRuns = kQKK / 16;  // runs of 16 columns, each with its own scale

// 16 rows x 256 columns of one super-block, decoded.
struct alignas(64) IqTile {
  // Column c of row r at q[c / 4][4 r + c % 4]: one 64-byte vector holds 4 columns of the 16
  // rows, a VNNI operand (as PackedQ8Block's qs). The value is the codebook coordinate times its
  // sign, or for IQ1_S/IQ1_M 8 x the coordinate plus the sign of its shift (so the shift of
  // kIq1Delta = 1/8 is exact in integers). Rows past n_rows are 0.
  int8_t q[kQKK / 4][4 * kIqTileRows];
  int32_t scale[kIqTileRuns][kIqTileRows];  // 2 s + 1 of each run of 16 columns and row
  // 128 x sum over runs of scale x the run's sum of q, per row: the tiles multiply the
  // activations stored as q + 128 (unsigned, for VNNI) and start each sum at -bias.
  int32_t bias[kIqTileRows];
  // The row's fp16 d as a float, times 1/8 for IQ1 (whose q are 8 x the value).
  float d[kIqTileRows];
  // Whether runs 2j and 2j + 1 always share their scale (a scale per 32 columns: IQ2_XXS,
  // IQ3_XXS, IQ3_S, IQ1_S), so a tile may multiply by it once per 32 columns.
  bool scale_per_32;
};

// Whether `type` is one of the i-quants above.
bool is_iq_tile_type(DType type);
// What each row's sum over the blocks is multiplied by at the end (the reference's final step):
// 1/8 for IQ2_XXS, IQ2_XS and IQ2_S, 1/4 for IQ3_XXS, 1 for the others.
float iq_final_factor(DType type);
// Decodes super-block `block` of rows[0..n_rows) (GGUF rows of `type`, n_rows <= 16) into tile.
void decode_iq_tile(DType type, const uint8_t* const* rows, int n_rows, int64_t block,
                    IqTile& tile);

// The product of one tile with n_tokens tokens' Q8_K blocks of the same 256 columns, whose qs
// hold q + 128 (q ^ 0x80) instead of q: token t's block at (const char*)act + t * act_stride.
// y[t * y_stride + r] += (tile.d[r] * block.d) * float(isum) for r < n_rows, with isum the
// row's exact sum over runs of scale x (q . a).
using IqTileFn = void (*)(const IqTile& tile, int n_rows, const BlockQ8_K* act, int64_t act_stride,
                          int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace inferd::kernels
