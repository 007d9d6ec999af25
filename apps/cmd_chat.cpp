// `inferd chat`: an interactive multi-turn conversation. History is kept and re-rendered with
// the chat template every turn; /reset clears it, Ctrl-D (end of input) exits.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "commands.h"
#include "generation_options.h"
#include "stream_output.h"
#include "util/error.h"

namespace inferd::app {
namespace {

void chat(const GenerationOptions& options) {
  gguf::GgufFile file =
      gguf::GgufFile::open(options.model.empty() ? default_model_path() : options.model);
  tokenizer::ChatTemplate chat_template = load_chat_template(file, options.chat_template);
  engine::Engine engine(file, options.engine_config());
  // One constraint for every answer of the session (compiled once).
  const std::shared_ptr<const structured::CompiledGrammar> grammar =
      options.compile_constraint(engine);
  std::vector<tokenizer::ChatMessage> history;
  if (!options.system_prompt.empty()) history.push_back({"system", options.system_prompt});
  const size_t base = history.size();
  fmt::print(stderr, "[inferd] {} — type a message; /reset clears the history, Ctrl-D exits\n",
             engine.model_config().name);
  std::string line;
  while (true) {
    fmt::print(stdout, "> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/reset") {
      history.resize(base);
      fmt::print(stderr, "[inferd] history cleared\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    std::vector<int32_t> ids = engine.tokenizer().encode(
        render_chat(engine.tokenizer(), chat_template, history), true, true);
    auto output = std::make_shared<StreamOutput>(stdout);
    try {
      engine::Request request = options.make_request(std::move(ids), output);
      request.grammar = grammar;
      engine.add_request(std::move(request));
    } catch (const Error& e) {
      // Too long for the context: say so and drop the turn, keeping the session alive.
      history.pop_back();
      fmt::print(stderr, "[inferd] {} (use /reset to start over)\n", e.what());
      continue;
    }
    engine.run_until_idle();
    std::fputc('\n', stdout);
    history.push_back({"assistant", output->text()});
    if (!options.quiet_stats) print_stats(output->result(), engine);
  }
  std::fputc('\n', stdout);
}

}  // namespace

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat interactively with a model");
  auto options = std::make_shared<GenerationOptions>();
  options->add_to(*cmd);
  cmd->callback([options] { chat(*options); });
}

}  // namespace inferd::app
