// Jinja filters, tests, and methods of strings, lists and dicts (`.strip()`, `.items()`),
// as the chat templates found in GGUF files use them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace inferd::jinja {

// `value | name(args...)`; nullopt when no such filter exists.
std::optional<Value> apply_filter(const std::string& name, const Value& value,
                                  std::vector<Value>& args, Location where);
// `value is name(args...)`; nullopt when no such test exists.
std::optional<bool> apply_test(const std::string& name, const Value& value,
                               const std::vector<Value>& args);
// `value.name` for a method of a built-in type, bound to `value`; undefined when none.
Value method(const Value& value, const std::string& name, Location where);

}  // namespace inferd::jinja
