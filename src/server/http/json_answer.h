// A handler's JSON answer and its error answers, one way for every route (the OpenAI routes,
// the agent routes, the CORS proxy): invalid UTF-8 in a message is replaced, never thrown on.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"
#include "server/http/message.h"

namespace inferd::server {

inline void send_json(HttpResponse& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

// An OpenAI error object: server_error from 500 on, invalid_request_error below.
inline void send_error(HttpResponse& res, int status, const std::string& message,
                       const std::string& param = {}) {
  send_json(
      res, status,
      ApiError(status, message, param, status >= 500 ? "server_error" : "invalid_request_error")
          .body());
}

// A JSON value of the wrong type read without a check first: the client's error.
inline ApiError wrong_type(const nlohmann::ordered_json::exception& e) {
  return ApiError(400, fmt::format("a field has the wrong type: {}", e.what()));
}

}  // namespace inferd::server
