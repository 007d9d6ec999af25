#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "util/error.h"

namespace inferd::tokenizer {

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  if (vocab.model() != "gpt2") {
    fail("tokenizer.ggml.model = '{}' is not supported yet (supported: gpt2)", vocab.model());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(vocab)));
}

Tokenizer::Tokenizer(Vocab vocab)
    : vocab_(std::move(vocab)),
      encoder_(std::make_unique<ByteLevelBpe>(vocab_)),
      specials_(vocab_) {
  const int32_t n = vocab_.size();
  pieces_.resize(n);
  special_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    TokenType t = vocab_.type(id);
    special_[id] = vocab_.is_control(id) || t == TokenType::kUnused;
    // Special and user-defined tokens are shown as written; the rest are byte spellings.
    bool literal = special_[id] || t == TokenType::kUserDefined;
    pieces_[id] = literal ? vocab_.text(id) : encoder_->token_bytes(id);
    max_piece_bytes_ = std::max(max_piece_bytes_, pieces_[id].size());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos()) ids.push_back(vocab_.special().bos);
  for (const TextSegment& seg : specials_.split(text, parse_special)) {
    if (seg.token != kNoToken) {
      ids.push_back(seg.token);
    } else {
      encoder_->encode(seg.text, ids);
    }
  }
  if (add_special && vocab_.add_eos()) ids.push_back(vocab_.special().eos);
  return ids;
}

void Tokenizer::check_id(int32_t id) const {
  if (!vocab_.contains(id)) {
    fail("token id {} is out of range (vocabulary size {})", id, vocab_.size());
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special_tokens && special_[id]) continue;
    text += pieces_[id];
  }
  return text;
}

const std::string& Tokenizer::token_piece(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return special_[id];
}

bool Tokenizer::round_trips(std::string_view text) const {
  return static_cast<const ByteLevelBpe&>(*encoder_).round_trips(text);
}

}  // namespace inferd::tokenizer
