// GGUF parser: walks header, metadata, tensor table and data section of a mapped file,
// checking every count, length and offset against the bytes that remain.
#include <algorithm>
#include <cstring>

#include "gguf/gguf.h"
#include "util/error.h"
#include "util/utf8.h"

namespace inferd::gguf {
namespace {

constexpr int kMaxArrayDepth = 8;            // nested arrays deeper than this are not real files
constexpr uint32_t kMaxDims = 4;             // ggml tensors have at most four dimensions
constexpr uint64_t kMaxNameBytes = 1 << 16;  // keys and tensor names are short identifiers

// Smallest encoded size of one value of `type`; used to reject counts that cannot fit.
uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::STRING:
      return 8;  // length prefix
    case ValueType::ARRAY:
      return 12;  // element type + count
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
  }
  return 1;
}

bool is_known_value_type(uint32_t raw) {
  return raw <= static_cast<uint32_t>(ValueType::FLOAT64);
}

}  // namespace

// Reads little-endian fields from the file, failing with the field name and byte offset.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes), name_(std::move(name)) {}

  GgufFile parse() {
    GgufFile file;
    file.name_ = name_;
    file.bytes_ = bytes_;
    read_header(file);
    for (uint64_t i = 0; i < kv_count_; ++i) read_metadata_entry(file, i);
    read_alignment(file);
    for (uint64_t i = 0; i < tensor_count_; ++i) read_tensor_info(file, i);
    place_tensor_data(file);
    return file;
  }

 private:
  [[noreturn]] void error_at(uint64_t offset, const std::string& message) const {
    fail("{}: {} (at byte offset {})", name_, message, offset);
  }

  uint64_t remaining() const { return bytes_.size() - pos_; }

  void need(uint64_t count, std::string_view field) const {
    if (count > remaining()) {
      error_at(pos_, fmt::format("truncated file: {} needs {} bytes but only {} remain", field,
                                 count, remaining()));
    }
  }

  template <typename T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));  // host is little-endian (x86, arm64)
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view field) {
    uint64_t at = pos_;
    auto length = read<uint64_t>(fmt::format("{} length", field));
    if (length > remaining()) {
      error_at(at, fmt::format("{} length {} exceeds the {} bytes left in the file", field, length,
                               remaining()));
    }
    std::string out(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return out;
  }

  std::string read_name(std::string_view field) {
    uint64_t at = pos_;
    std::string out = read_string(field);
    if (out.empty()) error_at(at, fmt::format("{} is empty", field));
    if (out.size() > kMaxNameBytes)
      error_at(at, fmt::format("{} is {} bytes long", field, out.size()));
    size_t bad = utf8_valid_prefix(out);
    if (bad != out.size()) {
      error_at(at + 8 + bad,
               fmt::format("{} is not valid UTF-8 (bad byte at index {})", field, bad));
    }
    return out;
  }

  void read_header(GgufFile& file) {
    auto magic = read<uint32_t>("magic");
    if (magic != kMagic) {
      error_at(0, fmt::format("not a GGUF file: magic is 0x{:08x}, expected 0x{:08x} (\"GGUF\")",
                              magic, kMagic));
    }
    file.version_ = read<uint32_t>("version");
    if (file.version_ == 1) error_at(4, "GGUF version 1 is not supported (only 2 and 3)");
    if (file.version_ != 2 && file.version_ != 3) {
      bool swapped = (file.version_ & 0xFFFF) == 0 && file.version_ != 0;
      error_at(4, fmt::format("unsupported GGUF version {}{}", file.version_,
                              swapped ? " (a big-endian file?)" : " (expected 2 or 3)"));
    }
    uint64_t at = pos_;
    tensor_count_ = read<uint64_t>("tensor_count");
    kv_count_ = read<uint64_t>("metadata_kv_count");
    // A count larger than the file itself is absurd whatever follows; smaller bad counts are
    // caught as truncation where the entries run out, which names the field that is cut.
    if (tensor_count_ > bytes_.size()) {
      error_at(at, fmt::format("tensor_count {} is larger than the file ({} bytes)", tensor_count_,
                               bytes_.size()));
    }
    if (kv_count_ > bytes_.size()) {
      error_at(at + 8, fmt::format("metadata_kv_count {} is larger than the file ({} bytes)",
                                   kv_count_, bytes_.size()));
    }
  }

  void read_metadata_entry(GgufFile& file, uint64_t index) {
    uint64_t at = pos_;
    std::string key = read_name(fmt::format("metadata key #{}", index));
    if (file.metadata_index_.count(key) != 0) {
      error_at(at, fmt::format("duplicate metadata key '{}'", key));
    }
    ValueType type = read_value_type(fmt::format("type of '{}'", key));
    if (key == "general.alignment") alignment_at_ = pos_;
    Value value = read_value(type, key, 0);
    file.metadata_index_.emplace(key, file.metadata_.size());
    file.metadata_.emplace_back(std::move(key), std::move(value));
  }

  ValueType read_value_type(std::string_view field) {
    uint64_t at = pos_;
    auto raw = read<uint32_t>(field);
    if (!is_known_value_type(raw))
      error_at(at, fmt::format("{}: unknown value type {}", field, raw));
    return static_cast<ValueType>(raw);
  }

  Value read_value(ValueType type, std::string_view key, int depth) {
    switch (type) {
      case ValueType::UINT8:
        return Value::of_unsigned(type, read<uint8_t>(key));
      case ValueType::INT8:
        return Value::of_signed(type, read<int8_t>(key));
      case ValueType::UINT16:
        return Value::of_unsigned(type, read<uint16_t>(key));
      case ValueType::INT16:
        return Value::of_signed(type, read<int16_t>(key));
      case ValueType::UINT32:
        return Value::of_unsigned(type, read<uint32_t>(key));
      case ValueType::INT32:
        return Value::of_signed(type, read<int32_t>(key));
      case ValueType::UINT64:
        return Value::of_unsigned(type, read<uint64_t>(key));
      case ValueType::INT64:
        return Value::of_signed(type, read<int64_t>(key));
      case ValueType::FLOAT32:
        return Value::of_float(type, read<float>(key));
      case ValueType::FLOAT64:
        return Value::of_float(type, read<double>(key));
      case ValueType::BOOL: {
        uint64_t at = pos_;
        auto raw = read<uint8_t>(key);
        if (raw > 1) error_at(at, fmt::format("'{}': bool value {} is neither 0 nor 1", key, raw));
        return Value::of_bool(raw != 0);
      }
      case ValueType::STRING:
        return Value::of_string(read_string(fmt::format("'{}'", key)));
      case ValueType::ARRAY:
        return Value::of_array(read_array(key, depth + 1));
    }
    error_at(pos_, fmt::format("'{}': unknown value type", key));
  }

  Array read_array(std::string_view key, int depth) {
    uint64_t at = pos_;
    if (depth > kMaxArrayDepth) {
      error_at(at, fmt::format("'{}': arrays nested deeper than {}", key, kMaxArrayDepth));
    }
    Array array;
    array.element_type = read_value_type(fmt::format("element type of '{}'", key));
    uint64_t count_at = pos_;
    auto count = read<uint64_t>(fmt::format("element count of '{}'", key));
    if (count > remaining() / min_encoded_size(array.element_type)) {
      error_at(count_at,
               fmt::format("'{}': array of {} {} elements cannot fit in the {} bytes left", key,
                           count, value_type_name(array.element_type), remaining()));
    }
    array.items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      array.items.push_back(read_value(array.element_type, key, depth));
    }
    return array;
  }

  void read_alignment(GgufFile& file) {
    const Value* value = file.find("general.alignment");
    if (value == nullptr) return;
    if (value->type() != ValueType::UINT32) {
      error_at(alignment_at_, fmt::format("general.alignment must be uint32, found {}",
                                          value_type_name(value->type())));
    }
    uint64_t alignment = *value->as_uint();
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      error_at(alignment_at_, fmt::format("general.alignment {} is not a power of two", alignment));
    }
    file.alignment_ = alignment;
  }

  void read_tensor_info(GgufFile& file, uint64_t index) {
    uint64_t at = pos_;
    TensorInfo info;
    info.name = read_name(fmt::format("name of tensor #{}", index));
    if (file.tensor_index_.count(info.name) != 0) {
      error_at(at, fmt::format("duplicate tensor name '{}'", info.name));
    }
    uint64_t dims_at = pos_;
    auto num_dims = read<uint32_t>(fmt::format("n_dims of tensor '{}'", info.name));
    if (num_dims == 0 || num_dims > kMaxDims) {
      error_at(dims_at, fmt::format("tensor '{}' has {} dimensions (1 to {} allowed)", info.name,
                                    num_dims, kMaxDims));
    }
    uint64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      uint64_t dim_at = pos_;
      auto dim = read<uint64_t>(fmt::format("dimension {} of tensor '{}'", d, info.name));
      if (dim == 0 || dim > (uint64_t{1} << 62) ||
          __builtin_mul_overflow(num_elements, dim, &num_elements)) {
        error_at(dim_at, fmt::format("tensor '{}': dimension {} = {} is invalid or overflows",
                                     info.name, d, dim));
      }
      info.shape.push_back(dim);
    }
    read_tensor_type_and_size(info, num_elements);
    uint64_t offset_at = pos_;
    info.offset = read<uint64_t>(fmt::format("offset of tensor '{}'", info.name));
    offset_field_at_.push_back(offset_at);
    if (info.offset % file.alignment_ != 0) {
      error_at(offset_at,
               fmt::format("tensor '{}': data offset {} is not a multiple of the alignment {}",
                           info.name, info.offset, file.alignment_));
    }
    file.tensor_index_.emplace(info.name, file.tensors_.size());
    file.tensors_.push_back(std::move(info));
  }

  void read_tensor_type_and_size(TensorInfo& info, uint64_t num_elements) {
    uint64_t type_at = pos_;
    auto raw_type = read<uint32_t>(fmt::format("type of tensor '{}'", info.name));
    auto type = dtype_info(raw_type);
    if (!type)
      error_at(type_at, fmt::format("tensor '{}': unknown tensor type {}", info.name, raw_type));
    info.type = static_cast<DType>(raw_type);
    if (info.shape[0] % type->block_size != 0) {
      error_at(type_at,
               fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}",
                           info.name, info.shape[0], type->name, type->block_size));
    }
    auto bytes = row_bytes(info.type, num_elements);
    if (!bytes) error_at(type_at, fmt::format("tensor '{}': byte size overflows", info.name));
    info.num_bytes = *bytes;
  }

  void place_tensor_data(GgufFile& file) {
    uint64_t end_of_infos = pos_;
    uint64_t data_offset = (end_of_infos + file.alignment_ - 1) / file.alignment_ * file.alignment_;
    if (data_offset < end_of_infos) fail("{}: data section offset overflows", name_);
    file.data_offset_ = data_offset;
    if (file.tensors_.empty()) return;
    if (data_offset > bytes_.size()) {
      error_at(end_of_infos,
               fmt::format("data section would start at {}, past the end of the file ({} bytes)",
                           data_offset, bytes_.size()));
    }
    uint64_t data_size = bytes_.size() - data_offset;
    std::vector<const TensorInfo*> by_offset;
    for (size_t i = 0; i < file.tensors_.size(); ++i) {
      TensorInfo& info = file.tensors_[i];
      uint64_t end = 0;
      if (__builtin_add_overflow(info.offset, info.num_bytes, &end) || end > data_size) {
        error_at(offset_field_at_[i],
                 fmt::format("tensor '{}' data [{}, +{}) runs past the end of the data section "
                             "({} bytes from offset {})",
                             info.name, info.offset, info.num_bytes, data_size, data_offset));
      }
      info.data = bytes_.data() + data_offset + info.offset;
      by_offset.push_back(&info);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& prev = *by_offset[i - 1];
      const TensorInfo& cur = *by_offset[i];
      if (prev.offset + prev.num_bytes > cur.offset) {
        size_t index = static_cast<size_t>(&cur - file.tensors_.data());
        error_at(offset_field_at_[index],
                 fmt::format("tensor '{}' data at offset {} overlaps tensor '{}' ending at {}",
                             cur.name, cur.offset, prev.name, prev.offset + prev.num_bytes));
      }
    }
  }

  std::span<const uint8_t> bytes_;
  std::string name_;
  uint64_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t alignment_at_ = 0;              // where the general.alignment value was read
  std::vector<uint64_t> offset_field_at_;  // per tensor: where its offset field was read
};

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  return Parser(bytes, std::move(name)).parse();
}

GgufFile GgufFile::open(const std::string& path) {
  auto mapped = std::make_shared<MappedFile>(path);
  GgufFile file = parse(mapped->bytes(), path);
  file.file_ = std::move(mapped);
  return file;
}

}  // namespace inferd::gguf
