// Tokenizer::from_gguf, apart from tokenizer.cpp so that tokenizers built from plain data
// (tests, fuzzing) do not pull in the GGUF reader.
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace inferd::tokenizer {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  return from_vocab(Vocab::from_gguf(file));
}

}  // namespace inferd::tokenizer
