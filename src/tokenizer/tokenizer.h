// Tokenizer: the one object the engine uses to turn text into token ids and back. It owns the
// Vocab, finds special tokens in text, adds BOS/EOS, and delegates plain text to an encoder.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/special_tokens.h"
#include "tokenizer/text_encoder.h"
#include "tokenizer/vocab.h"

namespace inferd::gguf {
class GgufFile;
}

namespace inferd::tokenizer {

class Tokenizer {
 public:
  // Throws inferd::Error naming the metadata key when the file's tokenizer is unusable or of
  // a kind we do not implement (tokenizer.ggml.model "gpt2", byte-level BPE, and "llama",
  // SentencePiece BPE, are).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& file);
  static std::unique_ptr<Tokenizer> from_vocab(Vocab vocab);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text -> ids. `add_special` adds BOS/EOS as the vocab's flags say; `parse_special` turns
  // special-token texts such as "<|im_start|>" into their ids (off: they are plain text).
  // Any bytes are accepted. Byte-level BPE replaces invalid UTF-8 (with U+FFFD, as the
  // reference does) and leaves out bytes the vocabulary cannot spell; SentencePiece keeps
  // every byte (byte tokens, else the unknown token). See round_trips. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Ids -> bytes, the exact inverse of encode() for valid UTF-8 it can spell. The result can
  // end inside a character; IncrementalDetokenizer makes clean text for streaming.
  // `skip_special_tokens` drops control, unknown and unused tokens (BOS, "<|im_end|>", ...).
  // With a space prefix (SentencePiece), the first id's leading space is dropped, as
  // llama.cpp's common_detokenize does.
  // Throws inferd::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The bytes of one token: a special or user-defined token's text as is, unused ones empty,
  // other tokens decoded. No space is dropped here (streaming shows pieces as they are).
  const std::string& token_piece(int32_t id) const;
  // The longest token_piece(), so streaming buffers can be sized once.
  size_t max_piece_bytes() const { return max_piece_bytes_; }
  // Tokens that skip_special_tokens drops.
  bool is_special(int32_t id) const;
  // True when encode(text, false, false) decodes back to exactly `text`.
  bool round_trips(std::string_view text) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);
  void check_id(int32_t id) const;

  Vocab vocab_;
  std::unique_ptr<TextEncoder> encoder_;
  SpecialTokenSplitter specials_;
  std::vector<std::string> pieces_;  // token_piece() of every id
  std::vector<bool> special_;        // is_special() of every id
  size_t max_piece_bytes_ = 0;
  bool runs_get_space_prefix_ = false;  // the encoder starts every text run with a space
};

}  // namespace inferd::tokenizer
