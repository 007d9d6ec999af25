// `inferd template`: renders a chat template with messages (and tools, and extra variables)
// from JSON files and prints the prompt exactly as the model would receive it, with no model
// weights needed: -m may be a vocabulary-only GGUF, or absent with --bos/--eos given.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "gguf/gguf.h"
#include "stream_output.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace inferd::app {
namespace {

struct TemplateOptions {
  std::string model;
  std::string messages_file;
  std::string chat_template;
  std::string tools_file;
  std::string kwargs;
  std::string bos, eos;
  bool bos_given = false, eos_given = false;
  bool no_generation_prompt = false;
  std::string date;  // hidden: strftime_now's clock, for reproducible output in tests
};

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) fail("{} file '{}' cannot be read", what, path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{} file '{}' is not valid JSON: {}", what, path, e.what());
  }
}

// The text of special token `key` (tokenizer.ggml.bos_token_id, ...), or "" when the vocab
// has none.
std::string special_token_text(const gguf::GgufFile& file, const char* key) {
  const auto id = file.get_int(key);
  const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
  if (!id || tokens == nullptr) return "";
  const std::vector<std::string> texts = tokens->strings("tokenizer.ggml.tokens");
  if (*id < 0 || static_cast<size_t>(*id) >= texts.size())
    fail("{}: {} = {} is not a token id (the vocabulary has {})", file.name(), key, *id,
         texts.size());
  return texts[static_cast<size_t>(*id)];
}

// "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS" as a broken-down time with its weekday filled in.
std::tm parse_date(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  char tail = 0;
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &year, &month, &day, &hour,
                            &minute, &second, &tail);
  if ((n != 3 && n != 6) || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 60)
    fail("--date '{}' must be YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS", text);
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::time_t t = timegm(&tm);  // normalizes and fills tm_wday / tm_yday
  gmtime_r(&t, &tm);
  return tm;
}

void render_template(const TemplateOptions& options) {
  tokenizer::ChatInputs inputs;
  std::optional<tokenizer::ChatTemplate> chat_template;
  if (!options.model.empty()) {
    // Only metadata is read, so a vocabulary-only GGUF serves as well as a model.
    gguf::GgufFile file = gguf::GgufFile::open(options.model);
    chat_template = load_chat_template(file, options.chat_template);
    inputs.bos_token = special_token_text(file, "tokenizer.ggml.bos_token_id");
    inputs.eos_token = special_token_text(file, "tokenizer.ggml.eos_token_id");
  } else {
    if (options.chat_template.empty())
      fail("inferd template needs -m MODEL or --chat-template NAME|FILE");
    chat_template = load_chat_template(options.chat_template);
  }
  if (options.bos_given) inputs.bos_token = options.bos;
  if (options.eos_given) inputs.eos_token = options.eos;
  inputs.messages = read_json_file(options.messages_file, "--messages");
  if (!inputs.messages.is_array())
    fail("--messages: '{}' must hold a JSON list", options.messages_file);
  if (!options.tools_file.empty()) {
    inputs.tools = read_json_file(options.tools_file, "--tools");
    if (!inputs.tools->is_array()) fail("--tools: '{}' must hold a JSON list", options.tools_file);
  }
  if (!options.kwargs.empty()) {
    try {
      inputs.extra = nlohmann::ordered_json::parse(options.kwargs);
    } catch (const nlohmann::json::exception& e) {
      fail("--kwargs is not valid JSON: {}", e.what());
    }
    if (!inputs.extra.is_object()) fail("--kwargs must be a JSON object");
  }
  inputs.add_generation_prompt = !options.no_generation_prompt;
  if (!options.date.empty()) inputs.now = parse_date(options.date);
  const std::string prompt = chat_template->render(inputs);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void register_template(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "template", "Render a chat template with messages from a JSON file and print the prompt");
  auto options = std::make_shared<TemplateOptions>();
  cmd->add_option("-m,--model", options->model,
                  "GGUF file for the template and BOS/EOS texts (a vocabulary-only file will do)");
  cmd->add_option("--messages", options->messages_file,
                  "JSON file with the messages list (role, content, tool_calls, ...)")
      ->required();
  cmd->add_option("--chat-template", options->chat_template,
                  "Built-in template name (chatml) or a Jinja file; default: the model's");
  cmd->add_option("--tools", options->tools_file, "JSON file with the tools list");
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "Render with add_generation_prompt=false");
  cmd->add_option("--kwargs", options->kwargs,
                  "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option_function<std::string>(
      "--bos", [options](const std::string& s) { options->bos = s, options->bos_given = true; },
      "BOS token text (default: the model's, else empty)");
  cmd->add_option_function<std::string>(
      "--eos", [options](const std::string& s) { options->eos = s, options->eos_given = true; },
      "EOS token text (default: the model's, else empty)");
  // For tests: strftime_now's date, so that dated templates render reproducibly.
  cmd->add_option("--date", options->date, "strftime_now's date (YYYY-MM-DD[THH:MM:SS])")
      ->group("");
  cmd->callback([options] { render_template(*options); });
}

}  // namespace inferd::app
