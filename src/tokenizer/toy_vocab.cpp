#include "tokenizer/toy_vocab.h"

#include <algorithm>
#include <set>

#include "tokenizer/byte_level.h"

namespace inferd::tokenizer {

VocabData make_toy_vocab(const ToyVocabSpec& spec) {
  VocabData data;
  data.model = "gpt2";
  data.pre = spec.pre;
  auto add = [&data](std::string text, TokenType type) {
    data.tokens.push_back(std::move(text));
    data.types.push_back(type);
    return static_cast<int32_t>(data.tokens.size() - 1);
  };
  for (const std::string& text : spec.control) {
    int32_t id = add(text, TokenType::kControl);
    if (text == "<s>") data.special.bos = id;
    if (text == "</s>") data.special.eos = id;
  }
  for (int b = 0; b < 256; ++b) {
    auto byte = static_cast<unsigned char>(b);
    if (std::find(spec.missing_bytes.begin(), spec.missing_bytes.end(), byte) !=
        spec.missing_bytes.end()) {
      continue;
    }
    add(std::string(byte_level_char(byte)), TokenType::kNormal);
  }
  std::set<std::string> seen(data.tokens.begin(), data.tokens.end());
  for (const auto& [left, right] : spec.merges) {
    std::string l = byte_level_encode(left), r = byte_level_encode(right);
    data.merges.push_back(l + " " + r);
    if (seen.insert(l + r).second) add(l + r, TokenType::kNormal);
  }
  for (const std::string& text : spec.user_defined) add(text, TokenType::kUserDefined);
  data.add_bos = spec.add_bos;
  data.add_eos = spec.add_eos;
  return data;
}

VocabData make_toy_spm_vocab(const ToySpmSpec& spec) {
  VocabData data;
  data.model = "llama";
  data.pre = "default";
  auto add = [&data](std::string text, TokenType type, float score) {
    data.tokens.push_back(std::move(text));
    data.types.push_back(type);
    data.scores.push_back(score);
    return static_cast<int32_t>(data.tokens.size() - 1);
  };
  if (spec.unknown_token) data.special.unk = add("<unk>", TokenType::kUnknown, 0.0f);
  data.special.bos = add("<s>", TokenType::kControl, 0.0f);
  data.special.eos = add("</s>", TokenType::kControl, 0.0f);
  for (const std::string& text : spec.control) add(text, TokenType::kControl, 0.0f);
  if (spec.byte_tokens) {
    constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", TokenType::kByte, 0.0f);
    }
  }
  for (const auto& [text, score] : spec.pieces) add(text, TokenType::kNormal, score);
  for (const std::string& text : spec.user_defined) add(text, TokenType::kUserDefined, 0.0f);
  data.add_space_prefix = spec.add_space_prefix;
  return data;
}

}  // namespace inferd::tokenizer
