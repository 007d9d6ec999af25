// A ParseContext over a toy byte-level vocabulary (tokenizer/toy_vocab.h: the control tokens
// first, then byte b at id controls + b), for the server's parsing tests without a model.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "server/openai_request.h"
#include "tokenizer/toy_vocab.h"

namespace inferd::server {

class ToyServerContext {
 public:
  explicit ToyServerContext(tokenizer::ToyVocabSpec spec = {.control = {"<s>", "</s>"}})
      : tokenizer_(tokenizer::Tokenizer::from_vocab(
            tokenizer::Vocab(tokenizer::make_toy_vocab(std::move(spec))))) {}

  // Serving the model "toy" with `context` tokens a sequence; no chat template.
  ParseContext context(int64_t context) const {
    ParseContext c;
    c.tokenizer = tokenizer_.get();
    c.context = context;
    c.model_ids = {"toy"};
    return c;
  }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

}  // namespace inferd::server
