// vLLM's bad_words: words the output must not contain. Each word becomes one or two token
// sequences (bad_word_sequences), and a sequence's last token is never sampled where the output
// so far ends with the rest of it (ban_bad_words); a one-token word is never sampled at all.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace inferd::tokenizer {
class Tokenizer;
}

namespace inferd::engine {

// The most words a request may ban.
constexpr size_t kMaxBadWords = 128;

// As vLLM tokenizes them: the word without its leading whitespace, and again after one space when
// that gives another first token in as many tokens (the word inside a text, where a tokenizer
// that folds the space into the word spells it otherwise). No special tokens are added. Throws
// inferd::Error for an empty word or more than kMaxBadWords.
std::vector<std::vector<int32_t>> bad_word_sequences(const tokenizer::Tokenizer& tokenizer,
                                                     const std::vector<std::string>& words);

// Sets to -inf the logit of each sequence's last token where `output` ends with the sequence's
// other tokens (ids past the logits are ignored).
void ban_bad_words(std::span<const std::vector<int32_t>> sequences, std::span<const int32_t> output,
                   std::span<float> logits);

}  // namespace inferd::engine
