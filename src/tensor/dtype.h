// DType: the ggml tensor element types as numbered in GGUF files, with their block geometry.
// The reader knows every type's size so it can validate any file; compute supports fewer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace inferd {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

struct DTypeInfo {
  std::string_view name;
  uint32_t block_size;   // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
};

// Geometry of a type id read from a file; nullopt when the id is not a known type.
std::optional<DTypeInfo> dtype_info(uint32_t type_id);
// Same, for a DType that is known to be valid.
const DTypeInfo& dtype_info(DType type);
std::string_view dtype_name(DType type);

// Bytes taken by a row of `num_elements` of `type`; nullopt when the row is not a whole
// number of blocks or the size overflows.
std::optional<uint64_t> row_bytes(DType type, uint64_t num_elements);

}  // namespace inferd
