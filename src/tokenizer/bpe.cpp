#include "tokenizer/bpe.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <tuple>

#include <fmt/format.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/spm.h"
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

uint64_t hash_bytes(std::string_view s) {
  return XXH3_64bits(s.data(), s.size());
}

size_t table_size(size_t entries) {
  size_t size = 16;
  while (size < entries * 2) size *= 2;  // at most half full, so probe runs stay short
  return size;
}

// Words already encoded in this call, with where their ids stand in the output: text repeats
// its words, and a repeated word then costs one look-up instead of its merges.
class WordCache {
 public:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;  // into the text being encoded; nullptr: empty slot
    uint32_t length = 0;
    uint32_t first = 0;  // ids at out[first, first + count)
    uint32_t count = 0;
  };

  // The slot of `word`: the one that holds it, or the empty one where it would go.
  Slot& find(std::string_view word, uint64_t hash) {
    if (slots_.empty()) slots_.resize(table_size(64));
    size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.data == nullptr || (slot.hash == hash && slot.length == word.size() &&
                                   std::memcmp(slot.data, word.data(), word.size()) == 0)) {
        return slot;
      }
    }
  }

  void insert(Slot& slot, std::string_view word, uint64_t hash, size_t first, size_t count) {
    slot = {hash, word.data(), static_cast<uint32_t>(word.size()), static_cast<uint32_t>(first),
            static_cast<uint32_t>(count)};
    if (++used_ * 2 > slots_.size()) grow();
  }

 private:
  void grow() {
    std::vector<Slot> old(table_size(used_ * 2));
    old.swap(slots_);
    size_t mask = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.data == nullptr) continue;
      size_t i = slot.hash & mask;
      while (slots_[i].data != nullptr) i = (i + 1) & mask;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  size_t used_ = 0;
};

// Words at most this long merge by scanning their pairs for the best one, without a heap.
constexpr size_t kShortWord = 48;

}  // namespace

// Every token whose text is all in the byte-level alphabet, by the bytes it stands for: the
// reference's ignore_merges look-up (is the word's spelling a token?) without spelling it.
class ByteLevelBpe::TokenIndex {
 public:
  explicit TokenIndex(const Vocab& vocab) {
    struct Entry {
      uint32_t offset, length;  // in bytes_
      int32_t id;
    };
    // The alphabet's code points are all below U+0200: one or two UTF-8 bytes each.
    std::array<int16_t, 0x200> byte_of{};
    for (char32_t cp = 0; cp < byte_of.size(); ++cp) {
      byte_of[cp] = static_cast<int16_t>(byte_level_byte(cp));
    }
    std::vector<Entry> entries;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      const std::string& text = vocab.text(id);
      const auto* p = reinterpret_cast<const unsigned char*>(text.data());
      const size_t n = text.size(), start = bytes_.size();
      bool alphabet = n > 0;
      for (size_t pos = 0; alphabet && pos < n;) {
        int b = -1;
        if (p[pos] < 0x80) {
          b = byte_of[p[pos++]];
        } else if (p[pos] >= 0xC2 && p[pos] < 0xC8 && pos + 1 < n && (p[pos + 1] & 0xC0) == 0x80) {
          b = byte_of[(p[pos] & 0x1F) << 6 | (p[pos + 1] & 0x3F)];
          pos += 2;
        }
        alphabet = b >= 0;
        bytes_.push_back(static_cast<char>(b));
      }
      if (alphabet) {
        entries.push_back(
            {static_cast<uint32_t>(start), static_cast<uint32_t>(bytes_.size() - start), id});
      } else {
        bytes_.resize(start);
      }
    }
    slots_.resize(table_size(entries.size()));
    const size_t mask = slots_.size() - 1;
    for (const Entry& e : entries) {
      const uint64_t hash = hash_bytes(std::string_view(bytes_.data() + e.offset, e.length));
      size_t i = hash & mask;
      while (slots_[i].id != kNoToken) i = (i + 1) & mask;
      slots_[i] = {hash, e.offset, e.length, e.id};
    }
  }

  int32_t find(std::string_view bytes) const {
    const uint64_t hash = hash_bytes(bytes);
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask; slots_[i].id != kNoToken; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.hash == hash && slot.length == bytes.size() &&
          std::memcmp(bytes_.data() + slot.offset, bytes.data(), bytes.size()) == 0) {
        return slot.id;
      }
    }
    return kNoToken;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = kNoToken;  // kNoToken: empty slot
  };
  std::string bytes_;  // the bytes of all indexed tokens, one after another
  std::vector<Slot> slots_;
};

