// A request body's JSON, parsed with the errors a client can act on: where the text is not JSON,
// which field holds a number beyond a double's range (1e400), and a cap on nesting depth (deep
// nesting costs stack in every recursive walk after parsing). Each is an ApiError (400).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace inferd::server {

constexpr int kMaxJsonDepth = 512;

nlohmann::ordered_json parse_request_json(std::string_view text);

}  // namespace inferd::server
