// One hexadecimal digit's value, as escapes in URLs and vocabularies write them.
#pragma once

namespace inferd {

// 0-15, or -1 for a character that is not a hex digit.
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace inferd
