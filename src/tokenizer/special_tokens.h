// SpecialTokenSplitter: finds special tokens (control, user-defined, unknown) written out in
// text, so "<|im_start|>user" becomes one token id followed by plain text for the encoder.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace inferd::tokenizer {

// A run of plain text (token == kNoToken) or one special token found in the text.
struct TextSegment {
  std::string_view text;
  int32_t token = kNoToken;
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Splits `text` in order. Longer special tokens are taken first everywhere, then shorter
  // ones in the text that is left, each at every non-overlapping place from the left; this
  // is the reference's rule, which differs from a leftmost-longest scan in odd cases.
  // Without `parse_special` only user-defined tokens are taken, as the reference does.
  // Whitespace right after a token that Vocab::strips_right() names is dropped. Text runs in
  // the result never touch each other, and none is empty.
  std::vector<TextSegment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t candidate = -1;  // index into candidates_ of the token ending here
  };
  struct Candidate {
    int32_t id;
    std::string_view text;
    bool user_defined;
    bool strips_right;
  };

  void add_to_trie(int32_t candidate);
  std::vector<int32_t> candidates_in(std::string_view text, bool parse_special) const;

  std::vector<Candidate> candidates_;  // longest text first, then lowest id
  std::vector<Node> trie_;             // lets one pass find which candidates occur at all
  bool has_user_defined_ = false;
};

}  // namespace inferd::tokenizer
