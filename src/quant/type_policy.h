// Which type each tensor of a model gets in a quantized file: llama-quantize's rules (its
// `llama_ftype` mixes, per-tensor adjustments by role and layer, fallbacks for row lengths the
// block size does not divide), so that a file made here holds what llama-quantize would write.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace inferd::quant {

// llama.cpp's file types (LLAMA_FTYPE_MOSTLY_*), numbered as `general.file_type` stores them.
enum class FileType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 7,
  Q5_0 = 8,
  Q5_1 = 9,
  Q2_K = 10,
  Q3_K_S = 11,
  Q3_K_M = 12,
  Q3_K_L = 13,
  Q4_K_S = 14,
  Q4_K_M = 15,
  Q5_K_S = 16,
  Q5_K_M = 17,
  Q6_K = 18,
  IQ4_NL = 25,
  IQ4_XS = 30,
  BF16 = 32,
  MXFP4_MOE = 38,  // MoE expert tensors in MXFP4, the rest Q8_0 (gpt-oss's files)
};

// The mixes `inferd quantize` makes, by llama-quantize's names (Q4_K, Q5_K, Q3_K are its
// aliases for the _M mixes); case-insensitive. nullopt for any other name.
std::optional<FileType> parse_file_type(std::string_view name);
// The names parse_file_type takes, for help and error messages.
std::vector<std::string> file_type_names();
// llama-quantize's name of any `general.file_type` value ("Q4_K_M", "IQ2_XXS", ...);
// nullopt for a number llama.cpp does not define.
std::optional<std::string_view> file_type_name(uint32_t value);
// The type most tensors of the mix get.
DType default_type(FileType type);

// What the rules read from the model's metadata.
struct ModelShape {
  std::string arch;       // general.architecture
  int64_t n_layer = 0;    // {arch}.block_count
  int64_t n_head = 0;     // {arch}.attention.head_count (first layer's)
  int64_t n_head_kv = 0;  // {arch}.attention.head_count_kv (first layer's; 0 when absent)
  int64_t n_expert = 0;   // {arch}.expert_count
};

struct TensorDesc {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the row length
};

// Whether llama-quantize would quantize this tensor at all: 2-D (or 3-D) weights other than
// norms, position and token-type embeddings, MoE routers and a list of small special tensors.
// The others keep their type.
bool allows_quantization(const TensorDesc& tensor);

// llama-quantize's processing order: by layer number (tensors outside blk.N first), then name.
// The per-layer counters of the rules advance in this order; the output file follows it too.
std::vector<size_t> processing_order(const std::vector<TensorDesc>& tensors);

struct TypeChoice {
  DType type = DType::F32;
  bool fell_back = false;     // the rules' type did not fit the row length
  DType wanted = DType::F32;  // the type before the fallback
};

// The type of every tensor (indexed as `tensors`). With `pure`, every quantizable tensor gets
// the mix's default type (still subject to the row-length fallback).
std::vector<TypeChoice> choose_types(const ModelShape& model,
                                     const std::vector<TensorDesc>& tensors, FileType file_type,
                                     bool pure);

}  // namespace inferd::quant
