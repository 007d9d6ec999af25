// GgufFile look-ups: typed metadata getters and the tensor index.
#include <numeric>

#include "gguf/gguf.h"
#include "util/error.h"

namespace inferd::gguf {

uint64_t TensorInfo::num_elements() const {
  return std::accumulate(shape.begin(), shape.end(), uint64_t{1}, std::multiplies<>());
}

std::string TensorInfo::shape_string() const {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void wrong_type(const GgufFile& file, std::string_view key, std::string_view expected,
                             const Value& value) {
  fail("{}: metadata '{}' should be {}, but is {}", file.name(), key, expected,
       value_type_name(value.type()));
}

[[noreturn]] void missing(const GgufFile& file, std::string_view key) {
  fail("{}: required metadata '{}' is missing", file.name(), key);
}

}  // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) wrong_type(*this, key, "a string", *value);
  return *value->as_string();
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  auto v = value->as_int();
  if (!v) wrong_type(*this, key, "an integer", *value);
  return v;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  auto v = value->as_float();
  if (!v) wrong_type(*this, key, "a number", *value);
  return v;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  auto v = value->as_bool();
  if (!v) wrong_type(*this, key, "a bool", *value);
  return v;
}

const Array* GgufFile::get_array(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return nullptr;
  if (!value->is_array()) wrong_type(*this, key, "an array", *value);
  return value->as_array();
}

std::string GgufFile::require_string(std::string_view key) const {
  auto v = get_string(key);
  if (!v) missing(*this, key);
  return *v;
}

int64_t GgufFile::require_int(std::string_view key) const {
  auto v = get_int(key);
  if (!v) missing(*this, key);
  return *v;
}

double GgufFile::require_float(std::string_view key) const {
  auto v = get_float(key);
  if (!v) missing(*this, key);
  return *v;
}

const Array& GgufFile::require_array(std::string_view key) const {
  const Array* v = get_array(key);
  if (v == nullptr) missing(*this, key);
  return *v;
}

}  // namespace inferd::gguf
