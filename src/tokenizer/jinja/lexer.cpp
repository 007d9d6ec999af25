#include "tokenizer/jinja/lexer.h"

#include <cctype>

#include "util/error.h"

namespace inferd::jinja {

void syntax_error(Location where, const std::string& message) {
  fail("chat template line {}, column {}: {}", where.line, where.column, message);
}

namespace {

Location location_of(std::string_view source, size_t offset) {
  Location loc;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++loc.line;
      loc.column = 1;
    } else {
      ++loc.column;
    }
  }
  return loc;
}

void rstrip(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

// lstrip_blocks: drop spaces and tabs between the start of the line and a block tag.
void strip_line_indent(std::string& s) {
  size_t i = s.size();
  while (i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t')) --i;
  if (i == 0 || s[i - 1] == '\n') s.resize(i);
}

}  // namespace

std::vector<Segment> split_template(std::string_view source) {
  std::vector<Segment> out;
  std::string text;
  bool strip_next = false;    // a `-` closed the previous tag
  bool trim_newline = false;  // trim_blocks after a block tag
  size_t pos = 0;
  while (pos < source.size()) {
    const size_t open = source.find('{', pos);
    const bool is_tag =
        open != std::string_view::npos && open + 1 < source.size() &&
        (source[open + 1] == '{' || source[open + 1] == '%' || source[open + 1] == '#');
    const size_t text_end =
        open == std::string_view::npos ? source.size() : (is_tag ? open : open + 1);
    std::string piece(source.substr(pos, text_end - pos));
    if (strip_next)
      piece.erase(0, piece.find_first_not_of(" \t\r\n") == std::string::npos
                         ? piece.size()
                         : piece.find_first_not_of(" \t\r\n"));
    if (trim_newline && !piece.empty() && piece[0] == '\n') piece.erase(0, 1);
    if (!piece.empty()) strip_next = trim_newline = false;
    text += piece;
    pos = text_end;
    if (!is_tag) continue;
    const char kind = source[open + 1];
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = source.find(close, open + 2);
    if (end == std::string_view::npos)
      syntax_error(location_of(source, open), "tag is never closed");
    size_t inner_begin = open + 2, inner_end = end;
    const bool strip_before = inner_begin < inner_end && source[inner_begin] == '-';
    const bool keep_indent = inner_begin < inner_end && source[inner_begin] == '+';
    if (strip_before || keep_indent) ++inner_begin;
    strip_next = inner_end > inner_begin && source[inner_end - 1] == '-';
    if (strip_next) --inner_end;
    if (strip_before) {
      rstrip(text);
    } else if (kind != '{' && !keep_indent) {
      strip_line_indent(text);
    }
    trim_newline = kind != '{';
    if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), {}});
    text.clear();
    if (kind != '#') {
      out.push_back({kind == '{' ? Segment::Kind::kExpression : Segment::Kind::kStatement,
                     std::string(source.substr(inner_begin, inner_end - inner_begin)),
                     location_of(source, open)});
    }
    pos = end + 2;
  }
  // Like Jinja's default (keep_trailing_newline=False), one newline at the very end is dropped.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), {}});
  return out;
}

namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

std::string read_string(const std::string& s, size_t& i, Location where) {
  const char quote = s[i++];
  std::string out;
  while (i < s.size() && s[i] != quote) {
    char c = s[i++];
    if (c == '\\' && i < s.size()) {
      const char e = s[i++];
      switch (e) {
        case 'n':
          c = '\n';
          break;
        case 't':
          c = '\t';
          break;
        case 'r':
          c = '\r';
          break;
        default:
          c = e;
          break;
      }
    }
    out += c;
  }
  if (i >= s.size()) syntax_error(where, "string literal is never closed");
  ++i;
  return out;
}

}  // namespace

std::vector<Token> tokenize_tag(const Segment& tag) {
  static const char* const kOperators[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                           "{",  "}",  ",",  ".",  ":",  "|",  "="};
  std::vector<Token> out;
  const std::string& s = tag.text;
  size_t i = 0;
  while (true) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    Location where{tag.where.line, tag.where.column + static_cast<int>(i) + 2};
    if (i >= s.size()) break;
    const char c = s[i];
    if (is_name_start(c)) {
      size_t j = i;
      while (j < s.size() && is_name_char(s[j])) ++j;
      out.push_back({Token::Kind::kName, s.substr(i, j - i), {}, where});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool is_float =
          j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
      if (is_float) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      const std::string digits = s.substr(i, j - i);
      Value number =
          is_float ? Value(std::stod(digits)) : Value(static_cast<int64_t>(std::stoll(digits)));
      out.push_back({Token::Kind::kNumber, digits, number, where});
      i = j;
    } else if (c == '\'' || c == '"') {
      out.push_back({Token::Kind::kString, read_string(s, i, where), {}, where});
    } else {
      bool matched = false;
      for (const char* op : kOperators) {
        const size_t len = std::char_traits<char>::length(op);
        if (s.compare(i, len, op) == 0) {
          out.push_back({Token::Kind::kOperator, op, {}, where});
          i += len;
          matched = true;
          break;
        }
      }
      if (!matched) syntax_error(where, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::kEnd,
                 "",
                 {},
                 {tag.where.line, tag.where.column + static_cast<int>(s.size()) + 2}});
  return out;
}

}  // namespace inferd::jinja
