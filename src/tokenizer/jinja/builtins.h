// Jinja filters, tests, methods of strings, dicts and lists (`.strip()`, `.items()`) and
// default globals (range, dict, namespace, joiner), as jinja2 defines them with HF's settings.
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
// `value.name`: a method bound to `value` or a dict's key, in jinja2's order; else undefined.
Value attribute(const Value& value, const std::string& name, Location where, size_t max_size);
// `value[key]`: a dict's key, a list's or string's item (negative from the end), else a
// method (jinja2 tries getattr for a string key); else undefined.
Value item(const Value& value, const Value& key, Location where, size_t max_size);
// A method of a str, dict or list bound to `value`: nullopt when it has none, undefined (with
// the sandbox's hint) when the sandbox refuses it (list.append, dict.update, ...).
std::optional<Value> method(const Value& value, const std::string& name, size_t max_size);
// The undefined value of a missing attribute, with jinja2's hint.
Value missing_attribute(const Value& value, const std::string& name);
// Jinja's global functions; `range` builds at most `max_items` numbers.
Dict default_globals(size_t max_items);

}  // namespace inferd::jinja
