#include "tokenizer/spm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "util/error.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace inferd::tokenizer {
namespace {

// Bytes in the character a byte starts, judged from its high four bits only. This is how the
// reference cuts text into characters: a stray continuation byte is a character of its own,
// and a lead byte takes the next bytes along whether or not they continue it.
constexpr std::array<uint8_t, 16> kCharLength = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

constexpr int32_t kNotLookedUp = -2;  // a single character whose token is not known yet
constexpr size_t kKeyBytes = 7;       // leading text bytes in an Index key

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Token texts are short, so eight bytes at a time with one mix each is plenty.
uint64_t hash_text(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    h = mix(h ^ word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix(h ^ tail);
}

// memcmp for the short texts of tokens; the library call costs more than the compare.
bool same_bytes(const char* a, const char* b, size_t n) {
  for (; n >= 8; n -= 8, a += 8, b += 8) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
    if (x != y) return false;
  }
  for (; n > 0; --n, ++a, ++b) {
    if (*a != *b) return false;
  }
  return true;
}

// The byte a "<0xAB>" text stands for, or -1 for any other text.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text.back() != '>') return -1;
  int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string byte_token_text(uint8_t byte) {
  constexpr std::string_view kHex = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

// One symbol of the text being merged: a character at first, a token once merged. Symbols
// form a linked list; a merge grows the left one and empties the right one.
struct Symbol {
  int32_t start;   // into the escaped text
  int32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
  int32_t id;  // the token the symbol spells, or kNotLookedUp
};

// Symbol `left` may merge with its right neighbour `right` into token `id`. Symbols only
// grow, so the candidate still holds exactly when both have the lengths it was made with.
struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  int32_t length;  // of the merged text
  int32_t id;
};

// Heap order: the highest score on top; among equal scores the leftmost pair, as in the
// reference.
struct Lower {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

struct SentencePieceBpe::Scratch {
  std::string text;  // the run with spaces escaped (and the prefix)
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

uint64_t SentencePieceBpe::Index::key_of(std::string_view text) {
  uint64_t key = std::min<uint64_t>(text.size(), 255) << 56;
  const size_t n = std::min(text.size(), kKeyBytes);
  for (size_t i = 0; i < n; ++i) key |= uint64_t{static_cast<uint8_t>(text[i])} << (8 * i);
  return key;
}

// A short text is all in its key, so hashing the key is enough.
uint64_t SentencePieceBpe::Index::hash_of(std::string_view text, uint64_t key) {
  return text.size() <= kKeyBytes ? mix(key) : hash_text(text);
}

SentencePieceBpe::Index::Index(const Vocab& vocab) {
  const size_t capacity =
      std::max<size_t>(16, std::bit_ceil(2 * static_cast<size_t>(vocab.size())));
  slots_.resize(capacity);
  spans_.resize(vocab.size());
  const size_t mask = capacity - 1;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& text = vocab.text(id);
    if (text.empty()) continue;  // never the join of two symbols; Vocab indexes none either
    if (arena_.size() + text.size() > std::numeric_limits<uint32_t>::max()) {
      fail("tokenizer.ggml.tokens: the token texts total more than 4 GiB");
    }
    const uint64_t key = key_of(text);
    size_t i = hash_of(text, key) & mask;
    while (slots_[i].key != 0) i = (i + 1) & mask;
    slots_[i] = {key, {id, vocab.score(id)}};
    spans_[id] = {static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(text.size())};
    arena_ += text;
    max_length_ = std::max(max_length_, text.size());
  }
}

const SentencePieceBpe::Index::Entry* SentencePieceBpe::Index::find(std::string_view text) const {
  if (text.empty() || text.size() > max_length_) return nullptr;
  const uint64_t key = key_of(text);
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash_of(text, key) & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.key == 0) return nullptr;
    if (slot.key != key) continue;
    if (text.size() <= kKeyBytes) return &slot.entry;
    const Span span = spans_[slot.entry.id];
    if (span.length == text.size() &&
        same_bytes(arena_.data() + span.offset + kKeyBytes, text.data() + kKeyBytes,
                   text.size() - kKeyBytes)) {
      return &slot.entry;
    }
  }
}

SentencePieceBpe::SentencePieceBpe(const Vocab& vocab)
    : vocab_(vocab), index_(vocab), add_space_prefix_(vocab.add_space_prefix()) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (std::isnan(vocab.score(id))) {
      fail("tokenizer.ggml.scores[{}] is NaN; SentencePiece merging needs comparable scores", id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    const char raw = static_cast<char>(byte);
    int32_t id = vocab.find(byte_token_text(byte));
    if (id == kNoToken) id = vocab.find(std::string_view(&raw, 1));
    if (id == kNoToken) id = vocab.special().unk;
    byte_tokens_[b] = id;
    const TokenType t = id == kNoToken ? TokenType::kUndefined : vocab.type(id);
    byte_round_trips_[b] = (t == TokenType::kNormal || t == TokenType::kByte) &&
                           token_bytes(id) == std::string_view(&raw, 1);
  }
  const int32_t space = vocab.find(kSpmSpace);
  prefix_round_trips_ =
      !add_space_prefix_ || (space != kNoToken && vocab.type(space) == TokenType::kNormal);
}

