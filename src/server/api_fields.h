// Reading the fields of the request bodies that are translated onto the chat path (Anthropic's
// Messages API, OpenAI's Responses API): a field's place is named in the error, first in its
// message, so a client sees which part of its body was refused.
#pragma once

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace inferd::server::api_fields {

// ApiError 400 "WHERE: MESSAGE", with WHERE as its param.
[[noreturn]] inline void bad(const std::string& where, const std::string& message) {
  throw ApiError(400, fmt::format("{}: {}", where, message), where);
}

// The field, or nullptr when it is absent or null.
inline const nlohmann::ordered_json* field(const nlohmann::ordered_json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// A string field of the object at `where`; "" when absent and not required.
inline std::string string_field(const nlohmann::ordered_json& object, const char* name,
                                const std::string& where, bool required = true) {
  const nlohmann::ordered_json* v = field(object, name);
  if (v == nullptr) {
    if (required) bad(fmt::format("{}.{}", where, name), "field required");
    return {};
  }
  if (!v->is_string()) bad(fmt::format("{}.{}", where, name), "must be a string");
  return v->get<std::string>();
}

}  // namespace inferd::server::api_fields
