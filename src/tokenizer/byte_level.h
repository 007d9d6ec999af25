// The GPT-2 byte-level alphabet: every byte is shown as one printable code point, so that a
// byte-level BPE vocabulary can spell any byte string ("Ġ" is the space byte 0x20).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace inferd::tokenizer {

// UTF-8 of the code point that stands for `byte` in token texts.
std::string_view byte_level_char(uint8_t byte);

// The byte a code point stands for, or -1 if it is not part of the alphabet.
int byte_level_byte(char32_t code_point);

// Spells raw bytes in the alphabet: "a b" -> "aĠb".
std::string byte_level_encode(std::string_view bytes);

// The bytes a token text stands for. Characters outside the alphabet (never produced by the
// encoder, but possible in hand-made vocabularies) are kept as their own UTF-8 bytes.
std::string byte_level_decode(std::string_view text);

}  // namespace inferd::tokenizer
