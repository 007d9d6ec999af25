// Small vocabularies made from readable parts, for tests and fuzzing: byte-level BPE ones
// (ids and merges spelt with raw bytes, converted to the GPT-2 alphabet) and SentencePiece ones.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace inferd::tokenizer {

struct ToyVocabSpec {
  std::string pre = "gpt-2";
  std::vector<std::string> control{};       // control tokens; "<s>" and "</s>" become BOS/EOS
  std::vector<std::string> user_defined{};  // user-defined tokens
  // Merges in rank order, as raw bytes: {"h", "e"} makes the token "he".
  std::vector<std::pair<std::string, std::string>> merges{};
  std::vector<unsigned char> missing_bytes{};  // bytes to leave out of the alphabet
  std::optional<bool> add_bos{};
  std::optional<bool> add_eos{};
};

// Ids: control tokens first, then the 256 single bytes (less the missing ones) in byte
// order, then one token per merge, then user-defined tokens.
VocabData make_toy_vocab(const ToyVocabSpec& spec);

struct ToySpmSpec {
  // Normal tokens with their scores, spelt as in the vocabulary ("▁the" for " the").
  std::vector<std::pair<std::string, float>> pieces{};
  std::vector<std::string> user_defined{};
  std::vector<std::string> control{};  // besides <s> and </s>
  bool byte_tokens = true;             // <0x00> .. <0xFF>
  bool unknown_token = true;           // <unk>
  std::optional<bool> add_space_prefix{};
};

// A tokenizer.ggml.model = "llama" vocabulary. Ids: <unk> (if any), <s> (BOS), </s> (EOS),
// then the other control tokens, the byte tokens, the pieces, the user-defined tokens.
VocabData make_toy_spm_vocab(const ToySpmSpec& spec);

}  // namespace inferd::tokenizer
