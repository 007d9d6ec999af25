// `inferd run`: one prompt (from -p or stdin, optionally as a chat turn) through the engine,
// text streamed to stdout as it is made, timings to stderr.
#include <cstdio>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "commands.h"
#include "generation_options.h"
#include "stream_output.h"
#include "tokenizer/chat_template.h"

namespace inferd::app {
namespace {

struct RunOptions : GenerationOptions {
  std::string prompt;
  bool chat = false;
};

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void run(const RunOptions& options) {
  gguf::GgufFile file =
      gguf::GgufFile::open(options.model.empty() ? default_model_path() : options.model);
  engine::Engine engine(file, options.engine_config());
  std::string prompt =
      options.prompt == "-" || options.prompt.empty() ? read_stdin() : options.prompt;
  std::vector<int32_t> ids;
  if (options.chat) {
    tokenizer::ChatTemplate chat_template = load_chat_template(file, options.chat_template);
    std::vector<tokenizer::ChatMessage> messages;
    if (!options.system_prompt.empty()) messages.push_back({"system", options.system_prompt});
    messages.push_back({"user", prompt});
    ids = engine.tokenizer().encode(render_chat(engine.tokenizer(), chat_template, messages), true,
                                    true);
  } else {
    ids = engine.tokenizer().encode(prompt, true, true);
  }
  auto output = std::make_shared<StreamOutput>(stdout);
  engine.add_request(options.make_request(std::move(ids), output));
  engine.run_until_idle();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!options.quiet_stats) print_stats(output->result(), engine);
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*cmd);
  cmd->add_option("-p,--prompt", options->prompt, "Prompt text ('-' or absent: read stdin)");
  cmd->add_flag("--chat", options->chat,
                "Treat the prompt as a user message and apply the chat template");
  cmd->callback([options] { run(*options); });
}

}  // namespace inferd::app
