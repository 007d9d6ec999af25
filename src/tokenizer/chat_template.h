// ChatTemplate: renders chat messages into one prompt string with the model's Jinja template
// (`tokenizer.chat_template`), as Hugging Face's apply_chat_template does.
//
// The interpreter (src/tokenizer/jinja) follows jinja2 with HF's settings (trim_blocks,
// lstrip_blocks, loopcontrols, default Undefined, HF's tojson, raise_exception, strftime_now;
// tools and documents are None). Not supported, each an error or noted difference:
// - statements: include/import/extends/block, call, filter, with, raw, recursive loops,
//   tuple assignment (`set a, b = ...`), macro varargs/kwargs/caller;
// - tuples are lists (a tuple prints as [..], not (..)); dict keys are strings;
// - integers are 64-bit (overflow is an error, where Python would grow them);
// - upper/lower/title/capitalize change ASCII letters only;
// - filters beyond the common set (no batch, slice, dictsort, wordwrap, center, format, ...);
// - `%` string formatting and str.format.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace inferd::gguf {
class GgufFile;
}
namespace inferd::jinja {
struct Stmt;
}

namespace inferd::tokenizer {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the template; a syntax error is an inferd::Error with line and column.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);

  // The file's own template; an inferd::Error when it has none.
  static ChatTemplate from_gguf(const gguf::GgufFile& file);
  // A template shipped with inferd ("chatml"); nullopt for an unknown name.
  static std::optional<ChatTemplate> builtin(const std::string& name);

  // Throws inferd::Error when the template raises an exception or cannot be evaluated.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> program_;
};

}  // namespace inferd::tokenizer
