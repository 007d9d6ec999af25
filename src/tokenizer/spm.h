// SentencePieceBpe: the SentencePiece-style encoder (tokenizer.ggml.model = "llama"). Spaces
// become U+2581, characters merge into the best-scoring tokens, leftovers become byte tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/text_encoder.h"
#include "tokenizer/vocab.h"

namespace inferd::tokenizer {

// U+2581 LOWER ONE EIGHTH BLOCK, which SentencePiece vocabularies write for a space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Appends `text` with each space written as U+2581.
void append_spm_escaped(std::string& out, std::string_view text);
// A token's text with each U+2581 as the space it stands for.
std::string unescape_spm_spaces(std::string_view text);

class SentencePieceBpe final : public TextEncoder {
 public:
  // `vocab` must outlive the encoder. Throws inferd::Error for a score that is not a number
  // (merging compares scores, so a NaN would make the order undefined).
  explicit SentencePieceBpe(const Vocab& vocab);

  // Every run of plain text handed here starts the text or follows a special token (runs
  // never touch each other), so each one gets the space prefix when the vocab asks for it.
  // Bytes are taken as they are, valid UTF-8 or not, as the reference does.
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string token_bytes(int32_t id) const override;
  // True when the pieces of encode(text) spell `text`, not counting the space prefix.
  bool round_trips(std::string_view text) const override;

  // Token lookup by text for the merge loop: open addressing over string_views, so that
  // looking up the join of two adjacent symbols needs no allocation.
  class Index {
   public:
    struct Entry {
      int32_t id;
      float score;
    };
    explicit Index(const Vocab& vocab);
    // The token spelt exactly `text`, or nullptr.
    const Entry* find(std::string_view text) const;
    size_t max_length() const { return max_length_; }

   private:
    // A text's first seven bytes and its length (at most 255) in one word: for most tokens
    // the slot alone decides, without touching the arena. Never 0, which marks a free slot.
    static uint64_t key_of(std::string_view text);
    static uint64_t hash_of(std::string_view text, uint64_t key);

    struct Slot {
      uint64_t key = 0;
      Entry entry{kNoToken, 0.0f};
    };
    struct Span {
      uint32_t offset;  // of the text in arena_
      uint32_t length;
    };
    std::vector<Slot> slots_;  // power-of-two size, at most half full
    std::vector<Span> spans_;  // by token id; read only for texts longer than the key holds
    std::string arena_;        // every token text, back to back
    size_t max_length_ = 0;
  };

  struct Scratch;  // per-call working memory, so that encode() shares no mutable state

 private:
  void split_characters(Scratch& s) const;
  void merge(Scratch& s) const;
  void emit(const Scratch& s, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  Index index_;
  bool add_space_prefix_;
  // Token of each byte for text no token covers: "<0xAB>", else the byte as a one-byte
  // token, else the unknown token, else kNoToken (the byte is left out).
  std::array<int32_t, 256> byte_tokens_{};
  std::array<bool, 256> byte_round_trips_{};  // byte_tokens_[b] decodes to exactly b
  bool prefix_round_trips_ = true;            // no prefix, or "▁" is a normal token
};

}  // namespace inferd::tokenizer
