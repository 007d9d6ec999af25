// Vocab::from_gguf: reads the tokenizer.ggml.* metadata of a model file into VocabData.
// Kept apart from vocab.cpp so that code built from plain data does not need the GGUF reader.
#include <limits>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

std::vector<TokenType> read_types(const gguf::Array& array) {
  constexpr std::string_view kKey = "tokenizer.ggml.token_type";
  std::vector<int64_t> raw = array.ints(kKey);
  std::vector<TokenType> types(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] < 0 || raw[i] > static_cast<int64_t>(TokenType::kByte)) {
      fail("{}[{}] = {} is not a token type (0..6)", kKey, i, raw[i]);
    }
    types[i] = static_cast<TokenType>(raw[i]);
  }
  return types;
}

// SentencePiece files that leave an id out get the reference's defaults, where they exist.
SpecialIds default_special_ids(std::string_view model, size_t n_tokens) {
  SpecialIds ids;
  if (model != "llama") return ids;
  auto set = [n_tokens](int32_t& field, int32_t id) {
    if (static_cast<size_t>(id) < n_tokens) field = id;
  };
  set(ids.unk, 0);
  set(ids.bos, 1);
  set(ids.eos, 2);
  return ids;
}

SpecialIds read_special_ids(const gguf::GgufFile& file, SpecialIds ids) {
  for (const SpecialIdKey& k : special_id_keys()) {
    std::optional<int64_t> value = file.get_int(k.key);
    if (!value) continue;
    if (*value < 0 || *value > std::numeric_limits<int32_t>::max()) {
      fail("{} = {} is not a valid token id", k.key, *value);
    }
    ids.*k.field = static_cast<int32_t>(*value);
  }
  return ids;
}

// Normalization keys we do not implement: a file that asks for one is refused rather than
// tokenized differently from what its author meant.
void check_normalization_keys(const gguf::GgufFile& file) {
  constexpr std::string_view kRemoveSpaces = "tokenizer.ggml.remove_extra_whitespaces";
  if (file.get_bool(kRemoveSpaces).value_or(false)) {
    fail("{} = true is not supported (only false)", kRemoveSpaces);
  }
  constexpr std::string_view kCharsmap = "tokenizer.ggml.precompiled_charsmap";
  if (const gguf::Array* map = file.get_array(kCharsmap); map != nullptr && !map->items.empty()) {
    fail("{} ({} bytes) is not supported: no normalization map is applied", kCharsmap,
         map->items.size());
  }
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::GgufFile& file) {
  VocabData data;
  data.model = file.require_string("tokenizer.ggml.model");
  data.pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  data.tokens = file.require_array("tokenizer.ggml.tokens").strings("tokenizer.ggml.tokens");
  if (const gguf::Array* types = file.get_array("tokenizer.ggml.token_type")) {
    data.types = read_types(*types);
  }
  if (const gguf::Array* scores = file.get_array("tokenizer.ggml.scores")) {
    data.scores = scores->floats("tokenizer.ggml.scores");
  }
  if (data.model == "gpt2") {
    data.merges = file.require_array("tokenizer.ggml.merges").strings("tokenizer.ggml.merges");
  } else if (const gguf::Array* merges = file.get_array("tokenizer.ggml.merges")) {
    data.merges = merges->strings("tokenizer.ggml.merges");
  }
  data.special = read_special_ids(file, default_special_ids(data.model, data.tokens.size()));
  data.add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  data.add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  data.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix");
  check_normalization_keys(file);
  data.name = file.get_string("general.name").value_or("");
  return Vocab(std::move(data));
}

}  // namespace inferd::tokenizer
