#include "server/json/fields.h"

#include <cmath>

#include <fmt/format.h>

namespace inferd::server::json_fields {

void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

void bad_at(const std::string& where, const std::string& message) {
  throw ApiError(400, fmt::format("{}: {}", where, message), where);
}

const json* field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& body, const char* name, double def, double lo, double hi, bool lo_open) {
  const json* v = field(body, name);
  if (v == nullptr) return def;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    bad(name,
        fmt::format("'{}' must be in {}{}, {}], got {}", name, lo_open ? "(" : "[", lo, hi, x));
  }
  return x;
}

int64_t integer(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return def;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  const auto x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
  return x;
}

bool boolean(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (v == nullptr) return def;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
  return v->get<bool>();
}

std::string text(const json& body, const char* name, bool required) {
  const json* v = field(body, name);
  if (v == nullptr) {
    if (required) bad(name, fmt::format("'{}' is required", name));
    return {};
  }
  if (!v->is_string()) bad(name, fmt::format("'{}' must be a string", name));
  return v->get<std::string>();
}

std::string string_field(const json& object, const char* name, const std::string& where,
                         bool required) {
  const json* v = field(object, name);
  if (v == nullptr) {
    if (required) bad_at(fmt::format("{}.{}", where, name), "field required");
    return {};
  }
  if (!v->is_string()) bad_at(fmt::format("{}.{}", where, name), "must be a string");
  return v->get<std::string>();
}

}  // namespace inferd::server::json_fields
