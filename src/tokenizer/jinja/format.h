// Python's string formatting: printf-style `%` (also the `format` filter) and str.format.
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace inferd::jinja {

// `format % args`: a tuple spreads over the fields, a dict serves `%(name)s`. Conversions
// s r d i x X o f F e E g G and %%, with flags, width and precision. `markup`: the format is
// Markup, whose % escapes the arguments' text.
std::string percent_format(const std::string& format, const Value& args, bool markup);
// `format.format(*args, **kwargs)` with fields {} {0} {name} and !r / !s; a format spec or
// attribute in a field is an error rather than a guess.
std::string str_format(const std::string& format, const Args& args, bool markup);

}  // namespace inferd::jinja
