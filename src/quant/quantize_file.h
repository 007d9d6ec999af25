// `inferd quantize`: rewrites a GGUF model with its weights in a llama.cpp quantization mix.
// Metadata is copied (split keys dropped, general.quantization_version and general.file_type
// set); tensors are written in llama-quantize's order, each converted as type_policy.h decides,
// streamed slab by slab so that memory stays bounded by a slab, not the model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "quant/type_policy.h"
#include "tensor/dtype.h"
#include "util/thread_pool.h"

namespace inferd::quant {

struct QuantizeOptions {
  FileType file_type = FileType::Q8_0;
  bool pure = false;              // one type for every quantizable tensor
  bool allow_requantize = false;  // accept already quantized input tensors
};

// One tensor done, for the progress line.
struct TensorReport {
  size_t index = 0;  // 0-based, in output order
  size_t count = 0;
  std::string name;
  std::string shape;
  DType from = DType::F32;
  DType to = DType::F32;
  bool fell_back = false;
  DType wanted = DType::F32;  // the rules' type when it fell back
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

struct QuantizeSummary {
  size_t tensors = 0;
  size_t fallbacks = 0;
  uint64_t elements = 0;
  uint64_t tensor_bytes_in = 0;
  uint64_t tensor_bytes_out = 0;
  uint64_t file_bytes_in = 0;
  uint64_t file_bytes_out = 0;
};

// Throws inferd::Error, before writing anything, for an unreadable input, a tensor that needs
// a conversion nothing here can do, or quantized input without allow_requantize. `on_checked`
// runs once those checks pass, `on_tensor` after each tensor is written (either may be empty).
QuantizeSummary quantize_file(const std::string& input, const std::string& output,
                              const QuantizeOptions& options, ThreadPool& pool,
                              const std::function<void(const TensorReport&)>& on_tensor,
                              const std::function<void()>& on_checked = nullptr);

}  // namespace inferd::quant
