// libFuzzer target for the tokenizer: encodes and decodes arbitrary bytes. Checks that
// nothing crashes, that ids are in range, and that decode(encode(x)) == x whenever x is
// text the vocabulary can spell. Uses the default model's vocabulary when it is present
// ($INFERD_MODEL or the fetched SmolLM2), else a small built-in one.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "gguf/gguf.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/paths.h"
#include "util/utf8.h"

namespace {

using inferd::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> built_in() {
  inferd::tokenizer::ToyVocabSpec spec;
  spec.pre = "smollm";
  spec.control = {"<s>", "</s>", "<|im_start|>", "<|im_end|>"};
  spec.user_defined = {"<tool>"};
  spec.merges = {{" ", "t"}, {"h", "e"}, {" t", "he"},     {"i", "n"},
                 {" ", "a"}, {"e", "r"}, {"\xC3", "\xA9"}, {"\xE4", "\xB8"},
                 {"<", "|"}, {" ", " "}, {"  ", "  "}};
  spec.missing_bytes = {0x04, 0xFF};
  spec.add_bos = true;
  return Tokenizer::from_vocab(inferd::tokenizer::Vocab(inferd::tokenizer::make_toy_vocab(spec)));
}

std::unique_ptr<Tokenizer> load() {
  const std::string path = inferd::default_model_path();
  if (std::filesystem::exists(path)) {
    inferd::gguf::GgufFile file = inferd::gguf::GgufFile::open(path);
    return Tokenizer::from_gguf(file);
  }
  return built_in();
}

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = load();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = tokenizer();
  // The first byte picks the options, so one corpus explores all of them.
  const uint8_t flags = size > 0 ? data[0] : 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (size > 0) text.remove_prefix(1);
  const bool add_special = (flags & 1) != 0;
  const bool parse_special = (flags & 2) != 0;

  std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    if (!tok.vocab().contains(id)) __builtin_trap();
  }
  std::string decoded = tok.decode(ids, false);
  if (!add_special && !parse_special && tok.round_trips(text) && decoded != text) {
    __builtin_trap();
  }
  // Streaming must give the same bytes as decoding whenever the decoded text is valid.
  inferd::tokenizer::IncrementalDetokenizer detok(tok, false);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  if (inferd::is_valid_utf8(decoded) && streamed != decoded) __builtin_trap();
  return 0;
}
