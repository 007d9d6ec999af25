// inferd::Error (include/inferd/error.h): the one exception type for bad input (files, requests,
// arguments), and fail() that throws it. Its message always names what is wrong: the field, the
// byte offset, the limit.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "inferd/error.h"  // the class itself is public: the library API throws it

namespace inferd {

// Throws inferd::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace inferd
