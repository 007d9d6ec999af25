// `inferd chat`: an interactive multi-turn conversation through the public library API
// (include/inferd/engine.h). History is kept and re-rendered with the chat template every turn
// (the prefix cache keeps the earlier turns' KV); /reset clears it, Ctrl-D (end of input) exits.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "commands.h"
#include "generation_options.h"
#include "inferd/engine.h"
#include "stream_output.h"

namespace inferd::app {
namespace {

void chat(const GenerationOptions& options) {
  inferd::Engine engine(options.model.empty() ? default_model_path() : options.model,
                        options.api_options());
  const inferd::SamplingParams params = options.api_sampling();
  std::vector<inferd::ChatMessage> history;
  if (!options.system_prompt.empty()) history.push_back({"system", options.system_prompt});
  const size_t base = history.size();
  // A missing or bad template is reported now (and the command fails), not at the first message:
  // render a turn of the shape every template takes.
  std::vector<inferd::ChatMessage> probe = history;
  probe.push_back({"user", "hello"});
  engine.apply_chat_template(probe);
  fmt::print(stderr, "[inferd] {} — type a message; /reset clears the history, Ctrl-D exits\n",
             engine.model_info().name);
  const auto print = [](const inferd::StreamDelta& delta) {
    if (delta.text.empty()) return;  // a choice's last delta may have none
    std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
    std::fflush(stdout);
  };
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
    inferd::RequestOutput output;
    try {
      output = engine.chat(history, params, print);
    } catch (const inferd::Error& e) {
      // Too long for the context: say so and drop the turn, keeping the session alive.
      history.pop_back();
      fmt::print(stderr, "[inferd] {} (use /reset to start over)\n", e.what());
      continue;
    }
    std::fputc('\n', stdout);
    history.push_back({"assistant", output.outputs.front().text});
    if (!options.quiet_stats) print_stats(output, engine.stats());
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
