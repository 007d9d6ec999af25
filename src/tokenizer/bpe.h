// ByteLevelBpe: the GPT-2 style encoder. Text is pre-tokenized into words, each word's bytes
// become alphabet symbols, and adjacent symbols merge by rank until no merge applies.
// Gemma 4's BPE (tokenizer.ggml.model = gemma4) is the same merging with SentencePiece's
// spelling: spaces are written U+2581 first, words are whole lines and runs of newlines, a
// word's symbols are its UTF-8 characters, and a character no token spells becomes the byte
// tokens <0xAB> of its bytes.
#pragma once

#include <array>
#include <memory>

#include "tokenizer/pretokenize.h"
#include "tokenizer/text_encoder.h"
#include "tokenizer/vocab.h"

namespace inferd::tokenizer {

class ByteLevelBpe final : public TextEncoder {
 public:
  // `vocab` must outlive the encoder. Throws inferd::Error for an unknown pre-tokenizer.
  explicit ByteLevelBpe(const Vocab& vocab);
  ~ByteLevelBpe() override;

  // Invalid UTF-8 is decoded as the reference does (lenient_utf8: U+FFFD for each byte that
  // starts no code point; overlong forms and surrogates are taken as code points). Bytes of valid
  // characters that the vocabulary cannot spell (SmolLM2 has no token for 0x04 or for the
  // lead byte 0xF1, say) are left out, as the reference tokenizer does.
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string token_bytes(int32_t id) const override;

  // True when encode() keeps `text` exactly: valid UTF-8 that the vocabulary can spell.
  bool round_trips(std::string_view text) const override;

  struct Scratch;  // per-call working memory, so that encode() shares no mutable state

 private:
  class TokenIndex;
  class PairCache;

  void encode_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;
  // Gemma 4's words: symbols are characters, with byte tokens for the unspelt ones.
  void encode_escaped_word(std::string_view word, Scratch& scratch,
                           std::vector<int32_t>& out) const;
  // Merges the symbols scratch.ids[0, n) by rank; the merged ones follow scratch.next from 0.
  void merge_symbols(Scratch& scratch, int32_t n) const;
  void merge_short_word(std::string_view word, PairCache& pairs, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  std::array<int32_t, 256> byte_tokens_{};  // token of each single byte, or kNoToken
  bool escaped_ = false;                     // Gemma 4's spelling (above)
  std::array<int32_t, 256> hex_byte_tokens_{};  // Gemma 4: the token <0xAB> of each byte
  std::unique_ptr<TokenIndex> tokens_;      // only when the pre-tokenizer ignores merges
};

}  // namespace inferd::tokenizer
