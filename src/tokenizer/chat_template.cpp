#include "tokenizer/chat_template.h"

#include <climits>
#include <ctime>

#include "gguf/gguf.h"
#include "tokenizer/builtin_templates.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

// JSON -> Jinja values as Python's json.loads builds them, object keys in their order.
jinja::Value from_json(const nlohmann::ordered_json& j, int depth = 0) {
  if (depth > 64) fail("chat template input: JSON nested more than 64 deep");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return jinja::Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto v = j.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX))
        fail("chat template input: integer {} does not fit 64 bits", v);
      return jinja::Value(static_cast<int64_t>(v));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::List list;
      for (const auto& x : j) list.push_back(from_json(x, depth + 1));
      return jinja::Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict dict;
      for (const auto& [k, v] : j.items()) dict.set(k, from_json(v, depth + 1));
      return jinja::Value(std::move(dict));
    }
    default:
      fail("chat template input: unsupported JSON value");
  }
}

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
  // Files without a template (base models, some conversions) get their family's built-in one
  // where the architecture names a single format; a `llama` file could be any of several.
  if (!source) {
    const std::string arch = file.get_string("general.architecture").value_or("");
    const char* family = arch == "gemma" || arch == "gemma2" || arch == "gemma3" ? "gemma"
                         : arch == "qwen2" || arch == "qwen3"                    ? "chatml"
                         : arch == "phi3"                                        ? "phi3"
                                                                                 : nullptr;
    if (family != nullptr) source = builtin_template_source(family);
  }
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
  std::optional<std::string> source = builtin_template_source(name);
  if (!source) return std::nullopt;
  return ChatTemplate(*source);
}

void from_json(const nlohmann::json& j, ChatMessage& message) {
  if (!j.is_object() || !j.contains("role") || !j["role"].is_string())
    fail("a chat message must be an object with a string 'role'");
  message.role = j["role"].get<std::string>();
  const auto content = j.find("content");
  if (content != j.end() && !content->is_null() && !content->is_string())
    fail("a plain chat message's content must be a string");
  message.content = content != j.end() && content->is_string() ? content->get<std::string>() : "";
}

nlohmann::ordered_json to_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token) const {
  ChatInputs inputs;
  inputs.messages = to_json(messages);
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_token;
  inputs.eos_token = eos_token;
  return render(inputs);
}

std::string ChatTemplate::render(const ChatInputs& inputs) const {
  if (!inputs.messages.is_array()) fail("chat template: messages must be a JSON list");
  if (!inputs.extra.is_object()) fail("chat template: extra variables must be a JSON object");
  jinja::Dict globals;
  // apply_chat_template's own variables first; extra variables may override them, as HF's
  // **kwargs do.
  globals.set("messages", from_json(inputs.messages));
  globals.set("tools", inputs.tools ? from_json(*inputs.tools) : jinja::Value::none());
  globals.set("documents", jinja::Value::none());
  globals.set("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  globals.set("bos_token", jinja::Value(inputs.bos_token));
  globals.set("eos_token", jinja::Value(inputs.eos_token));
  globals.set("raise_exception",
              jinja::Value(jinja::Function([](const jinja::Args& args) -> jinja::Value {
                const jinja::Value* message = args.get(0, "message");
                fail("the chat template refused the messages: {}",
                     message != nullptr ? message->to_string() : "");
              })));
  const std::optional<std::tm> fixed = inputs.now;
  globals.set("strftime_now", jinja::Value(jinja::Function([fixed](const jinja::Args& args) {
                const jinja::Value* f = args.get(0, "format");
                if (f == nullptr || !f->is_string())
                  fail("chat template: strftime_now() needs a format string");
                std::tm tm{};
                if (fixed) {
                  tm = *fixed;
                } else {
                  const std::time_t now = std::time(nullptr);
                  localtime_r(&now, &tm);
                }
                char buffer[256];
                const size_t n = std::strftime(buffer, sizeof(buffer), f->as_string().c_str(), &tm);
                if (n == 0 && !f->as_string().empty())
                  fail("chat template: strftime_now('{}') gives no text or too much",
                       f->as_string());
                return jinja::Value(std::string(buffer, n));
              })));
  for (const auto& [key, value] : inputs.extra.items()) globals.set(key, from_json(value));
  return jinja::render(*program_, globals);
}

std::string render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                               ChatInputs inputs) {
  const SpecialIds& ids = tokenizer.vocab().special();
  inputs.bos_token = ids.bos >= 0 ? tokenizer.token_piece(ids.bos) : std::string();
  inputs.eos_token = ids.eos >= 0 ? tokenizer.token_piece(ids.eos) : std::string();
  std::string prompt = chat_template.render(inputs);
  const Vocab& vocab = tokenizer.vocab();
  if (vocab.add_bos() && !inputs.bos_token.empty() && prompt.starts_with(inputs.bos_token))
    prompt.erase(0, inputs.bos_token.size());
  if (vocab.add_eos() && !inputs.eos_token.empty() && prompt.ends_with(inputs.eos_token))
    prompt.erase(prompt.size() - inputs.eos_token.size());
  return prompt;
}

}  // namespace inferd::tokenizer
