// Jinja operators on values with Python's rules: int/float arithmetic (overflow is an error,
// not wrap-around), floor division and modulo, string and list concatenation and repetition.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

// A list may hold max_size / kBytesPerItem items: its items are larger than a string's bytes.
constexpr size_t kBytesPerItem = 16;

// `a op b` for + - * / // % ** and ~; `max_size` caps the strings and lists it builds.
Value binary_op(const std::string& op, const Value& a, const Value& b, Location where,
                size_t max_size);
// `a op b` for == != < > <= >= in, not in.
bool compare_op(const std::string& op, const Value& a, const Value& b, Location where);

// Using an undefined value where Jinja's default Undefined raises (arithmetic, attributes).
[[noreturn]] void undefined_error(const Value& v, Location where);

}  // namespace inferd::jinja
