// ChatTemplate: renders chat messages into one prompt string with the model's Jinja template
// (`tokenizer.chat_template`), as Hugging Face's apply_chat_template does.
//
// The interpreter (src/tokenizer/jinja) follows jinja2 with HF's settings (trim_blocks,
// lstrip_blocks, loopcontrols, {% generation %}, default Undefined, the immutable sandbox, HF's
// tojson, raise_exception, strftime_now), with Python's objects where templates can tell:
// tuples, Markup (`|safe` escapes what is added to it), generators (map/select/... results
// are one-pass), dict views. Messages, tools and extra variables come in as JSON, with their
// key order kept. What it does not do is an error naming the construct, never other text:
// - statements: include/import/extends/block, raw, with, recursive loops;
// - filters: groupby, slice, truncate, wordwrap, striptags, urlize, xmlattr, pprint, random,
//   filesizeformat, urlencode; str.format specs (`{:>8}`); dict keys other than strings;
// - integers are 64-bit (overflow is an error, where Python would grow them);
// - upper/lower/title/capitalize know Latin, Cyrillic and the uncased scripts (CJK, Arabic,
//   ...), and refuse to change the case of others (Greek, Armenian, ...); wordcount and
//   isalpha/isdigit refuse non-ASCII text rather than guess Unicode's classes.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace inferd::gguf {
class GgufFile;
}
namespace inferd::jinja {
struct Stmt;
}

namespace inferd::tokenizer {

// A plain message, for callers that have nothing but text.
struct ChatMessage {
  std::string role;
  std::string content;
};

// What apply_chat_template hands the template. JSON objects become dicts in their key order.
struct ChatInputs {
  // Messages as the OpenAI API writes them: role, content (a string, a list of parts, or
  // null), tool_calls, tool_call_id, name, reasoning_content, ...
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // The `tools` list; nullopt renders tools as None.
  std::optional<nlohmann::ordered_json> tools;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // Extra template variables (HF's **kwargs: enable_thinking, ...), a JSON object.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // strftime_now's clock (broken-down local time); nullopt: the current local time.
  std::optional<std::tm> now;
};

// Messages from plain role/content pairs.
nlohmann::ordered_json to_json(const std::vector<ChatMessage>& messages);
// A plain message from a JSON message: its role, and its content when that is a string (null
// or absent: empty); other fields are dropped. Lets a JSON list convert to ChatMessages.
void from_json(const nlohmann::json& j, ChatMessage& message);

class ChatTemplate {
 public:
  // Parses the template; a syntax error is an inferd::Error with line and column.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);

  // The file's own template; an inferd::Error when it has none.
  static ChatTemplate from_gguf(const gguf::GgufFile& file);
  // A template shipped with inferd by name ("chatml", "llama3", ...); nullopt for an unknown name.
  static std::optional<ChatTemplate> builtin(const std::string& name);

  // Throws inferd::Error when the template raises an exception or cannot be evaluated.
  std::string render(const ChatInputs& inputs) const;
  // Plain messages, no tools.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> program_;
};

class Tokenizer;

// The prompt a chat request becomes: `inputs` rendered with the tokenizer's BOS/EOS texts,
// less a leading BOS (trailing EOS) text where the tokenizer adds that token itself, so that
// encoding the result with add_special = true gives one BOS whether or not the template
// writes "{{ bos_token }}" (llama.cpp's rule).
std::string render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                               ChatInputs inputs);

}  // namespace inferd::tokenizer
