// Value and Array accessors of the GGUF metadata model.
#include <cmath>
#include <limits>

#include "gguf/gguf.h"
#include "util/error.h"

namespace inferd::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(ValueType type) {
  return type == ValueType::FLOAT32 || type == ValueType::FLOAT64;
}

static bool is_unsigned_type(ValueType type) {
  return type == ValueType::UINT8 || type == ValueType::UINT16 || type == ValueType::UINT32 ||
         type == ValueType::UINT64;
}

Value Value::of_unsigned(ValueType type, uint64_t v) {
  Value value;
  value.type_ = type;
  value.unsigned_ = v;
  return value;
}

Value Value::of_signed(ValueType type, int64_t v) {
  Value value;
  value.type_ = type;
  value.signed_ = v;
  return value;
}

Value Value::of_float(ValueType type, double v) {
  Value value;
  value.type_ = type;
  value.float_ = v;
  return value;
}

Value Value::of_bool(bool v) {
  Value value;
  value.type_ = ValueType::BOOL;
  value.unsigned_ = v ? 1 : 0;
  return value;
}

Value Value::of_string(std::string v) {
  Value value;
  value.type_ = ValueType::STRING;
  value.string_ = std::move(v);
  return value;
}

Value Value::of_array(Array v) {
  Value value;
  value.type_ = ValueType::ARRAY;
  value.array_ = std::make_shared<const Array>(std::move(v));
  return value;
}

std::optional<int64_t> Value::as_int() const {
  if (type_ == ValueType::BOOL) return static_cast<int64_t>(unsigned_);
  if (!is_integer_type(type_)) return std::nullopt;
  if (is_unsigned_type(type_)) {
    if (unsigned_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(unsigned_);
  }
  return signed_;
}

std::optional<uint64_t> Value::as_uint() const {
  if (type_ == ValueType::BOOL) return unsigned_;
  if (!is_integer_type(type_)) return std::nullopt;
  if (is_unsigned_type(type_)) return unsigned_;
  if (signed_ < 0) return std::nullopt;
  return static_cast<uint64_t>(signed_);
}

std::optional<double> Value::as_float() const {
  if (is_float_type(type_)) return float_;
  if (is_unsigned_type(type_)) return static_cast<double>(unsigned_);
  if (is_integer_type(type_)) return static_cast<double>(signed_);
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type_ == ValueType::BOOL) return unsigned_ != 0;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  return type_ == ValueType::STRING ? &string_ : nullptr;
}

const Array* Value::as_array() const {
  return type_ == ValueType::ARRAY ? array_.get() : nullptr;
}

std::string Value::to_string(size_t max_items) const {
  switch (type_) {
    case ValueType::STRING: {
      constexpr size_t kMaxChars = 60;
      if (string_.size() <= kMaxChars) return fmt::format("\"{}\"", string_);
      return fmt::format("\"{}...\" ({} bytes)", string_.substr(0, kMaxChars), string_.size());
    }
    case ValueType::BOOL:
      return unsigned_ != 0 ? "true" : "false";
    case ValueType::FLOAT32:
    case ValueType::FLOAT64:
      return fmt::format("{}", float_);
    case ValueType::ARRAY: {
      std::string out = "[";
      const auto& items = array_->items;
      for (size_t i = 0; i < items.size() && i < max_items; ++i) {
        if (i > 0) out += ", ";
        out += items[i].to_string(max_items);
      }
      if (items.size() > max_items) out += fmt::format(", ... ({} items)", items.size());
      return out + "]";
    }
    default:
      return is_unsigned_type(type_) ? fmt::format("{}", unsigned_) : fmt::format("{}", signed_);
  }
}

std::vector<std::string> Array::strings(std::string_view what) const {
  if (element_type != ValueType::STRING) {
    fail("{}: expected an array of string, found an array of {}", what,
         value_type_name(element_type));
  }
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const Value& item : items) out.push_back(*item.as_string());
  return out;
}

std::vector<int64_t> Array::ints(std::string_view what) const {
  std::vector<int64_t> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto v = items[i].as_int();
    if (!v)
      fail("{}: element {} is not an integer (array of {})", what, i,
           value_type_name(element_type));
    out.push_back(*v);
  }
  return out;
}

std::vector<float> Array::floats(std::string_view what) const {
  std::vector<float> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto v = items[i].as_float();
    if (!v)
      fail("{}: element {} is not a number (array of {})", what, i, value_type_name(element_type));
    out.push_back(static_cast<float>(*v));
  }
  return out;
}

}  // namespace inferd::gguf
