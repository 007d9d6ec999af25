// GGUF file model: metadata values (typed, arrays nested), tensor table, and the reader.
// GgufFile::open validates every count, length and offset against the file before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"
#include "util/mapped_file.h"

namespace inferd::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

std::string_view value_type_name(ValueType type);
bool is_integer_type(ValueType type);
bool is_float_type(ValueType type);

struct Array;

// One metadata value. Scalars are widened into one of three slots (unsigned, signed,
// float) so callers need not care whether the file stored u32 or u64.
class Value {
 public:
  Value() = default;
  static Value of_unsigned(ValueType type, uint64_t v);
  static Value of_signed(ValueType type, int64_t v);
  static Value of_float(ValueType type, double v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_array(Array v);

  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::ARRAY; }
  bool is_string() const { return type_ == ValueType::STRING; }

  // Integer view of any integer or bool value; nullopt for other types or if it does not fit.
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  // Float view of any integer or float value.
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const Array* as_array() const;

  // Human-readable rendering; long arrays are abbreviated.
  std::string to_string(size_t max_items = 8) const;

 private:
  ValueType type_ = ValueType::UINT8;
  uint64_t unsigned_ = 0;
  int64_t signed_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<const Array> array_;
};

// An array value: elements all of `element_type`. Strings and nested arrays are kept as
// Values; numeric elements as Values too (arrays of numbers in real files are at most a few
// hundred thousand long, so the simple representation costs little).
struct Array {
  ValueType element_type = ValueType::UINT8;
  std::vector<Value> items;

  // Typed copies; throw inferd::Error naming `what` if an element has the wrong type.
  std::vector<std::string> strings(std::string_view what) const;
  std::vector<int64_t> ints(std::string_view what) const;
  std::vector<float> floats(std::string_view what) const;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  uint64_t offset = 0;          // from the start of the data section
  uint64_t num_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapped file

  uint64_t num_elements() const;
  std::string shape_string() const;  // "[576, 49152]"
};

class GgufFile {
 public:
  // Maps and parses a file. Throws inferd::Error naming the field and byte offset of the
  // first problem found.
  static GgufFile open(const std::string& path);
  // Parses bytes that stay owned by the caller and must outlive the result (tests, fuzzing).
  static GgufFile parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& name() const { return name_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed look-ups. get_* return nullopt when the key is absent and throw inferd::Error
  // naming the key when it is present with an incompatible type. require_* also throw when
  // the key is absent.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  const Array* get_array(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  const Array& require_array(std::string_view key) const;

  // "general.architecture", required by every model file.
  std::string architecture() const { return require_string("general.architecture"); }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Lets the pages of [p, p + n), bytes of this file's tensors, go from memory when the file is
  // mapped (MappedFile::release_pages); nothing for bytes a caller owns.
  void release_pages(const uint8_t* p, size_t n) const {
    if (file_) file_->release_pages(p, n);
  }

 private:
  friend class Parser;
  GgufFile() = default;

  std::string name_;
  std::shared_ptr<MappedFile> file_;  // null when parsed from caller-owned bytes
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace inferd::gguf
