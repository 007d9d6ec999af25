// Template lexer: splits a template into text and tags, applying whitespace control (`-`, `+`)
// and HF's trim_blocks / lstrip_blocks, then splits tag contents into expression tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace inferd::jinja {

// Maps byte offsets of the (newline-normalized) source to 1-based line and column (in bytes).
class LineIndex {
 public:
  explicit LineIndex(std::string_view source);
  Location at(size_t offset) const;

 private:
  std::vector<size_t> line_starts_;
};

struct Segment {
  enum class Kind { kText, kExpression, kStatement };
  Kind kind;
  std::string text;  // the text, or the tag's contents without delimiters and `-`/`+`
  size_t offset;     // where `text` starts in the normalized source
  Location where;    // where the segment (the tag's opening delimiter) starts
};

struct Lexed {
  std::string source;  // newline-normalized, as Jinja lexes it
  std::vector<Segment> segments;
  LineIndex lines;
};

// Splits the template; comments are dropped. Throws inferd::Error for an unclosed tag.
Lexed split_template(std::string_view source);

struct Token {
  enum class Kind { kName, kNumber, kString, kOperator, kEnd };
  Kind kind;
  std::string text;  // name, operator, or the string's value without quotes
  Value number;
  Location where;
};

// Tokenizes the contents of one tag. Throws inferd::Error naming the location of bad input.
std::vector<Token> tokenize_tag(const Segment& tag, const LineIndex& lines);

[[noreturn]] void syntax_error(Location where, const std::string& message);

}  // namespace inferd::jinja
