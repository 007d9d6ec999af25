// inferd::Error: the exception the library throws for bad input (a model file, a request, an
// option). Its message names what is wrong: the field, the byte offset, the limit. Public so
// that a program using the library (include/inferd/engine.h) catches the same type the engine
// throws; the C ABI (inferd.h) turns it into an error code and its message.
#pragma once

#include <stdexcept>
#include <string>

namespace inferd {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace inferd
