#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

#include "util/error.h"

namespace inferd::tokenizer {
namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// Texts that models use for "end of turn", most specific first. Files often give only EOS,
// while chat models stop at the end-of-turn marker.
constexpr std::array<std::string_view, 7> kEndOfTurnTexts = {
    "<|im_end|>",    "<|eot_id|>",      "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>",
};

// Texts that llama.cpp treats as control tokens whatever type the file gives them: its
// end-of-generation markers, and fill-in-the-middle markers when the file names none of
// that kind. A user-defined "</s>" (Phi-3) is then not split out of plain text.
// clang-format off
constexpr std::array<std::string_view, 22> kControlTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};
// clang-format on

struct FimTexts {
  int32_t SpecialIds::*field;
  std::array<std::string_view, 8> texts;  // unused entries empty
};
constexpr std::array<FimTexts, 6> kFimTexts = {{
    {&SpecialIds::fim_pre,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
      "<|code_prefix|>", "<|prefix|>"}},
    {&SpecialIds::fim_suf,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
      "<|code_suffix|>", "<|suffix|>"}},
    {&SpecialIds::fim_mid,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
      "<|code_middle|>", "<|middle|>"}},
    {&SpecialIds::fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {&SpecialIds::fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {&SpecialIds::fim_sep, {"<|file_sep|>"}},
}};

constexpr std::array<SpecialIdKey, 14> kSpecialIdKeys = {{
    {"tokenizer.ggml.bos_token_id", &SpecialIds::bos},
    {"tokenizer.ggml.eos_token_id", &SpecialIds::eos},
    {"tokenizer.ggml.eot_token_id", &SpecialIds::eot},
    {"tokenizer.ggml.eom_token_id", &SpecialIds::eom},
    {"tokenizer.ggml.unknown_token_id", &SpecialIds::unk},
    {"tokenizer.ggml.seperator_token_id", &SpecialIds::sep},  // sic: the GGUF key is misspelt
    {"tokenizer.ggml.padding_token_id", &SpecialIds::pad},
    {"tokenizer.ggml.mask_token_id", &SpecialIds::mask},
    {"tokenizer.ggml.fim_pre_token_id", &SpecialIds::fim_pre},
    {"tokenizer.ggml.fim_suf_token_id", &SpecialIds::fim_suf},
    {"tokenizer.ggml.fim_mid_token_id", &SpecialIds::fim_mid},
    {"tokenizer.ggml.fim_pad_token_id", &SpecialIds::fim_pad},
    {"tokenizer.ggml.fim_rep_token_id", &SpecialIds::fim_rep},
    {"tokenizer.ggml.fim_sep_token_id", &SpecialIds::fim_sep},
}};

uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

std::span<const SpecialIdKey> special_id_keys() {
  return kSpecialIdKeys;
}

bool default_add_bos(std::string_view model, std::string_view pre) {
  // SentencePiece models and the Llama-3 family of byte-level BPE start every prompt with BOS;
  // other byte-level BPE models (GPT-2, SmolLM, Qwen, ...) do not.
  if (model == "llama") return true;
  static constexpr std::array<std::string_view, 6> kBosPres = {"llama3",  "llama-v3", "llama-bpe",
                                                               "falcon3", "tekken",   "pixtral"};
  return std::find(kBosPres.begin(), kBosPres.end(), pre) != kBosPres.end();
}

Vocab::Vocab(VocabData data)
    : model_(std::move(data.model)),
      pre_(std::move(data.pre)),
      texts_(std::move(data.tokens)),
      types_(std::move(data.types)),
      scores_(std::move(data.scores)),
      special_(data.special) {
  if (texts_.empty()) fail("{} is empty", kTokensKey);
  if (texts_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("{} has {} entries, more than token ids can address", kTokensKey, texts_.size());
  }
  if (types_.empty()) types_.assign(texts_.size(), TokenType::kNormal);
  if (types_.size() != texts_.size()) {
    fail("{} has {} entries but {} has {}", kTypesKey, types_.size(), kTokensKey, texts_.size());
  }
  if (!scores_.empty() && scores_.size() != texts_.size()) {
    fail("{} has {} entries but {} has {}", kScoresKey, scores_.size(), kTokensKey, texts_.size());
  }
  for (size_t i = 0; i < types_.size(); ++i) {
    auto t = static_cast<int32_t>(types_[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      fail("{}[{}] = {} is not a token type (0..6)", kTypesKey, i, t);
    }
  }
  index_tokens();
  check_special_ids();
  promote_control_texts();
  index_merges(data.merges);
  add_bos_ = data.add_bos.value_or(default_add_bos(model_, pre_));
  // Gemma 4 always starts with BOS: the reference overrides a file that says otherwise.
  if (model_ == "gemma4") add_bos_ = true;
  add_eos_ = data.add_eos.value_or(false);
  add_space_prefix_ = data.add_space_prefix.value_or(model_ == "llama");
  if (add_bos_ && special_.bos == kNoToken) {
    fail("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  if (add_eos_ && special_.eos == kNoToken) {
    fail("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set");
  }
  find_end_tokens();
  apply_harmony_rules();
  apply_name_rules(data.name);
}

// The reference marks Phi-3's special and user-defined tokens (but not <unk>, <s> and
// <|endoftext|>) to swallow the whitespace after them, chosen by the model's name.
void Vocab::apply_name_rules(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) return;
  strips_right_.assign(texts_.size(), false);
  for (int32_t id = 0; id < size(); ++id) {
    strips_right_[id] = is_control(id) || types_[id] == TokenType::kUserDefined;
  }
  auto set = [this](std::string_view text, bool value) {
    if (int32_t id = find(text); id != kNoToken) strips_right_[id] = value;
  };
  set("</s>", true);
  for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, false);
}

