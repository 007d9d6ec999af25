#include "tensor/dtype.h"

#include <array>

#include "util/error.h"

namespace inferd {
namespace {

constexpr uint32_t kMaxTypeId = 42;
constexpr uint32_t kSuperBlock = 256;  // QK_K of the k-quants and i-quants

// Indexed by type id; entries with block_size 0 are ids that no longer exist.
constexpr std::array<DTypeInfo, kMaxTypeId + 1> kTypes = {{
    {"F32", 1, 4},                 // 0
    {"F16", 1, 2},                 // 1
    {"Q4_0", 32, 18},              // 2: f16 d + 16 bytes of nibbles
    {"Q4_1", 32, 20},              // 3: f16 d, f16 m + 16 bytes
    {"", 0, 0},                    // 4: removed
    {"", 0, 0},                    // 5: removed
    {"Q5_0", 32, 22},              // 6
    {"Q5_1", 32, 24},              // 7
    {"Q8_0", 32, 34},              // 8: f16 d + 32 int8
    {"Q8_1", 32, 36},              // 9: f16 d, f16 s + 32 int8
    {"Q2_K", kSuperBlock, 84},     // 10
    {"Q3_K", kSuperBlock, 110},    // 11
    {"Q4_K", kSuperBlock, 144},    // 12
    {"Q5_K", kSuperBlock, 176},    // 13
    {"Q6_K", kSuperBlock, 210},    // 14
    {"Q8_K", kSuperBlock, 292},    // 15
    {"IQ2_XXS", kSuperBlock, 66},  // 16
    {"IQ2_XS", kSuperBlock, 74},   // 17
    {"IQ3_XXS", kSuperBlock, 98},  // 18
    {"IQ1_S", kSuperBlock, 50},    // 19
    {"IQ4_NL", 32, 18},            // 20
    {"IQ3_S", kSuperBlock, 110},   // 21
    {"IQ2_S", kSuperBlock, 82},    // 22
    {"IQ4_XS", kSuperBlock, 136},  // 23
    {"I8", 1, 1},                  // 24
    {"I16", 1, 2},                 // 25
    {"I32", 1, 4},                 // 26
    {"I64", 1, 8},                 // 27
    {"F64", 1, 8},                 // 28
    {"IQ1_M", kSuperBlock, 56},    // 29
    {"BF16", 1, 2},                // 30
    {"", 0, 0},                    // 31: removed (Q4_0_4_4)
    {"", 0, 0},                    // 32: removed (Q4_0_4_8)
    {"", 0, 0},                    // 33: removed (Q4_0_8_8)
    {"TQ1_0", kSuperBlock, 54},    // 34
    {"TQ2_0", kSuperBlock, 66},    // 35
    {"", 0, 0},                    // 36: removed
    {"", 0, 0},                    // 37: removed
    {"", 0, 0},                    // 38: removed
    {"MXFP4", 32, 17},             // 39
    {"NVFP4", 64, 36},             // 40
    {"Q1_0", 128, 18},             // 41
    {"Q2_0", 64, 18},              // 42
}};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t type_id) {
  if (type_id > kMaxTypeId || kTypes[type_id].block_size == 0) return std::nullopt;
  return kTypes[type_id];
}

const DTypeInfo& dtype_info(DType type) {
  auto id = static_cast<uint32_t>(type);
  if (id > kMaxTypeId || kTypes[id].block_size == 0) fail("invalid dtype id {}", id);
  return kTypes[id];
}

std::string_view dtype_name(DType type) {
  return dtype_info(type).name;
}

std::optional<uint64_t> row_bytes(DType type, uint64_t num_elements) {
  const DTypeInfo& info = dtype_info(type);
  if (num_elements % info.block_size != 0) return std::nullopt;
  uint64_t blocks = num_elements / info.block_size;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, uint64_t{info.block_bytes}, &bytes)) return std::nullopt;
  return bytes;
}

}  // namespace inferd
