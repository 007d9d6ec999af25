// Template lexer: splits a template into text and tags, applying whitespace control (`-`)
// and HF's trim_blocks / lstrip_blocks, then splits tag contents into expression tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

struct Segment {
  enum class Kind { kText, kExpression, kStatement };
  Kind kind;
  std::string text;  // raw text, or the tag's contents without delimiters
  Location where;
};

// Splits the template; comments are dropped. Throws inferd::Error for an unclosed tag.
std::vector<Segment> split_template(std::string_view source);

struct Token {
  enum class Kind { kName, kNumber, kString, kOperator, kEnd };
  Kind kind;
  std::string text;  // name, operator, or the string's value without quotes
  Value number;
  Location where;
};

// Tokenizes the contents of one tag. Throws inferd::Error naming the location of bad input.
std::vector<Token> tokenize_tag(const Segment& tag);

[[noreturn]] void syntax_error(Location where, const std::string& message);

}  // namespace inferd::jinja
