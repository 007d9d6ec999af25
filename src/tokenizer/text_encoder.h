// TextEncoder: the model-specific half of a tokenizer (byte-level BPE, SentencePiece BPE).
// It turns plain text into ids and ids back into bytes; special tokens are not its job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::tokenizer {

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // Appends the ids of `text`, which holds no special tokens. Any bytes are accepted, valid
  // UTF-8 or not. Must be safe to call from several threads at once.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  // The bytes that a normal or byte token stands for.
  virtual std::string token_bytes(int32_t id) const = 0;
  // True when the token_bytes() of encode(text) spell exactly `text` (a space prefix that
  // the encoder adds by design aside). Decided from the text, without encoding it.
  virtual bool round_trips(std::string_view text) const = 0;
};

}  // namespace inferd::tokenizer
