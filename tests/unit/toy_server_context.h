// A ParseContext over a toy byte-level vocabulary (tokenizer/toy_vocab.h: the control tokens
// first, then byte b at id controls + b), for the server's parsing tests without a model.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "server/api/openai_request.h"
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
  // With a chat "template" that shows each message's role, content, reasoning and calls, so
  // what a translated API (Anthropic's, Responses) kept can be read off the prompt.
  ParseContext context_showing_messages(int64_t context) const {
    ParseContext c = this->context(context);
    c.render_chat = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       bool) {
      std::string s;
      for (const auto& m : messages) {
        s += m["role"].get<std::string>() + ":";
        if (m.contains("reasoning_content"))
          s += " <think>" + m["reasoning_content"].get<std::string>() + "</think>";
        if (m.contains("content") && m["content"].is_string())
          s += " " + m["content"].get<std::string>();
        if (m.contains("tool_calls")) s += " calls=" + m["tool_calls"].dump();
        s += "\n";
      }
      if (!tools.is_null()) s += "tools: " + tools.dump() + "\n";
      return s + "assistant:";
    };
    return c;
  }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

}  // namespace inferd::server
