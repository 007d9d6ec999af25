// libFuzzer target for the encoders that spell text as SentencePiece does (U+2581 for spaces,
// <0xAB> byte tokens): encodes arbitrary bytes with the vocabulary of the GGUF file named by
// $INFERD_FUZZ_VOCAB (e.g. Gemma 3, or llama.cpp's vocabulary-only ggml-vocab-llama-spm.gguf,
// or ggml-vocab-gemma-4.gguf for Gemma 4's BPE), loaded once. Checks that nothing crashes, that ids are in
// range, that decode(encode(x)) == x whenever round_trips(x) says so, and that streaming
// agrees with decoding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "gguf/gguf.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

namespace {

using inferd::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> load() {
  const char* path = std::getenv("INFERD_FUZZ_VOCAB");
  if (path == nullptr) {
    std::fprintf(stderr,
                 "fuzz_spm: set INFERD_FUZZ_VOCAB to a GGUF file with a 'llama' or 'gemma4' vocab\n");
    std::abort();
  }
  inferd::gguf::GgufFile file = inferd::gguf::GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(file);
  if (tok->vocab().model() != "llama" && tok->vocab().model() != "gemma4") {
    std::fprintf(stderr, "fuzz_spm: %s has tokenizer.ggml.model = '%s', not 'llama' or 'gemma4'\n", path,
                 tok->vocab().model().c_str());
    std::abort();
  }
  return tok;
}

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = load();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();  // load the vocabulary before the first input is timed
  return 0;
}

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
  // Streaming shows pieces as they are, without decode()'s first-space rule; apart from
  // that it must give the same bytes whenever the decoded text is valid.
  inferd::tokenizer::IncrementalDetokenizer detok(tok, false);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  std::string pieces;
  for (int32_t id : ids) pieces += tok.token_piece(id);
  if (inferd::is_valid_utf8(pieces) && streamed != pieces) __builtin_trap();
  return 0;
}
