// GgufWriter: builds GGUF files in memory or on disk, for tests and for tools that write
// models. Layout reports where each section starts so tests can corrupt precise fields.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace inferd::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = kDefaultAlignment);

  // Metadata entries are written in the order they are set.
  void set(std::string key, Value value);
  void set_string(std::string key, std::string value);
  void set_u32(std::string key, uint32_t value);
  void set_i32(std::string key, int32_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_strings(std::string key, const std::vector<std::string>& values);
  void set_i32s(std::string key, const std::vector<int32_t>& values);
  void set_f32s(std::string key, const std::vector<float>& values);

  // `data` must hold exactly the tensor's byte size for `type` and `shape`.
  void add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                  std::span<const uint8_t> data);

  struct Layout {
    uint64_t header_end = 0;                   // first metadata entry starts here
    std::vector<uint64_t> metadata_starts;     // per entry: offset of its key length
    std::vector<uint64_t> tensor_info_starts;  // per tensor: offset of its name length
    uint64_t data_start = 0;                   // aligned start of the data section
  };
  std::vector<uint8_t> build(Layout* layout = nullptr) const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> data;
  };

  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace inferd::gguf
