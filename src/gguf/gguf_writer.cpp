#include "gguf/gguf_writer.h"

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

void GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> shape,
                            std::span<const uint8_t> data) {
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  auto expected = row_bytes(type, elements);
  if (!expected || *expected != data.size()) {
    fail("GGUF writer: tensor '{}' of {} elements of {} needs {} bytes, got {}", name, elements,
         dtype_name(type), expected.value_or(0), data.size());
  }
  tensors_.push_back({std::move(name), type, std::move(shape), {data.begin(), data.end()}});
}

std::vector<uint8_t> GgufWriter::build(Layout* layout) const {
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
  std::vector<uint64_t> offsets;
  for (const PendingTensor& t : tensors_) {
    local.tensor_info_starts.push_back(out.bytes.size());
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) out.put<uint64_t>(d);
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = (offset + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  local.data_start = out.bytes.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.bytes.resize(local.data_start + offsets[i], 0);
    out.bytes.insert(out.bytes.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  if (layout != nullptr) *layout = std::move(local);
  return std::move(out.bytes);
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = build();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot create '{}'", path);
  size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  bool ok = std::fclose(f) == 0 && written == bytes.size();
  if (!ok) fail("cannot write {} bytes to '{}'", bytes.size(), path);
}

}  // namespace inferd::gguf
