// Terminal plumbing shared by `run` and `chat`: an OutputChannel that streams to a FILE*,
// the timing summary, and chat-template loading for the --chat-template option.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"

namespace inferd::app {

class StreamOutput final : public engine::OutputChannel {
 public:
  explicit StreamOutput(std::FILE* out) : out_(out) {}
  void on_text(std::string_view text) override {
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
    text_.append(text);
  }
  void on_finish(const engine::RequestResult& result) override { result_ = result; }
  const engine::RequestResult& result() const { return result_; }
  const std::string& text() const { return text_; }

 private:
  std::FILE* out_;
  std::string text_;
  engine::RequestResult result_;
};

// Prompt tokens, TTFT, prefill tok/s, generated tokens, decode tok/s and mean ITL, to stderr.
void print_stats(const engine::RequestResult& result, const engine::Engine& engine);

// A --chat-template value: a built-in name (chatml) or a template file.
tokenizer::ChatTemplate load_chat_template(const std::string& name_or_file);
// The model's template, or the override when one is given.
tokenizer::ChatTemplate load_chat_template(const gguf::GgufFile& file,
                                           const std::string& override_name);
// Renders messages (a JSON list: role, content, tool_calls, ...) with a generation prompt,
// using the vocab's BOS/EOS texts. A leading BOS (trailing EOS) text is left out where the
// tokenizer adds that token itself: encode the result with add_special = true.
std::string render_chat(const tokenizer::Tokenizer& tokenizer,
                        const tokenizer::ChatTemplate& chat_template,
                        const nlohmann::ordered_json& messages);
// The same for plain role/content messages.
std::string render_chat(const tokenizer::Tokenizer& tokenizer,
                        const tokenizer::ChatTemplate& chat_template,
                        const std::vector<tokenizer::ChatMessage>& messages);

}  // namespace inferd::app
