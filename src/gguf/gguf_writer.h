// GgufWriter: builds GGUF files in memory or on disk, for tests and for tools that write
// models. Layout reports where each section starts so tests can corrupt precise fields.
// GgufStreamWriter writes a file whose tensors were only declared, their bytes handed over one
// piece at a time, so a tool never holds a whole model in memory.
#pragma once

#include <cstdint>
#include <cstdio>
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

  // Declares a tensor whose bytes a GgufStreamWriter takes later (build() refuses them).
  void declare_tensor(std::string name, DType type, std::vector<uint64_t> shape);

  struct Layout {
    uint64_t header_end = 0;                   // first metadata entry starts here
    std::vector<uint64_t> metadata_starts;     // per entry: offset of its key length
    std::vector<uint64_t> tensor_info_starts;  // per tensor: offset of its name length
    uint64_t data_start = 0;                   // aligned start of the data section
  };
  std::vector<uint8_t> build(Layout* layout = nullptr) const;
  void write(const std::string& path) const;

 private:
  friend class GgufStreamWriter;
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<uint64_t> shape;
    uint64_t num_bytes = 0;
    bool declared_only = false;
    std::vector<uint8_t> data;
  };
  // Header, metadata and tensor table, padded to the data section; each tensor's offset in it.
  std::vector<uint8_t> build_header(Layout* layout, std::vector<uint64_t>* offsets) const;
  static uint64_t tensor_bytes(const std::string& name, DType type,
                               const std::vector<uint64_t>& shape);

  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

// Writes `header`'s metadata and tensor table to `path` at once, then takes the tensors' bytes in
// declaration order: write() may pass any number of bytes, across tensor boundaries; the
// padding between tensors is added here. finish() checks every byte came and closes the file;
// a writer destroyed before finish() removes the partial file.
class GgufStreamWriter {
 public:
  GgufStreamWriter(const GgufWriter& header, std::string path);
  ~GgufStreamWriter();
  GgufStreamWriter(const GgufStreamWriter&) = delete;
  GgufStreamWriter& operator=(const GgufStreamWriter&) = delete;

  void write(std::span<const uint8_t> bytes);
  void finish();
  // Bytes written so far, header included.
  uint64_t position() const { return position_; }

 private:
  void put(const void* bytes, size_t size);
  void pad_finished_tensors();

  std::string path_;
  std::FILE* file_ = nullptr;
  uint32_t alignment_;
  std::vector<uint64_t> sizes_;  // bytes of each tensor, in order
  size_t current_ = 0;           // the tensor being written
  uint64_t written_in_current_ = 0;
  uint64_t position_ = 0;
  bool finished_ = false;
};

}  // namespace inferd::gguf
