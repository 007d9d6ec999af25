#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8_scan.h"

namespace inferd::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  // Pending holds up to 3 bytes plus a piece; every byte could turn into a 3-byte U+FFFD.
  const size_t most = tokenizer.max_piece_bytes() + 4;
  pending_.reserve(most);
  out_.reserve(3 * most);
}

std::string_view IncrementalDetokenizer::push(int32_t id) {
  const std::string& piece = tokenizer_.token_piece(id);
  out_.clear();
  if (skip_special_ && tokenizer_.is_special(id)) return out_;
  pending_ += piece;
  std::string& out = out_;
  size_t pos = 0;
  while (pos < pending_.size()) {
    Utf8Unit unit = scan_utf8(pending_, pos);
    if (unit.kind == Utf8Unit::Kind::kTruncated) break;  // wait for the next token
    if (unit.kind == Utf8Unit::Kind::kValid) {
      out.append(pending_, pos, unit.length);
    } else {
      out.append(kReplacementUtf8);
    }
    pos += unit.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacementUtf8);
  pending_.clear();
  return out;
}

}  // namespace inferd::tokenizer