void SentencePieceBpe::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  Scratch s;
  const auto spaces = static_cast<size_t>(std::count(text.begin(), text.end(), ' '));
  const size_t escaped = text.size() + (spaces + 1) * (kSpmSpace.size() - 1) + 1;
  if (escaped > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("a text run of {} bytes is too long to tokenize", text.size());
  }
  s.text.reserve(escaped);
  if (add_space_prefix_) s.text += kSpmSpace;
  append_spm_escaped(s.text, text);
  split_characters(s);
  merge(s);
  emit(s, out);
}

void SentencePieceBpe::split_characters(Scratch& s) const {
  const auto n = static_cast<int32_t>(s.text.size());
  s.symbols.reserve(s.text.size());
  for (int32_t pos = 0; pos < n;) {
    const auto lead = static_cast<uint8_t>(s.text[pos]);
    const int32_t length = std::min<int32_t>(kCharLength[lead >> 4], n - pos);
    const auto index = static_cast<int32_t>(s.symbols.size());
    s.symbols.push_back({pos, length, index - 1, pos + length < n ? index + 1 : -1, kNotLookedUp});
    pos += length;
  }
}

void SentencePieceBpe::merge(Scratch& s) const {
  const std::string_view text = s.text;
  auto propose = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t length = s.symbols[left].length + s.symbols[right].length;
    if (static_cast<size_t>(length) > index_.max_length()) return;
    const Index::Entry* e = index_.find(text.substr(s.symbols[left].start, length));
    if (e != nullptr) s.heap.push_back({e->score, left, right, length, e->id});
  };
  const auto n = static_cast<int32_t>(s.symbols.size());
  s.heap.reserve(s.symbols.size());
  for (int32_t i = 1; i < n; ++i) propose(i - 1, i);
  std::make_heap(s.heap.begin(), s.heap.end(), Lower{});
  auto push = [&](int32_t left, int32_t right) {
    const size_t before = s.heap.size();
    propose(left, right);
    if (s.heap.size() != before) std::push_heap(s.heap.begin(), s.heap.end(), Lower{});
  };
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), Lower{});
    const Candidate c = s.heap.back();
    s.heap.pop_back();
    Symbol& left = s.symbols[c.left];
    Symbol& right = s.symbols[c.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) {
      continue;  // one side changed since the candidate was made
    }
    left.length = c.length;
    left.id = c.id;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) s.symbols[right.next].prev = c.left;
    push(left.prev, c.left);
    push(c.left, left.next);
  }
}

void SentencePieceBpe::emit(const Scratch& s, std::vector<int32_t>& out) const {
  const std::string_view text = s.text;
  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
    const Symbol& sym = s.symbols[i];
    int32_t id = sym.id;
    if (id == kNotLookedUp) {
      const Index::Entry* e = index_.find(text.substr(sym.start, sym.length));
      id = e != nullptr ? e->id : kNoToken;
    }
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // Merged symbols are always tokens, so this is one character the vocabulary lacks.
    for (int32_t k = 0; k < sym.length; ++k) {
      const int32_t byte = byte_tokens_[static_cast<uint8_t>(text[sym.start + k])];
      if (byte != kNoToken) out.push_back(byte);
    }
  }
}

std::string SentencePieceBpe::token_bytes(int32_t id) const {
  const std::string& text = vocab_.text(id);
  if (vocab_.type(id) == TokenType::kByte) {
    if (int byte = parse_byte_token(text); byte >= 0)
      return std::string(1, static_cast<char>(byte));
  }
  return unescape_spm_spaces(text);
}

void append_spm_escaped(std::string& out, std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t space = std::min(text.find(' ', pos), text.size());
    out.append(text, pos, space - pos);
    if (space == text.size()) break;
    out += kSpmSpace;
    pos = space + 1;
  }
}

std::string unescape_spm_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t mark = std::min(text.find(kSpmSpace, pos), text.size());
    out.append(text, pos, mark - pos);
    if (mark == text.size()) break;
    out += ' ';
    pos = mark + kSpmSpace.size();
  }
  return out;
}

bool SentencePieceBpe::round_trips(std::string_view text) const {
  // A written U+2581 comes back as a space, and invalid UTF-8 can swallow part of an
  // escaped space into a byte fallback; the rest holds when every byte has a byte token.
  if (!prefix_round_trips_ || !is_valid_utf8(text)) return false;
  if (text.find(kSpmSpace) != std::string_view::npos) return false;
  return std::all_of(text.begin(), text.end(),
                     [this](char c) { return byte_round_trips_[static_cast<uint8_t>(c)]; });
}

}  // namespace inferd::tokenizer