// Merge look-ups already made in this call. Adjacent pairs repeat from word to word, and the
// vocabulary's own table is large enough that most of its look-ups miss the cache. Direct
// mapped: a pair that collides just replaces the one there.
class ByteLevelBpe::PairCache {
 public:
  // Sizes the table for a text of `bytes` (a long text meets more distinct pairs); it is
  // allocated on the first look-up, so a text that merges nothing costs nothing.
  void size_for(size_t bytes) {
    bits_ = 8;
    while (bits_ < 14 && (size_t{64} << bits_) < bytes) ++bits_;
  }

  // The rank and result of merging `left` and `right` (rank INT_MAX: they never merge).
  std::pair<int32_t, int32_t> find(const Vocab& vocab, int32_t left, int32_t right) {
    if (entries_.empty()) entries_.resize(size_t{1} << bits_);
    const uint64_t key =
        static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
    Entry& e = entries_[(key * 0x9E3779B97F4A7C15ull) >> (64 - bits_)];
    if (e.key != key) {
      const Vocab::Merge* m = vocab.find_merge(left, right);
      e = {key, m != nullptr ? m->rank : INT_MAX, m != nullptr ? m->result : kNoToken};
    }
    return {e.rank, e.result};
  }

 private:
  struct Entry {
    uint64_t key = ~0ull;  // no pair of token ids has this key
    int32_t rank = INT_MAX;
    int32_t result = kNoToken;
  };
  int bits_ = 8;  // 2^8 to 2^14 entries of 16 bytes
  std::vector<Entry> entries_;
};

struct ByteLevelBpe::Scratch {
  std::vector<std::string_view> words;
  WordCache cache;
  PairCache pairs;
  // Long words: a heap of merge candidates over a linked list of symbols.
  std::vector<int32_t> ids;   // token of each symbol, kMerged once absorbed
  std::vector<int32_t> prev;  // linked list over the live symbols
  std::vector<int32_t> next;
  std::vector<size_t> starts;  // Gemma 4: where each character symbol starts in its word
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
};

namespace {

bool is_gemma4(const Vocab& vocab) { return vocab.model() == "gemma4"; }

// The bytes of a character symbol starting with `lead`, as the reference counts them (a byte
// that starts no sequence is a symbol of its own).
size_t symbol_length(char lead) {
  return std::max<size_t>(1, utf8_sequence_length(static_cast<unsigned char>(lead)));
}

}  // namespace

ByteLevelBpe::ByteLevelBpe(const Vocab& vocab)
    // Gemma 4 has one pre-tokenizer, whatever tokenizer.ggml.pre says (the reference's rule).
    : vocab_(vocab), pre_(PreTokenizer::create(is_gemma4(vocab) ? "gemma4" : vocab.pre())),
      escaped_(is_gemma4(vocab)) {
  for (int b = 0; b < 256; ++b) {
    byte_tokens_[b] = vocab.find(byte_level_char(static_cast<uint8_t>(b)));
    hex_byte_tokens_[b] = vocab.find(fmt::format("<0x{:02X}>", b));
  }
  if (pre_->ignore_merges()) tokens_ = std::make_unique<TokenIndex>(vocab);
}

ByteLevelBpe::~ByteLevelBpe() = default;

