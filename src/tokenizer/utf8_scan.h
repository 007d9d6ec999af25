// Step-by-step UTF-8 scanning for the tokenizer: one code point, one invalid run or one cut-off
// sequence at a time, and the U+FFFD substitution policy shared by encoder and detokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/utf8.h"  // append_utf8

namespace inferd::tokenizer {

inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

struct Utf8Unit {
  enum class Kind {
    kValid,      // a well-formed code point of `length` bytes
    kInvalid,    // `length` bytes that can never become a code point (a maximal subpart)
    kTruncated,  // the text ends inside a sequence that is well-formed so far
  };
  Kind kind = Kind::kValid;
  size_t length = 0;
  char32_t code_point = 0;  // only for kValid
};

// Reads the unit that starts at `pos` (< text.size()). Invalid input is split into "maximal
// subparts" as Unicode recommends, so "\xE4\xB8A" yields one invalid unit then 'A'.
Utf8Unit scan_utf8(std::string_view text, size_t pos);

// `text` with every invalid or cut-off unit replaced by U+FFFD; the result is valid UTF-8.
std::string sanitize_utf8(std::string_view text);

// `text` decoded the way the reference tokenizer decodes it before pre-tokenizing, and encoded
// again. A lead byte followed by enough bytes of the form 10xxxxxx is one code point even when
// the form is overlong (it comes back in its shortest form: "\xC1\x81" is "A") or a surrogate
// (kept as its three bytes); every other byte becomes one U+FFFD. Code points above U+10FFFF,
// which the reference cannot encode again, give one U+FFFD per byte. Valid UTF-8 is unchanged.
std::string lenient_utf8(std::string_view text);

}  // namespace inferd::tokenizer
