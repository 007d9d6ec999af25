// Parser: template segments and tag tokens -> statement tree. Recursive descent with Jinja's
// operator precedence; unknown statements and malformed expressions are errors with a place.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

StmtList parse_template(std::string_view source);

}  // namespace inferd::jinja
