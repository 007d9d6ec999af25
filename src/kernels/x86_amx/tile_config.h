// The AMX tile shapes of this thread. A configuration stays loaded until another kernel needs
// other shapes, so a run of group calls with the same shapes loads it once.
#pragma once

namespace inferd::kernels::amx {

enum class TileShapes {
  kNone,
  // int8 route (gemm_amx.cpp): two sets of result (16 x 16 int32), activations (16 tokens x 32
  // int8) and weights (8 x 64 bytes: 32 columns x 16 rows).
  kInt8,
  // bf16 route (gemm_amx_bf16.cpp): four results (16 x 16 floats), two activation tiles (16
  // tokens x 32 bf16) and two weight tiles (16 column pairs x 16 rows x 2 bf16).
  kBf16,
};

// Loads the configuration for `shapes` unless this thread has it loaded already.
void use_tile_shapes(TileShapes shapes);

}  // namespace inferd::kernels::amx
