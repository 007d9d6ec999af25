// ByteLevelBpe: the GPT-2 style encoder. Text is pre-tokenized into words, each word's bytes
// become alphabet symbols, and adjacent symbols merge by rank until no merge applies.
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
  void merge_short_word(std::string_view word, PairCache& pairs, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  std::array<int32_t, 256> byte_tokens_{};  // token of each single byte, or kNoToken
  std::unique_ptr<TokenIndex> tokens_;      // only when the pre-tokenizer ignores merges
};

}  // namespace inferd::tokenizer
