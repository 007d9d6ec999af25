#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8_scan.h"

namespace inferd::tokenizer {
namespace {

// Bytes that are printable Latin-1 characters stand for themselves; the other 68 bytes are
// given the code points 256, 257, ... in byte order. This is the published GPT-2 scheme.
bool is_printable_latin1(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its code point
  std::array<int16_t, 512> bytes{};    // code point -> byte, -1 when unused
  Tables() {
    bytes.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = is_printable_latin1(b) ? static_cast<char32_t>(b) : next++;
      append_utf8(chars[b], cp);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

std::string_view byte_level_char(uint8_t byte) {
  return tables().chars[byte];
}

int byte_level_byte(char32_t code_point) {
  return code_point < 512 ? tables().bytes[code_point] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    Utf8Unit unit = scan_utf8(text, pos);
    int b = unit.kind == Utf8Unit::Kind::kValid ? byte_level_byte(unit.code_point) : -1;
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(pos, unit.length));
    }
    pos += unit.length;
  }
  return out;
}

}  // namespace inferd::tokenizer
