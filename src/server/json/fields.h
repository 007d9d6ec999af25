// Reading the fields of a request body, for every dialect (OpenAI, llama-server's own API,
// Anthropic, Responses, Vertex): a missing, null or mistyped field, or a number out of range, is
// an ApiError (400) that names it. Two styles of message, each kept where clients know it:
//  - bad(param, ...): the message as given, the field in `param` (OpenAI's top-level fields:
//    "'temperature' must be in [0, 2], got 3");
//  - bad_at(where, ...): the field's path first in the message too ("messages.1.content: ..."),
//    as the translated dialects (Anthropic, Responses) name nested fields.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/json/api_error.h"

namespace inferd::server::json_fields {

using json = nlohmann::ordered_json;

// ApiError 400 with MESSAGE, `param` set to PARAM.
[[noreturn]] void bad(const std::string& param, const std::string& message);
// ApiError 400 "WHERE: MESSAGE", `param` set to WHERE.
[[noreturn]] void bad_at(const std::string& where, const std::string& message);

// The field, or nullptr when it is absent or null.
const json* field(const json& object, const char* name);

// The number, integer or boolean field NAME of a top-level body, DEF when absent; out of
// [lo, hi] (or (lo, hi] with lo_open) or of another type: bad(NAME, ...).
double number(const json& body, const char* name, double def, double lo, double hi,
              bool lo_open = false);
int64_t integer(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi);
bool boolean(const json& body, const char* name, bool def);

// The string field NAME of a top-level body; "" when absent and not required ("'NAME' is
// required" when it is).
std::string text(const json& body, const char* name, bool required);

// The string field NAME of the object at path WHERE; "" when absent and not required. Errors
// name WHERE.NAME (bad_at).
std::string string_field(const json& object, const char* name, const std::string& where,
                         bool required = true);

}  // namespace inferd::server::json_fields
