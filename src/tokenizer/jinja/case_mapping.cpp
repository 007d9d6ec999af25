// Case mapping as Python's str.upper/lower/title/capitalize do it, for the scripts chat
// template text meets: ASCII, Latin-1, Latin Extended-A, Latin Extended Additional
// (Vietnamese), Cyrillic, fullwidth Latin, and the uncased scripts (CJK, kana, Hangul, Arabic,
// Hebrew, Indic, Thai, emoji, punctuation). A code point elsewhere whose case Python might
// change (Greek with its final sigma, Armenian, Georgian, IPA, letterlike symbols, ...) is an
// error rather than a silently different text.
#include <cstdint>
#include <string>

#include "tokenizer/jinja/text.h"
#include "util/error.h"
#include "util/utf8.h"

namespace inferd::jinja {
namespace {

struct Case {
  bool cased = false;  // a letter with case: what title() and islower() look at
  bool upper = false;  // an upper-case letter (the only kind islower() refuses)
  std::u32string to_upper, to_lower, to_title;
};

Case uncased(char32_t c) {
  return {false, false, {c}, {c}, {c}};
}
Case upper_letter(char32_t c, std::u32string lower) {
  return {true, true, {c}, std::move(lower), {c}};
}
Case lower_letter(char32_t c, std::u32string upper) {
  std::u32string title = upper;
  return {true, false, std::move(upper), {c}, std::move(title)};
}
// A pair where the upper-case letter is at `upper_parity` (0 even, 1 odd) and its lower case
// follows it.
Case paired(char32_t c, char32_t upper_parity) {
  return c % 2 == upper_parity ? upper_letter(c, {c + 1}) : lower_letter(c, {c - 1});
}

bool in(char32_t c, char32_t lo, char32_t hi) {
  return c >= lo && c <= hi;
}

// Scripts and symbols without case: Python's case functions leave them as they are.
bool known_uncased(char32_t c) {
  return in(c, 0x0300, 0x036F)
             ? c != 0x0345
             : in(c, 0x0590, 0x109F) || in(c, 0x1100, 0x139F) || in(c, 0x1400, 0x1C7F) ||
                   in(c, 0x2000, 0x206F) || in(c, 0x20A0, 0x20FF) || in(c, 0x2190, 0x245F) ||
                   in(c, 0x2500, 0x2BFF) || in(c, 0x2D30, 0x2DFF) || in(c, 0x2E00, 0xA63F) ||
                   in(c, 0xA800, 0xAB2F) || in(c, 0xABC0, 0xD7FF) || in(c, 0xE000, 0xFAFF) ||
                   in(c, 0xFB50, 0xFEFF) || in(c, 0xFFF0, 0xFFFF) || in(c, 0x1F000, 0x1FBFF) ||
                   in(c, 0x20000, 0x3FFFF) || in(c, 0xE0000, 0xE01EF) || c >= 0xF0000;
}

Case case_of(char32_t c) {
  if (c < 0x80) {
    if (c >= 'A' && c <= 'Z') return upper_letter(c, {c + 32});
    if (c >= 'a' && c <= 'z') return lower_letter(c, {c - 32});
    return uncased(c);
  }
  if (c < 0xC0) return c == 0xB5 ? lower_letter(c, {0x039C}) : uncased(c);  // µ -> Greek Mu
  if (c == 0xD7 || c == 0xF7) return uncased(c);                            // × ÷
  if (c == 0xDF) {                                                          // ß
    Case ss = lower_letter(c, U"SS");
    ss.to_title = U"Ss";
    return ss;
  }
  if (c < 0xDF) return upper_letter(c, {c + 0x20});
  if (c < 0xFF) return lower_letter(c, {c - 0x20});
  if (c == 0xFF) return lower_letter(c, {0x0178});
  if (c < 0x180) {  // Latin Extended-A
    switch (c) {
      case 0x130:
        return upper_letter(c, U"i\u0307");
      case 0x131:
        return lower_letter(c, U"I");
      case 0x138:
        return lower_letter(c, {c});
      case 0x149:
        return lower_letter(c, U"\u02BCN");
      case 0x178:
        return upper_letter(c, {0xFF});
      case 0x17F:
        return lower_letter(c, U"S");
      default:
        break;
    }
    if (c <= 0x137 || in(c, 0x14A, 0x177)) return paired(c, 0);
    return paired(c, 1);  // 0x139-0x148, 0x179-0x17E
  }
  if (in(c, 0x400, 0x40F)) return upper_letter(c, {c + 0x50});
  if (in(c, 0x410, 0x42F)) return upper_letter(c, {c + 0x20});
  if (in(c, 0x430, 0x44F)) return lower_letter(c, {c - 0x20});
  if (in(c, 0x450, 0x45F)) return lower_letter(c, {c - 0x50});
  if (in(c, 0x1E00, 0x1E95) || in(c, 0x1EA0, 0x1EFF)) return paired(c, 0);
  if (c == 0x1E9E) return upper_letter(c, {0xDF});  // ẞ
  if (in(c, 0xFF21, 0xFF3A)) return upper_letter(c, {c + 0x20});
  if (in(c, 0xFF41, 0xFF5A)) return lower_letter(c, {c - 0x20});
  if (known_uncased(c)) return uncased(c);
  fail(
      "chat template: changing the case of U+{:04X} is not supported (only Latin, Cyrillic and "
      "uncased scripts are)",
      static_cast<uint32_t>(c));
}

// UTF-8 -> code points; a stray byte stands for itself (JSON input is valid UTF-8 anyway).
std::u32string decode(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const int extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    if (extra > 0 && i + static_cast<size_t>(extra) >= s.size()) {
      out += lead;
      ++i;
      continue;
    }
    char32_t cp = extra == 0 ? lead : lead & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  for (const char32_t cp : s) append_utf8(out, cp);
  return out;
}

enum class Mode { kUpper, kLower, kTitle };

std::u32string mapped(char32_t c, Mode mode) {
  Case k = case_of(c);
  return mode == Mode::kUpper ? k.to_upper : mode == Mode::kLower ? k.to_lower : k.to_title;
}

std::string map_all(const std::string& s, Mode mode) {
  std::u32string out;
  for (const char32_t c : decode(s)) out += mapped(c, mode);
  return encode(out);
}

bool is_jinja_separator(char32_t c) {
  return c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

}  // namespace

std::string to_upper(const std::string& s) {
  return map_all(s, Mode::kUpper);
}

std::string to_lower(const std::string& s) {
  return map_all(s, Mode::kLower);
}

// Python 3.8+: the first character in title case, the rest in lower case.
std::string capitalize(const std::string& s) {
  const std::u32string chars = decode(s);
  std::u32string out;
  for (size_t i = 0; i < chars.size(); ++i)
    out += mapped(chars[i], i == 0 ? Mode::kTitle : Mode::kLower);
  return encode(out);
}

// Python's str.title(): a character after a cased one is lowered, any other title-cased.
std::string title(const std::string& s) {
  std::u32string out;
  bool previous_cased = false;
  for (const char32_t c : decode(s)) {
    out += mapped(c, previous_cased ? Mode::kLower : Mode::kTitle);
    previous_cased = case_of(c).cased;
  }
  return encode(out);
}

// jinja2's title filter: splits at runs of whitespace, '-', '(', '{', '[' and '<' and writes
// each piece as piece[0].upper() + piece[1:].lower().
std::string jinja_title(const std::string& s) {
  const std::u32string chars = decode(s);
  std::u32string out;
  bool piece_start = true;
  for (const char32_t c : chars) {
    const std::string one = encode(std::u32string(1, c));
    const bool separator = is_jinja_separator(c) || whitespace_length(one, 0) > 0;
    if (separator) {
      // A run of separators is a piece of its own; upper() and lower() leave it alone.
      out += c;
      piece_start = true;
      continue;
    }
    out += mapped(c, piece_start ? Mode::kUpper : Mode::kLower);
    piece_start = false;
  }
  return encode(out);
}

bool is_cased(const std::string& s, bool lower) {
  bool any = false;
  for (const char32_t c : decode(s)) {
    const Case k = case_of(c);
    if (!k.cased) continue;
    if (k.upper == lower) return false;
    any = true;
  }
  return any;
}

}  // namespace inferd::jinja
