// String helpers with Python's whitespace set (str.isspace), so `trim` removes the same
// characters from message text as jinja2 does, no-break and ideographic spaces included.
#include "tokenizer/jinja/text.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/lexer.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

// Byte length of the whitespace character at s[i], or 0 when there is none.
size_t space_at(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xC2 && (byte(1) == 0x85 || byte(1) == 0xA0)) return 2;
  if (c == 0xE1 && byte(1) == 0x9A && byte(2) == 0x80) return 3;  // U+1680
  if (c == 0xE2 && byte(1) == 0x80 &&
      ((byte(2) >= 0x80 && byte(2) <= 0x8A) || byte(2) == 0xA8 || byte(2) == 0xA9 ||
       byte(2) == 0xAF))
    return 3;  // U+2000-200A, U+2028, U+2029, U+202F
  if (c == 0xE2 && byte(1) == 0x81 && byte(2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Byte length of the whitespace character that ends at s[end-1], or 0.
size_t space_before(const std::string& s, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len) {
    if (space_at(s, end - len) == len) return len;
  }
  return 0;
}

size_t char_len(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(len, s.size() - i);
}

}  // namespace

size_t whitespace_length(const std::string& s, size_t i) {
  return i < s.size() ? space_at(s, i) : 0;
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (chars.empty()) {
    while (left && begin < end && space_at(s, begin) > 0) begin += space_at(s, begin);
    while (right && end > begin && space_before(s, end) > 0) end -= space_before(s, end);
  } else {
    // Characters to strip are matched whole, so multi-byte ones work too.
    auto member = [&](size_t at, size_t len) {
      for (size_t i = 0; i < chars.size(); i += char_len(chars, i)) {
        if (char_len(chars, i) == len && chars.compare(i, len, s, at, len) == 0) return true;
      }
      return false;
    };
    while (left && begin < end && member(begin, char_len(s, begin))) begin += char_len(s, begin);
    while (right && end > begin) {
      size_t len = 1;
      while (len < end - begin && len < 4 &&
             (static_cast<unsigned char>(s[end - len]) & 0xC0) == 0x80)
        ++len;
      if (!member(end - len, len)) break;
      end -= len;
    }
  }
  return s.substr(begin, end - begin);
}

std::vector<std::string> split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep.empty()) {
    size_t start = 0;
    for (size_t pos; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                     (pos = s.find(sep, start)) != std::string::npos;
         start = pos + sep.size()) {
      out.push_back(s.substr(start, pos - start));
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size() && space_at(s, i) > 0) i += space_at(s, i);
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(strip(s.substr(i), "", false, true));
      break;
    }
    const size_t start = i;
    while (i < s.size() && space_at(s, i) == 0) ++i;
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<std::string> rsplit(const std::string& s, const std::string& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, -1);  // without a limit both directions agree
  std::vector<std::string> out;
  size_t end = s.size();
  if (!sep.empty()) {
    while (static_cast<int64_t>(out.size()) < maxsplit && end >= sep.size()) {
      const size_t pos = s.rfind(sep, end - sep.size());
      if (pos == std::string::npos) break;
      out.push_back(s.substr(pos + sep.size(), end - pos - sep.size()));
      end = pos;
    }
    out.push_back(s.substr(0, end));
  } else {
    while (true) {
      while (end > 0 && space_before(s, end) > 0) end -= space_before(s, end);
      if (end == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(s.substr(0, end));  // the rest keeps its leading whitespace
        break;
      }
      size_t start = end;
      while (start > 0 && space_before(s, start) == 0) --start;
      out.push_back(s.substr(start, end - start));
      end = start;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count, size_t max_size) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    for (; pos < s.size() && (count < 0 || done < count); ++done) {
      out += to;
      out.append(s, pos, char_len(s, pos));
      pos += char_len(s, pos);
      if (out.size() > max_size) fail("chat template: replace() exceeds the size limit");
    }
    if (pos == s.size() && (count < 0 || done < count)) out += to;
    return out + s.substr(pos);
  }
  for (size_t hit; (count < 0 || done < count) && (hit = s.find(from, pos)) != std::string::npos;
       ++done) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    if (out.size() > max_size) fail("chat template: replace() exceeds the size limit");
  }
  return out + s.substr(pos);
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  while (i < s.size()) {
    const unsigned char c = byte(i);
    size_t len = 0;
    if (c == '\r' && byte(i + 1) == '\n') {
      len = 2;
    } else if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e)) {
      len = 1;
    } else if (c == 0xC2 && byte(i + 1) == 0x85) {
      len = 2;
    } else if (c == 0xE2 && byte(i + 1) == 0x80 && (byte(i + 2) == 0xA8 || byte(i + 2) == 0xA9)) {
      len = 3;
    }
    if (len == 0) {
      ++i;
      continue;
    }
    out.push_back(s.substr(start, i - start));
    i += len;
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

int64_t word_count(const std::string& s) {
  int64_t words = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    if (c >= 0x80) fail("chat template: wordcount of non-ASCII text is not supported");
    const bool word = std::isalnum(c) || c == '_';
    if (word && !in_word) ++words;
    in_word = word;
  }
  return words;
}

}  // namespace inferd::jinja
