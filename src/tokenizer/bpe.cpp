#include "tokenizer/bpe.h"

#include <cctype>
#include <cstdlib>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8_scan.h"
#include "util/utf8.h"

namespace inferd::tokenizer {
namespace {

constexpr int32_t kMerged = -2;  // symbol absorbed into its left neighbour

// A merge that may apply between symbol `left` and its right neighbour. It is checked when
// popped: if either symbol changed since, the candidate is stale and dropped.
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
  // Lowest rank first; among equal ranks the leftmost pair, as the reference does.
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

struct ByteLevelBpe::Scratch {
  std::vector<int32_t> ids;   // token of each symbol, kMerged once absorbed
  std::vector<int32_t> prev;  // linked list over the live symbols
  std::vector<int32_t> next;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
};

ByteLevelBpe::ByteLevelBpe(const Vocab& vocab)
    : vocab_(vocab), pre_(PreTokenizer::create(vocab.pre())) {
  for (int b = 0; b < 256; ++b) {
    byte_tokens_[b] = vocab.find(byte_level_char(static_cast<uint8_t>(b)));
  }
}

bool ByteLevelBpe::round_trips(std::string_view text) const {
  size_t pos = 0;
  while (pos < text.size()) {
    Utf8Unit unit = scan_utf8(text, pos);
    if (unit.kind != Utf8Unit::Kind::kValid) return false;
    for (size_t k = 0; k < unit.length; ++k) {
      if (byte_tokens_[static_cast<uint8_t>(text[pos + k])] == kNoToken) return false;
    }
    pos += unit.length;
  }
  return true;
}

void ByteLevelBpe::encode(std::string_view text, std::vector<int32_t>& out) const {
  // Almost all input is valid UTF-8 and is used in place; anything else is decoded the way
  // the reference decodes it, which is what the pre-tokenizer expects.
  std::string cleaned;
  if (!is_valid_utf8(text)) {
    cleaned = lenient_utf8(text);
    text = cleaned;
  }
  Scratch scratch;
  for (std::string_view word : pre_->split(text)) encode_word(word, scratch, out);
}

void ByteLevelBpe::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (pre_->ignore_merges()) {
    if (int32_t id = vocab_.find(byte_level_encode(word)); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  s.ids.resize(n);
  s.prev.resize(n);
  s.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.ids[i] = byte_tokens_[static_cast<uint8_t>(word[i])];
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto propose = [&](int32_t left) {
    if (left < 0 || s.next[left] < 0) return;
    int32_t right_id = s.ids[s.next[left]];
    if (const Vocab::Merge* m = vocab_.find_merge(s.ids[left], right_id)) {
      s.queue.push({m->rank, left, s.ids[left], right_id, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) propose(i);
  while (!s.queue.empty()) {
    Candidate c = s.queue.top();
    s.queue.pop();
    int32_t right = s.next[c.left];
    if (s.ids[c.left] != c.left_id || right < 0 || s.ids[right] != c.right_id) continue;
    s.ids[c.left] = c.result;
    s.ids[right] = kMerged;
    s.next[c.left] = s.next[right];
    if (s.next[right] >= 0) s.prev[s.next[right]] = c.left;
    propose(s.prev[c.left]);
    propose(c.left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = s.next[i]) {
    if (s.ids[i] >= 0) out.push_back(s.ids[i]);  // a byte without a token never merged
  }
}

std::string ByteLevelBpe::token_bytes(int32_t id) const {
  const std::string& text = vocab_.text(id);
  if (vocab_.type(id) == TokenType::kByte && text.size() == 6 && text.starts_with("<0x") &&
      text.back() == '>') {
    // Byte tokens spelt "<0xAB>" (SentencePiece style) stand for that byte.
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
    if (hex(text[3]) && hex(text[4])) {
      return std::string(1, static_cast<char>(std::strtol(text.substr(3, 2).c_str(), nullptr, 16)));
    }
  }
  return byte_level_decode(text);
}

}  // namespace inferd::tokenizer
