// Compiled with AMX flags (src/CMakeLists.txt).
#include "kernels/x86_amx/tile_config.h"

#include <cstdint>

namespace inferd::kernels::amx {
namespace {

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

void set_tile(TileConfig& config, int tile, int rows, int bytes_per_row) {
  config.rows[tile] = static_cast<uint8_t>(rows);
  config.bytes_per_row[tile] = static_cast<uint16_t>(bytes_per_row);
}

}  // namespace

void use_tile_shapes(TileShapes shapes) {
  thread_local TileShapes loaded = TileShapes::kNone;
  if (loaded == shapes) return;
  TileConfig config{};
  config.palette_id = 1;
  if (shapes == TileShapes::kInt8) {
    for (int set = 0; set < 2; ++set) {
      set_tile(config, 3 * set + 0, 16, 64);  // result: 16 tokens x 16 rows of int32
      set_tile(config, 3 * set + 1, 16, 32);  // activations: 16 tokens x 32 int8
      set_tile(config, 3 * set + 2, 8, 64);   // weights: 8 x (16 rows x 4 columns)
    }
  } else {
    for (int tile = 0; tile < 8; ++tile) set_tile(config, tile, 16, 64);
  }
  // Our own asm rather than GCC 12's _tile_loadconfig, whose operand covers only the first 8
  // bytes of the configuration: the compiler would be free to drop the stores of the rest.
  asm volatile("ldtilecfg %0" : : "m"(config));
  loaded = shapes;
}

}  // namespace inferd::kernels::amx
