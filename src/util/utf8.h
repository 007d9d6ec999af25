// UTF-8 helpers shared by the GGUF reader and the tokenizer: validation and sequence length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace inferd {

// Length of the UTF-8 sequence that starts with `lead` (1-4), or 0 if `lead` cannot start one.
size_t utf8_sequence_length(unsigned char lead);

// Byte offset of the first invalid sequence in `text`, or text.size() when all of it is valid
// UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
size_t utf8_valid_prefix(std::string_view text);

inline bool is_valid_utf8(std::string_view text) {
  return utf8_valid_prefix(text) == text.size();
}

// Appends code point `cp` (at most U+10FFFF) as UTF-8.
void append_utf8(std::string& out, char32_t cp);

}  // namespace inferd
