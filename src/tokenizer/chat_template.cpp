#include "tokenizer/chat_template.h"

#include <ctime>

#include "gguf/gguf.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

// ChatML as most instruction-tuned models use it, without a default system message.
constexpr const char* kChatML =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source)
    : source_(source),
      program_(std::make_shared<const std::vector<std::unique_ptr<jinja::Stmt>>>(
          jinja::parse_template(source))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

ChatTemplate ChatTemplate::from_gguf(const gguf::GgufFile& file) {
  auto source = file.get_string("tokenizer.chat_template");
  if (!source) {
    fail(
        "{} has no chat template (tokenizer.chat_template); pass --chat-template chatml or a "
        "template file",
        file.name());
  }
  try {
    return ChatTemplate(*source);
  } catch (const Error& e) {
    fail("{}: its chat template cannot be used: {}; pass --chat-template to override", file.name(),
         e.what());
  }
}

std::optional<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  if (name == "chatml") return ChatTemplate(kChatML);
  return std::nullopt;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token) const {
  jinja::List list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set("role", jinja::Value(m.role));
    d.set("content", jinja::Value(m.content));
    list.push_back(jinja::Value(std::move(d)));
  }
  jinja::Dict globals;
  globals.set("messages", jinja::Value(std::move(list)));
  globals.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  globals.set("bos_token", jinja::Value(bos_token));
  globals.set("eos_token", jinja::Value(eos_token));
  // apply_chat_template passes tools and documents, None when the request has none.
  globals.set("tools", jinja::Value::none());
  globals.set("documents", jinja::Value::none());
  globals.set("raise_exception",
              jinja::Value(jinja::Function([](const jinja::Args& args) -> jinja::Value {
                const jinja::Value* message = args.get(0, "message");
                fail("the chat template refused the messages: {}",
                     message != nullptr ? message->to_string() : "");
              })));
  globals.set("strftime_now", jinja::Value(jinja::Function([](const jinja::Args& args) {
                const jinja::Value* f = args.get(0, "format");
                const std::string format = f != nullptr ? f->to_string() : "%Y-%m-%d";
                std::time_t now = std::time(nullptr);
                char buffer[128];
                std::tm tm{};
                localtime_r(&now, &tm);
                size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &tm);
                return jinja::Value(std::string(buffer, n));
              })));
  return jinja::render(*program_, globals);
}

}  // namespace inferd::tokenizer
