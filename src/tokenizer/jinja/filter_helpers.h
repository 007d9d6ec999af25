// Shared by the filter files: argument access with jinja2's defaults, attribute paths, and the
// sequence filters' entry point.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace inferd::jinja {

// The argument at `i` or named `name`, nullptr when absent.
inline const Value* filter_arg(const Args& args, size_t i, const char* name) {
  return args.get(i, name);
}
std::string string_arg(const Args& args, size_t i, const char* name, const std::string& fallback);
int64_t int_arg(const Args& args, size_t i, const char* name, int64_t fallback);
bool bool_arg(const Args& args, size_t i, const char* name, bool fallback = false);

// jinja2's make_attrgetter: `attribute="a.b"` or "0" walks keys and indices with getitem.
Value follow(const Value& v, const std::string& path, Location where, size_t max_size);

// The sort key of jinja2's sort/min/max/unique/dictsort: strings lower-cased unless
// case-sensitive.
Value sort_key(const Value& v, bool case_sensitive);
// Python's < for sorting: numbers with numbers, strings with strings, sequences item by item.
bool less_than(const Value& a, const Value& b, Location where);

// Filters over sequences (sort, unique, map, select, dictsort, ...); nullopt for other names.
std::optional<Value> sequence_filter(const std::string& name, const Value& v, const Args& args,
                                     Location where, size_t max_size);

}  // namespace inferd::jinja
