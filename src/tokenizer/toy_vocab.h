// Small byte-level BPE vocabularies made from readable parts, for tests and fuzzing: ids and
// merges are spelt with raw bytes and converted to the GPT-2 alphabet here.
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

}  // namespace inferd::tokenizer
