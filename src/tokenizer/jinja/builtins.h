// Jinja filters, tests, methods of strings and dicts (`.strip()`, `.items()`) and default
// globals (range, dict, namespace), as the chat templates found in GGUF files use them.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace inferd::jinja {

// `value | name(args...)`; nullopt when no such filter exists. `max_size` caps what it builds.
std::optional<Value> apply_filter(const std::string& name, const Value& value, const Args& args,
                                  Location where, size_t max_size);
// `value is name(args...)`; nullopt when no such test exists.
std::optional<bool> apply_test(const std::string& name, const Value& value, const Args& args,
                               Location where);
// `value.name`: a dict's key or a method bound to `value`, in jinja2's order; else undefined.
Value attribute(const Value& value, const std::string& name, Location where, size_t max_size);
// `value[key]`: a dict's key, a list's or string's item (negative from the end); else undefined.
Value item(const Value& value, const Value& key, Location where, size_t max_size);
// Jinja's global functions; `range` builds at most `max_items` numbers.
Dict default_globals(size_t max_items);

}  // namespace inferd::jinja
