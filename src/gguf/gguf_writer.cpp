#include "gguf/gguf_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace inferd::gguf {
namespace {

class ByteSink {
 public:
  template <typename T>
  void put(T value) {
    size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &value, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
  std::vector<uint8_t> bytes;
};

void put_value(ByteSink& out, const Value& value);

void put_scalar(ByteSink& out, const Value& value) {
  switch (value.type()) {
    case ValueType::UINT8:
      out.put<uint8_t>(static_cast<uint8_t>(*value.as_uint()));
      break;
    case ValueType::INT8:
      out.put<int8_t>(static_cast<int8_t>(*value.as_int()));
      break;
    case ValueType::UINT16:
      out.put<uint16_t>(static_cast<uint16_t>(*value.as_uint()));
      break;
    case ValueType::INT16:
      out.put<int16_t>(static_cast<int16_t>(*value.as_int()));
      break;
    case ValueType::UINT32:
      out.put<uint32_t>(static_cast<uint32_t>(*value.as_uint()));
      break;
    case ValueType::INT32:
      out.put<int32_t>(static_cast<int32_t>(*value.as_int()));
      break;
    case ValueType::UINT64:
      out.put<uint64_t>(*value.as_uint());
      break;
    case ValueType::INT64:
      out.put<int64_t>(*value.as_int());
      break;
    case ValueType::FLOAT32:
      out.put<float>(static_cast<float>(*value.as_float()));
      break;
    case ValueType::FLOAT64:
      out.put<double>(*value.as_float());
      break;
    case ValueType::BOOL:
      out.put<uint8_t>(*value.as_bool() ? 1 : 0);
      break;
    case ValueType::STRING:
      out.put_string(*value.as_string());
      break;
    case ValueType::ARRAY:
      break;
  }
}

void put_value(ByteSink& out, const Value& value) {
  if (!value.is_array()) return put_scalar(out, value);
  const Array& array = *value.as_array();
  out.put<uint32_t>(static_cast<uint32_t>(array.element_type));
  out.put<uint64_t>(array.items.size());
  for (const Value& item : array.items) put_value(out, item);
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment)
    : version_(version), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    fail("GGUF writer: alignment {} is not a power of two", alignment);
  }
  if (alignment != kDefaultAlignment) set_u32("general.alignment", alignment);
}

void GgufWriter::set(std::string key, Value value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_string(std::string key, std::string value) {
  set(std::move(key), Value::of_string(std::move(value)));
}
void GgufWriter::set_u32(std::string key, uint32_t value) {
  set(std::move(key), Value::of_unsigned(ValueType::UINT32, value));
}
void GgufWriter::set_i32(std::string key, int32_t value) {
  set(std::move(key), Value::of_signed(ValueType::INT32, value));
}
void GgufWriter::set_f32(std::string key, float value) {
  set(std::move(key), Value::of_float(ValueType::FLOAT32, value));
}
void GgufWriter::set_bool(std::string key, bool value) {
  set(std::move(key), Value::of_bool(value));
}

void GgufWriter::set_strings(std::string key, const std::vector<std::string>& values) {
  Array array{ValueType::STRING, {}};
  for (const auto& v : values) array.items.push_back(Value::of_string(v));
  set(std::move(key), Value::of_array(std::move(array)));
}

void GgufWriter::set_i32s(std::string key, const std::vector<int32_t>& values) {
  Array array{ValueType::INT32, {}};
  for (int32_t v : values) array.items.push_back(Value::of_signed(ValueType::INT32, v));
  set(std::move(key), Value::of_array(std::move(array)));
}

void GgufWriter::set_f32s(std::string key, const std::vector<float>& values) {
  Array array{ValueType::FLOAT32, {}};
  for (float v : values) array.items.push_back(Value::of_float(ValueType::FLOAT32, v));
  set(std::move(key), Value::of_array(std::move(array)));
}

uint64_t GgufWriter::tensor_bytes(const std::string& name, DType type,
                                  const std::vector<uint64_t>& shape) {
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  auto bytes = row_bytes(type, elements);
  if (!bytes) {
    fail("GGUF writer: tensor '{}' of {} elements is not a whole number of {} blocks", name,
         elements, dtype_name(type));
  }
  return *bytes;
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                            std::span<const uint8_t> data) {
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  auto expected = row_bytes(type, elements);
  if (!expected || *expected != data.size()) {
    fail("GGUF writer: tensor '{}' of {} elements of {} needs {} bytes, got {}", name, elements,
         dtype_name(type), expected.value_or(0), data.size());
  }
  tensors_.push_back(
      {std::move(name), type, std::move(shape), data.size(), false, {data.begin(), data.end()}});
}

void GgufWriter::declare_tensor(std::string name, DType type, std::vector<uint64_t> shape) {
  const uint64_t bytes = tensor_bytes(name, type, shape);
  tensors_.push_back({std::move(name), type, std::move(shape), bytes, true, {}});
}

std::vector<uint8_t> GgufWriter::build_header(Layout* layout,
                                              std::vector<uint64_t>* offsets) const {
  ByteSink out;
  Layout local;
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(version_);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.size());
  local.header_end = out.bytes.size();
  for (const auto& [key, value] : metadata_) {
    local.metadata_starts.push_back(out.bytes.size());
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type()));
    put_value(out, value);
  }
  uint64_t offset = 0;
  offsets->clear();
  for (const PendingTensor& t : tensors_) {
    local.tensor_info_starts.push_back(out.bytes.size());
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) out.put<uint64_t>(d);
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offsets->push_back(offset);
    offset = (offset + t.num_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  local.data_start = out.bytes.size();
  if (layout != nullptr) *layout = std::move(local);
  return std::move(out.bytes);
}