bool ByteLevelBpe::round_trips(std::string_view text) const {
  // Gemma 4: a written U+2581 comes back as a space.
  if (escaped_ && text.find(kSpmSpace) != std::string_view::npos) return false;
  size_t pos = 0;
  while (pos < text.size()) {
    Utf8Unit unit = scan_utf8(text, pos);
    if (unit.kind != Utf8Unit::Kind::kValid) return false;
    const std::string_view character = text.substr(pos, unit.length);
    // Gemma 4 spells a character as its token, or else as its bytes' tokens.
    const bool spelt =
        escaped_ && vocab_.find(character == " " ? kSpmSpace : character) != kNoToken;
    for (size_t k = 0; k < unit.length && !spelt; ++k) {
      const auto byte = static_cast<uint8_t>(text[pos + k]);
      if ((escaped_ ? hex_byte_tokens_[byte] : byte_tokens_[byte]) == kNoToken) return false;
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
  std::string escaped;  // Gemma 4's text before merging: each space as U+2581
  if (escaped_) {
    append_spm_escaped(escaped, text);
    text = escaped;
  }
  Scratch scratch;
  scratch.pairs.size_for(text.size());
  pre_->split(text, scratch.words);
  // A short text has few repeats; its words are merged each time.
  const bool cache = scratch.words.size() > 32;
  for (std::string_view word : scratch.words) {
    if (tokens_ != nullptr) {
      if (int32_t id = tokens_->find(word); id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    if (word.size() == 1 && !escaped_) {
      if (int32_t id = byte_tokens_[static_cast<uint8_t>(word[0])]; id != kNoToken) {
        out.push_back(id);
      }
      continue;
    }
    if (!cache) {
      encode_word(word, scratch, out);
      continue;
    }
    const uint64_t hash = hash_bytes(word);
    WordCache::Slot& slot = scratch.cache.find(word, hash);
    const size_t at = out.size();
    if (slot.data != nullptr) {
      out.resize(at + slot.count);
      std::copy_n(out.data() + slot.first, slot.count, out.data() + at);
      continue;
    }
    encode_word(word, scratch, out);
    scratch.cache.insert(slot, word, hash, at, out.size() - at);
  }
}

void ByteLevelBpe::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (escaped_) {
    encode_escaped_word(word, s, out);
    return;
  }
  if (word.size() <= kShortWord) {
    merge_short_word(word, s.pairs, out);
    return;
  }
  const auto n = static_cast<int32_t>(word.size());
  s.ids.resize(n);
  for (int32_t i = 0; i < n; ++i) s.ids[i] = byte_tokens_[static_cast<uint8_t>(word[i])];
  merge_symbols(s, n);
  for (int32_t i = 0; i >= 0 && i < n; i = s.next[i]) {
    if (s.ids[i] >= 0) out.push_back(s.ids[i]);  // a byte without a token never merged
  }
}

void ByteLevelBpe::encode_escaped_word(std::string_view word, Scratch& s,
                                       std::vector<int32_t>& out) const {
  // A run of newlines that is a token is taken whole (the reference's rule for Gemma 4).
  if (word.find_first_not_of('\n') == std::string_view::npos) {
    if (const int32_t id = vocab_.find(word); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  s.ids.clear();
  s.starts.clear();
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = std::min(word.size() - pos, symbol_length(word[pos]));
    s.starts.push_back(pos);
    s.ids.push_back(vocab_.find(word.substr(pos, length)));
    pos += length;
  }
  s.starts.push_back(word.size());
  const auto n = static_cast<int32_t>(s.ids.size());
  merge_symbols(s, n);
  for (int32_t i = 0; i >= 0 && i < n; i = s.next[i]) {
    if (s.ids[i] >= 0) {
      out.push_back(s.ids[i]);
      continue;
    }
    // A character no token spells never merged: its bytes, as byte tokens.
    for (size_t b = s.starts[static_cast<size_t>(i)]; b < s.starts[static_cast<size_t>(i) + 1]; ++b) {
      if (const int32_t id = hex_byte_tokens_[static_cast<uint8_t>(word[b])]; id != kNoToken)
        out.push_back(id);
    }
  }
}

void ByteLevelBpe::merge_symbols(Scratch& s, int32_t n) const {
  s.prev.resize(n);
  s.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto propose = [&](int32_t left) {
    if (left < 0 || s.next[left] < 0) return;
    const int32_t left_id = s.ids[left], right_id = s.ids[s.next[left]];
    if (left_id == kNoToken || right_id == kNoToken) return;
    if (auto [rank, result] = s.pairs.find(vocab_, left_id, right_id); rank != INT_MAX) {
      s.queue.push({rank, left, left_id, right_id, result});
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
}

void ByteLevelBpe::merge_short_word(std::string_view word, PairCache& pairs,
                                    std::vector<int32_t>& out) const {
  // The same merges in the same order as the heap: each round merges the adjacent pair of
  // lowest rank, the leftmost among equals. Per pair we keep its rank and result, and after a
  // merge only the two pairs that touch the new symbol change.
  const int n = static_cast<int>(word.size());
  std::array<int32_t, kShortWord> ids, rank, result, prev, next;
  for (int i = 0; i < n; ++i) {
    ids[i] = byte_tokens_[static_cast<uint8_t>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto look = [&](int i) {
    rank[i] = INT_MAX;
    const int j = next[i];
    if (j < 0 || ids[i] == kNoToken || ids[j] == kNoToken) return;
    std::tie(rank[i], result[i]) = pairs.find(vocab_, ids[i], ids[j]);
  };
  for (int i = 0; i < n; ++i) look(i);
  while (true) {
    int best = -1;
    int32_t best_rank = INT_MAX;
    for (int i = 0; i >= 0; i = next[i]) {  // symbol 0 is never absorbed
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best < 0) break;
    const int right = next[best];
    ids[best] = result[best];
    next[best] = next[right];
    if (next[right] >= 0) prev[next[right]] = best;
    look(best);
    if (prev[best] >= 0) look(prev[best]);
  }
  for (int i = 0; i >= 0; i = next[i]) {
    if (ids[i] != kNoToken) out.push_back(ids[i]);  // a byte without a token never merged
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
  if (escaped_) return unescape_spm_spaces(text);
  return byte_level_decode(text);
}

}  // namespace inferd::tokenizer
