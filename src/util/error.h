// inferd::Error: the one exception type for bad input (files, requests, arguments).
// Its message always names what is wrong: the field, the byte offset, the limit.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace inferd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws inferd::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace inferd
