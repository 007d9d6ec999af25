// The error a request's handling throws to answer the client: the HTTP status, and OpenAI's
// error object ({"error": {"message", "type", "param", "code"}}) that every dialect starts from
// (Anthropic's and Vertex's answers are rewritten from it).
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace inferd::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {},
           std::string type = "invalid_request_error", std::string code = {})
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
  nlohmann::ordered_json details = nlohmann::ordered_json::object();  // more fields of "error"
  // {"error": {"message", "type", "param", "code", details...}}
  nlohmann::ordered_json body() const;
};

}  // namespace inferd::server
