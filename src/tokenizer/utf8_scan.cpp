#include "tokenizer/utf8_scan.h"

#include "util/utf8.h"

namespace inferd::tokenizer {
namespace {

// Allowed range of the second byte; it is narrower than 80..BF for some lead bytes so that
// overlong forms, surrogates and values above U+10FFFF are rejected as early as possible.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return (b & 0xC0) == 0x80;
  }
}

}  // namespace

Utf8Unit scan_utf8(std::string_view text, size_t pos) {
  auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return {Utf8Unit::Kind::kValid, 1, lead};
  const size_t need = utf8_sequence_length(lead);
  if (need == 0) return {Utf8Unit::Kind::kInvalid, 1, 0};
  char32_t cp = lead & (0xFF >> (need + 1));
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= text.size()) return {Utf8Unit::Kind::kTruncated, k, 0};
    auto b = static_cast<unsigned char>(text[pos + k]);
    bool ok = k == 1 ? second_byte_ok(lead, b) : (b & 0xC0) == 0x80;
    if (!ok) return {Utf8Unit::Kind::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Unit::Kind::kValid, need, cp};
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    Utf8Unit unit = scan_utf8(text, pos);
    if (unit.kind == Utf8Unit::Kind::kValid) {
      out.append(text.substr(pos, unit.length));
    } else {
      out.append(kReplacementUtf8);
    }
    pos += unit.length;
  }
  return out;
}

std::string lenient_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  size_t pos = 0;
  while (pos < text.size()) {
    auto lead = static_cast<unsigned char>(text[pos]);
    // The length comes from the lead byte's high bits alone; 10xxxxxx and 11111xxx start
    // nothing. The continuation bytes are checked for their form only.
    size_t need = lead < 0x80   ? 1
                  : lead < 0xC0 ? 0
                  : lead < 0xE0 ? 2
                  : lead < 0xF0 ? 3
                  : lead < 0xF8 ? 4
                                : 0;
    bool ok = need > 0 && pos + need <= text.size();
    char32_t cp = need == 1 ? lead : lead & (0x7F >> need);
    for (size_t k = 1; ok && k < need; ++k) {
      auto b = static_cast<unsigned char>(text[pos + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok && cp <= 0x10FFFF) {
      append_utf8(out, cp);  // surrogates too: three bytes, as the reference writes them
      pos += need;
    } else {
      out.append(kReplacementUtf8);
      ++pos;
    }
  }
  return out;
}

}  // namespace inferd::tokenizer