std::vector<uint8_t> GgufWriter::build(Layout* layout) const {
  for (const PendingTensor& t : tensors_) {
    if (t.declared_only) fail("GGUF writer: tensor '{}' has no data (write it streamed)", t.name);
  }
  Layout local;
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> bytes = build_header(&local, &offsets);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    bytes.resize(local.data_start + offsets[i], 0);
    bytes.insert(bytes.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  if (layout != nullptr) *layout = std::move(local);
  return bytes;
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = build();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot create '{}'", path);
  size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  bool ok = std::fclose(f) == 0 && written == bytes.size();
  if (!ok) fail("cannot write {} bytes to '{}'", bytes.size(), path);
}

GgufStreamWriter::GgufStreamWriter(const GgufWriter& header, std::string path)
    : path_(std::move(path)), alignment_(header.alignment_) {
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> bytes = header.build_header(nullptr, &offsets);
  for (const auto& t : header.tensors_) sizes_.push_back(t.num_bytes);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) fail("cannot create '{}'", path_);
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  put(bytes.data(), bytes.size());
  pad_finished_tensors();
}

GgufStreamWriter::~GgufStreamWriter() {
  if (finished_) return;
  if (file_ != nullptr) std::fclose(file_);
  std::remove(path_.c_str());
}

void GgufStreamWriter::put(const void* bytes, size_t size) {
  if (size == 0) return;
  if (std::fwrite(bytes, 1, size, file_) != size) {
    fail("cannot write {} bytes to '{}' at offset {}", size, path_, position_);
  }
  position_ += size;
}

// Moves past every tensor that is complete, padding it to the alignment (a tensor of no bytes
// is complete at once).
void GgufStreamWriter::pad_finished_tensors() {
  static constexpr uint8_t kZeros[256] = {};
  while (current_ < sizes_.size() && written_in_current_ == sizes_[current_]) {
    const uint64_t padded = (sizes_[current_] + alignment_ - 1) / alignment_ * alignment_;
    for (uint64_t left = padded - sizes_[current_]; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, sizeof(kZeros)));
      put(kZeros, n);
      left -= n;
    }
    ++current_;
    written_in_current_ = 0;
  }
}

void GgufStreamWriter::write(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    if (current_ == sizes_.size()) {
      fail("GGUF writer: {} bytes past the last tensor of '{}'", bytes.size(), path_);
    }
    const uint64_t room = sizes_[current_] - written_in_current_;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(room, bytes.size()));
    put(bytes.data(), n);
    written_in_current_ += n;
    bytes = bytes.subspan(n);
    pad_finished_tensors();
  }
}

void GgufStreamWriter::finish() {
  if (current_ != sizes_.size()) {
    fail("GGUF writer: '{}' ended after {} of {} tensors", path_, current_, sizes_.size());
  }
  const bool ok = std::fflush(file_) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) fail("cannot write '{}' (disk full?)", path_);
  finished_ = true;
}

}  // namespace inferd::gguf