void Vocab::index_tokens() {
  ids_.reserve(texts_.size());
  for (size_t i = 0; i < texts_.size(); ++i) {
    if (texts_[i].empty()) continue;  // an empty token can never be produced or looked up
    auto [it, inserted] = ids_.emplace(texts_[i], static_cast<int32_t>(i));
    if (!inserted) {
      fail("{}: tokens {} and {} have the same text '{}'", kTokensKey, it->second, i, texts_[i]);
    }
  }
}

void Vocab::promote_control_texts() {
  auto promote = [this](std::string_view text) {
    if (int32_t id = find(text); id != kNoToken && !is_control(id))
      types_[id] = TokenType::kControl;
  };
  for (std::string_view text : kControlTexts) promote(text);
  // A FIM role without its GGUF key goes to the first of its texts the vocabulary has (as the
  // reference does), which /infill then uses; every one of the texts becomes a control token.
  for (const FimTexts& fim : kFimTexts) {
    if (special_.*fim.field != kNoToken) continue;
    for (std::string_view text : fim.texts) {
      if (text.empty()) continue;
      promote(text);
      if (const int32_t id = find(text); id != kNoToken && special_.*fim.field == kNoToken)
        special_.*fim.field = id;
    }
  }
}

void Vocab::check_special_ids() {
  for (const SpecialIdKey& k : kSpecialIdKeys) {
    int32_t id = special_.*k.field;
    if (id != kNoToken && !contains(id)) {
      fail("{} = {} is out of range (vocabulary size {})", k.key, id, texts_.size());
    }
  }
}

void Vocab::index_merges(const std::vector<std::string>& merges) {
  if (merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("{} has {} entries, too many", kMergesKey, merges.size());
  }
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    // The separator is the first space after the first character, so that a left part
    // made of a space (vocabularies that keep raw spaces) still parses.
    size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos)
      fail("{}[{}] = '{}' has no space between its parts", kMergesKey, i, m);
    std::string_view left = std::string_view(m).substr(0, space);
    std::string_view right = std::string_view(m).substr(space + 1);
    int32_t l = find(left), r = find(right);
    if (l == kNoToken || r == kNoToken) {
      fail("{}[{}] = '{}' names '{}', which is not a token", kMergesKey, i, m,
           l == kNoToken ? left : right);
    }
    int32_t result = find(std::string(left) + std::string(right));
    if (result == kNoToken) {
      fail("{}[{}] = '{}' makes '{}{}', which is not a token", kMergesKey, i, m, left, right);
    }
    // A repeated pair keeps its first (best) rank.
    merges_.emplace(merge_key(l, r), Merge{static_cast<int32_t>(i), result});
  }
}

void Vocab::find_end_tokens() {
  if (special_.eot == kNoToken) {
    for (std::string_view text : kEndOfTurnTexts) {
      if (int32_t id = find(text); id != kNoToken) {
        special_.eot = id;
        break;
      }
    }
  }
  auto add = [this](int32_t id) {
    if (id != kNoToken && !is_eog(id)) eog_ids_.push_back(id);
  };
  add(special_.eos);
  add(special_.eot);
  add(special_.eom);
  // Every end-of-generation text the reference knows ends generation (Gemma 4's <turn|>).
  for (std::string_view text : kControlTexts) add(find(text));
  // Gemma 4 and PLaMo write a plain "</s>": where <|tool_response> or <|plamo:eos|> is in the
  // vocabulary, the reference makes it a normal token that ends nothing.
  if (find("<|tool_response>") != kNoToken || find("<|plamo:eos|>") != kNoToken) {
    if (const int32_t s = find("</s>"); s != kNoToken && s != special_.eos) {
      std::erase(eog_ids_, s);
      types_[s] = TokenType::kNormal;
    }
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
}

// gpt-oss's vocabulary (o200k_harmony), as the reference reads it. A message's frame
// (<|start|>, <|channel|>, <|message|>, <|constrain|>) is text the answer keeps, since the
// server reads the channels from it. With <|return|> and <|call|> there, those two end the turn
// and <|end|> only ends one message of it (reasoning, then the answer), so it is kept too. The
// EOT id found by text may stay <|end|>; it only ever served to fill the end-of-generation list.
void Vocab::apply_harmony_rules() {
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = find(text); id != kNoToken) types_[id] = TokenType::kUserDefined;
  }
  const int32_t turn_end = find("<|return|>"), call = find("<|call|>"), end = find("<|end|>");
  if (turn_end == kNoToken || call == kNoToken) return;
  for (const int32_t id : {turn_end, call}) {
    if (!is_eog(id)) eog_ids_.push_back(id);
  }
  if (end != kNoToken) {
    std::erase(eog_ids_, end);
    types_[end] = TokenType::kUserDefined;
  }
  std::sort(eog_ids_.begin(), eog_ids_.end());
}

bool Vocab::is_control(int32_t id) const {
  TokenType t = type(id);
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

int32_t Vocab::find(std::string_view text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? kNoToken : it->second;
}

const Vocab::Merge* Vocab::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(merge_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

bool Vocab::is_eog(int32_t id) const {
  return std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

}  // namespace inferd::tokenizer
