#include "engine/bad_words.h"

#include <algorithm>
#include <limits>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace inferd::engine {

std::vector<std::vector<int32_t>> bad_word_sequences(const tokenizer::Tokenizer& tokenizer,
                                                     const std::vector<std::string>& words) {
  if (words.size() > kMaxBadWords)
    fail("bad_words: at most {} words, got {}", kMaxBadWords, words.size());
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    // (Python's lstrip(), as vLLM strips the word: any leading whitespace.)
    const size_t start = word.find_first_not_of(" \t\n\r\f\v");
    const std::string bare = start == std::string::npos ? std::string() : word.substr(start);
    if (bare.empty()) fail("bad_words: a word is empty");
    std::vector<int32_t> alone = tokenizer.encode(bare, false, false);
    std::vector<int32_t> inside = tokenizer.encode(" " + bare, false, false);
    if (alone.empty()) fail("bad_words: '{}' has no tokens", word);
    const bool another = !inside.empty() && inside.size() == alone.size() && inside[0] != alone[0];
    out.push_back(std::move(alone));
    if (another) out.push_back(std::move(inside));
  }
  return out;
}

void ban_bad_words(std::span<const std::vector<int32_t>> sequences, std::span<const int32_t> output,
                   std::span<float> logits) {
  for (const std::vector<int32_t>& seq : sequences) {
    if (seq.empty()) continue;
    const size_t before = seq.size() - 1;
    if (before > output.size()) continue;
    if (!std::equal(seq.begin(), seq.end() - 1, output.end() - static_cast<std::ptrdiff_t>(before)))
      continue;
    const auto last = static_cast<size_t>(seq.back());
    if (last < logits.size()) logits[last] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace inferd::engine
