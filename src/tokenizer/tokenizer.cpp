#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";

bool is_spm(const Vocab& vocab) {
  return vocab.model() == "llama";
}

std::unique_ptr<TextEncoder> make_encoder(const Vocab& vocab) {
  if (is_spm(vocab)) return std::make_unique<SentencePieceBpe>(vocab);
  return std::make_unique<ByteLevelBpe>(vocab);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  if (vocab.model() != "gpt2" && vocab.model() != "gemma4" && !is_spm(vocab)) {
    fail("{} = '{}' is not supported (supported: gpt2 = byte-level BPE, llama = SentencePiece "
         "BPE, gemma4 = Gemma 4's BPE)",
         kModelKey, vocab.model());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(vocab)));
}

Tokenizer::Tokenizer(Vocab vocab)
    : vocab_(std::move(vocab)),
      encoder_(make_encoder(vocab_)),
      specials_(vocab_),
      runs_get_space_prefix_(is_spm(vocab_) && vocab_.add_space_prefix()) {
  const int32_t n = vocab_.size();
  pieces_.resize(n);
  special_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    TokenType t = vocab_.type(id);
    special_[id] = vocab_.is_control(id) || t == TokenType::kUnused;
    if (t == TokenType::kUnused || t == TokenType::kUndefined) {
      // The reference shows these as nothing, special tokens wanted or not.
    } else if (special_[id] || t == TokenType::kUserDefined) {
      pieces_[id] = vocab_.text(id);  // shown as written
    } else {
      pieces_[id] = encoder_->token_bytes(id);
    }
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
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check_id(id);
    if (skip_special_tokens && special_[id]) continue;
    std::string_view piece = pieces_[id];
    // With a space prefix, a leading space of the first token is the prefix, not text. As in
    // the reference, only the very first id counts, even when it is skipped.
    if (i == 0 && vocab_.add_space_prefix() && piece.starts_with(' ')) piece.remove_prefix(1);
    text += piece;
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
  const std::vector<TextSegment> segments = specials_.split(text, false);
  for (size_t i = 0; i < segments.size(); ++i) {
    const TextSegment& seg = segments[i];
    if (seg.token != kNoToken) {
      if (vocab_.strips_right(seg.token)) return false;  // whitespace after it may be gone
      continue;
    }
    // Decoding removes only the first run's prefix; the others' stay as spaces.
    if (i > 0 && runs_get_space_prefix_) return false;
    if (!encoder_->round_trips(seg.text)) return false;
  }
  // Decoding drops the first piece's leading space; unless the encoder put it there as a
  // prefix, it was the text's own.
  const bool first_is_prefixed =
      runs_get_space_prefix_ && !segments.empty() && segments.front().token == kNoToken;
  return !(vocab_.add_space_prefix() && text.starts_with(' ') && !first_is_prefixed);
}

}  // namespace inferd::tokenizer
