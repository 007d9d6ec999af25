// Tag tokenizer: names, numbers, string literals (with Python's escapes, as Jinja decodes
// them) and operators inside `{{ }}` and `{% %}`.
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "tokenizer/jinja/lexer.h"
#include "util/utf8.h"

namespace inferd::jinja {
namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// `\x`, `\u`, `\U` followed by exactly `digits` hex digits; false when they are missing.
bool hex_escape(const std::string& s, size_t& i, int digits, uint32_t& cp) {
  if (i + static_cast<size_t>(digits) > s.size()) return false;
  cp = 0;
  for (int k = 0; k < digits; ++k) {
    const char c = s[i + static_cast<size_t>(k)];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    cp = cp * 16 +
         static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c))
                                   ? c - '0'
                                   : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
  }
  i += static_cast<size_t>(digits);
  return cp <= 0x10FFFF;
}

// One escape after a backslash at s[i-1]; unknown escapes keep their backslash, as in Python.
void read_escape(const std::string& s, size_t& i, std::string& out, Location where) {
  const char e = s[i++];
  static const std::string kSimple = "nrtabfv\\'\"";
  static const std::string kValues = "\n\r\t\a\b\f\v\\'\"";
  if (size_t k = kSimple.find(e); k != std::string::npos) {
    out += kValues[k];
  } else if (e == '\n') {
    // a line continuation
  } else if (e == 'x' || e == 'u' || e == 'U') {
    uint32_t cp = 0;
    if (!hex_escape(s, i, e == 'x' ? 2 : e == 'u' ? 4 : 8, cp))
      syntax_error(where, std::string("bad \\") + e + " escape in a string literal");
    append_utf8(out, cp);
  } else if (e >= '0' && e <= '7') {
    uint32_t cp = static_cast<uint32_t>(e - '0');
    for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k)
      cp = cp * 8 + static_cast<uint32_t>(s[i++] - '0');
    append_utf8(out, cp);
  } else {
    out += '\\';
    out += e;
  }
}

std::string read_string(const std::string& s, size_t& i, Location where) {
  const char quote = s[i++];
  std::string out;
  while (i < s.size() && s[i] != quote) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      read_escape(s, i, out, where);
    } else {
      out += s[i++];
    }
  }
  if (i >= s.size()) syntax_error(where, "string literal is never closed");
  ++i;
  return out;
}

// Integers and floats as Jinja writes them: 42, 1_000, 2.5, 1e3, 2.5e-3.
Value read_number(const std::string& s, size_t& i, Location where) {
  std::string digits;
  bool is_float = false;
  auto take_digits = [&] {
    while (i < s.size() &&
           (is_digit(s[i]) || (s[i] == '_' && i + 1 < s.size() && is_digit(s[i + 1]))))
      if (s[i++] != '_') digits += s[i - 1];
  };
  take_digits();
  if (i + 1 < s.size() && s[i] == '.' && is_digit(s[i + 1])) {
    is_float = true;
    digits += s[i++];
    take_digits();
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    if (j < s.size() && is_digit(s[j])) {
      is_float = true;
      digits += 'e';
      digits.append(s, i + 1, j - i - 1);
      i = j;
      take_digits();
    }
  }
  if (is_float) return Value(std::strtod(digits.c_str(), nullptr));
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size())
    syntax_error(where, "integer literal " + digits + " is too large");
  return Value(v);
}

}  // namespace

std::vector<Token> tokenize_tag(const Segment& tag, const LineIndex& lines) {
  static const char* const kOperators[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                           "{",  "}",  ",",  ".",  ":",  "|",  "="};
  std::vector<Token> out;
  const std::string& s = tag.text;
  size_t i = 0;
  while (true) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const Location where = lines.at(tag.offset + i);
    if (i >= s.size()) break;
    const char c = s[i];
    if (is_name_start(c)) {
      size_t j = i;
      while (j < s.size() && is_name_char(s[j])) ++j;
      out.push_back({Token::Kind::kName, s.substr(i, j - i), {}, where});
      i = j;
    } else if (is_digit(c)) {
      const size_t start = i;
      Value number = read_number(s, i, where);
      out.push_back({Token::Kind::kNumber, s.substr(start, i - start), number, where});
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
  out.push_back({Token::Kind::kEnd, "", {}, lines.at(tag.offset + s.size())});
  return out;
}

}  // namespace inferd::jinja
