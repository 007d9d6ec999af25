#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace inferd::tokenizer {
namespace {

// The C locale's isspace(), without its locale and signed-char pitfalls.
bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    TokenType t = vocab.type(id);
    bool user = t == TokenType::kUserDefined;
    if ((user || vocab.is_control(id)) && !vocab.text(id).empty()) {
      candidates_.push_back({id, vocab.text(id), user, vocab.strips_right(id)});
      has_user_defined_ = has_user_defined_ || user;
    }
  }
  std::stable_sort(
      candidates_.begin(), candidates_.end(),
      [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
  trie_.emplace_back();
  for (size_t c = 0; c < candidates_.size(); ++c) add_to_trie(static_cast<int32_t>(c));
}

void SpecialTokenSplitter::add_to_trie(int32_t candidate) {
  int32_t node = 0;
  for (char ch : candidates_[candidate].text) {
    auto byte = static_cast<unsigned char>(ch);
    auto& kids = trie_[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
    if (it != kids.end() && it->first == byte) {
      node = it->second;
      continue;
    }
    auto child = static_cast<int32_t>(trie_.size());
    kids.insert(it, {byte, child});  // `kids` is not used after trie_ grows
    trie_.emplace_back();
    node = child;
  }
  trie_[node].candidate = candidate;
}

// Indices (in priority order) of the candidates that occur somewhere in `text`. Only these
// can split anything, and there are rarely more than a handful.
std::vector<int32_t> SpecialTokenSplitter::candidates_in(std::string_view text,
                                                         bool parse_special) const {
  std::vector<int32_t> found;
  for (size_t start = 0; start < text.size(); ++start) {
    int32_t node = 0;
    for (size_t i = start; i < text.size(); ++i) {
      const auto& kids = trie_[node].children;
      auto byte = static_cast<unsigned char>(text[i]);
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
      if (it == kids.end() || it->first != byte) break;
      node = it->second;
      int32_t c = trie_[node].candidate;
      if (c >= 0 && (parse_special || candidates_[c].user_defined)) found.push_back(c);
    }
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

std::vector<TextSegment> SpecialTokenSplitter::split(std::string_view text,
                                                     bool parse_special) const {
  std::vector<TextSegment> segments;
  if (text.empty()) return segments;
  segments.push_back({text, kNoToken});
  if (!parse_special && !has_user_defined_) return segments;
  std::vector<TextSegment> next;
  for (int32_t c : candidates_in(text, parse_special)) {
    const Candidate& cand = candidates_[c];
    next.clear();
    for (const TextSegment& seg : segments) {
      if (seg.token != kNoToken) {
        next.push_back(seg);
        continue;
      }
      std::string_view rest = seg.text;
      for (size_t at = rest.find(cand.text); at != std::string_view::npos;
           at = rest.find(cand.text)) {
        if (at > 0) next.push_back({rest.substr(0, at), kNoToken});
        next.push_back({rest.substr(at, cand.text.size()), cand.id});
        rest.remove_prefix(at + cand.text.size());
        if (cand.strips_right) {
          while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
        }
      }
      if (!rest.empty()) next.push_back({rest, kNoToken});
    }
    segments.swap(next);
  }
  return segments;
}

}  // namespace inferd::tokenizer
