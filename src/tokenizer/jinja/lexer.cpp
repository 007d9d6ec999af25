// Template splitting: text and tags, with Jinja's whitespace rules under HF's settings
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False).
#include "tokenizer/jinja/lexer.h"

#include <algorithm>

#include "util/error.h"

namespace inferd::jinja {

void syntax_error(Location where, const std::string& message) {
  fail("chat template line {}, column {}: {}", where.line, where.column, message);
}

LineIndex::LineIndex(std::string_view source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') line_starts_.push_back(i + 1);
  }
}

Location LineIndex::at(size_t offset) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line = static_cast<size_t>(it - line_starts_.begin());  // >= 1
  return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1]) + 1};
}

namespace {

// Jinja lexes with every "\r\n" and "\r" turned into "\n", and drops one final newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Offset of the tag opening at or after `from` ("{{", "{%" or "{#"), or npos.
size_t find_tag(const std::string& s, size_t from) {
  for (size_t i = s.find('{', from); i != std::string::npos; i = s.find('{', i + 1)) {
    if (i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
  }
  return std::string::npos;
}

// Offset of the closing delimiter of the tag whose contents start at `from`. Quotes and
// brackets are skipped, as Jinja's lexer does: `{{ '}}' }}` and `{{ {'a': {}} }}` are one tag.
size_t find_close(const std::string& s, size_t from, char kind) {
  if (kind == '#') return s.find("#}", from);
  const char closer = kind == '{' ? '}' : '%';
  int depth = 0;
  // With unbalanced brackets (`{{ f(1 }}`) the first closer ends the tag, and the expression
  // parser reports what is missing.
  size_t first_close = std::string::npos;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (c == closer && i + 1 < s.size() && s[i + 1] == '}' && first_close == std::string::npos)
      first_close = i;
    if (c == '\'' || c == '"') {
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\') ++i;
      }
      if (i >= s.size()) return first_close;
    } else if (c == closer && i + 1 < s.size() && s[i + 1] == '}' && depth == 0) {
      return i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return first_close;
}

// lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag go.
// The text must begin a line itself (`line_starting`) unless it contains a newline.
void strip_line_indent(std::string& text, bool line_starting) {
  const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (line_begin == 0 && !line_starting) return;
  for (size_t i = line_begin; i < text.size(); ++i) {
    if (text[i] == '\n' || !is_space(text[i])) return;
  }
  text.resize(line_begin);
}

struct Tag {
  char kind;           // '{', '%' or '#'
  size_t inner_begin;  // contents, without delimiters and whitespace-control signs
  size_t inner_end;
  size_t after;       // first offset after the closing delimiter
  bool strip_before;  // `{%-`
  bool keep_indent;   // `{%+`
  bool strip_after;   // `-%}`
  bool keep_newline;  // `+%}`
};

Tag read_tag(const std::string& s, size_t open, const LineIndex& lines) {
  Tag t{};
  t.kind = s[open + 1];
  size_t close = find_close(s, open + 2, t.kind);
  if (close == std::string::npos) {
    const char* expected = t.kind == '{' ? "}}" : t.kind == '%' ? "%}" : "#}";
    syntax_error(lines.at(open), std::string("tag is never closed (expected '") + expected + "')");
  }
  t.after = close + 2;
  t.inner_begin = open + 2;
  t.inner_end = close;
  if (t.inner_begin < t.inner_end && (s[t.inner_begin] == '-' || s[t.inner_begin] == '+')) {
    (s[t.inner_begin] == '-' ? t.strip_before : t.keep_indent) = true;
    ++t.inner_begin;
  }
  // `+%}` (keep the newline) exists for blocks and comments only; `+}}` is not a sign.
  const bool plus_ok = t.kind != '{';
  if (t.inner_end > t.inner_begin &&
      (s[t.inner_end - 1] == '-' || (plus_ok && s[t.inner_end - 1] == '+'))) {
    (s[t.inner_end - 1] == '-' ? t.strip_after : t.keep_newline) = true;
    --t.inner_end;
  }
  return t;
}

}  // namespace

Lexed split_template(std::string_view raw) {
  Lexed out{normalize_newlines(raw), {}, LineIndex("")};
  const std::string& s = out.source;
  out.lines = LineIndex(s);
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t open = find_tag(s, pos);
    std::string text = s.substr(pos, (open == std::string::npos ? s.size() : open) - pos);
    const bool line_starting = pos == 0 || s[pos - 1] == '\n';
    if (open == std::string::npos) {
      if (!text.empty()) out.segments.push_back({Segment::Kind::kText, text, pos, {}});
      break;
    }
    const Tag tag = read_tag(s, open, out.lines);
    if (tag.strip_before) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (tag.kind != '{' && !tag.keep_indent) {
      strip_line_indent(text, line_starting);
    }
    if (!text.empty()) out.segments.push_back({Segment::Kind::kText, text, pos, {}});
    if (tag.kind != '#') {
      out.segments.push_back(
          {tag.kind == '{' ? Segment::Kind::kExpression : Segment::Kind::kStatement,
           s.substr(tag.inner_begin, tag.inner_end - tag.inner_begin), tag.inner_begin,
           out.lines.at(open)});
    }
    pos = tag.after;
    if (tag.strip_after) {
      while (pos < s.size() && is_space(s[pos])) ++pos;
    } else if (tag.kind != '{' && !tag.keep_newline && pos < s.size() && s[pos] == '\n') {
      ++pos;  // trim_blocks
    }
  }
  return out;
}

}  // namespace inferd::jinja
