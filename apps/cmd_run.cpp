// `inferd run`: one prompt (from -p or stdin, optionally as a chat turn) through the public
// library API (include/inferd/engine.h), text streamed to stdout as it is made, timings to
// stderr.
#include <cstdio>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "commands.h"
#include "generation_options.h"
#include "inferd/engine.h"
#include "stream_output.h"

namespace inferd::app {
namespace {

struct RunOptions : GenerationOptions {
  std::string prompt;
  bool chat = false;
  int32_t beams = 0;  // > 0: beam search with this many beams
  float length_penalty = 1.0f;
};

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void run(const RunOptions& options) {
  inferd::EngineOptions engine_options = options.api_options();
  if (options.beams > 0) engine_options.max_seqs = options.beams;  // one running sequence per beam
  inferd::Engine engine(options.model.empty() ? default_model_path() : options.model,
                        engine_options);
  std::string prompt =
      options.prompt == "-" || options.prompt.empty() ? read_stdin() : options.prompt;
  inferd::SamplingParams params = options.api_sampling();
  params.beam_width = options.beams;
  params.length_penalty = options.length_penalty;
  const auto print = [](const inferd::StreamDelta& delta) {
    if (delta.text.empty()) return;  // a choice's last delta may have none
    std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
    std::fflush(stdout);
  };
  inferd::RequestOutput output;
  if (options.chat) {
    std::vector<inferd::ChatMessage> messages;
    if (!options.system_prompt.empty()) messages.push_back({"system", options.system_prompt});
    messages.push_back({"user", prompt});
    output = engine.chat(messages, params, print);
  } else {
    output = engine.complete(prompt, params, print);
  }
  const inferd::CompletionOutput& best = output.outputs.front();
  if (options.beams > 0) {  // a beam search's text is known only at its end
    std::fputs(best.text.c_str(), stdout);
    std::fflush(stdout);
    if (!options.quiet_stats) {
      fmt::print(stderr,
                 "\nbeam search: best of {} beams, {} tokens, log-probability {:.4f}, "
                 "score {:.4f} ({})\n",
                 options.beams, best.token_ids.size(), best.cumulative_logprob, best.score,
                 inferd::finish_reason_name(best.finish_reason));
    }
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!options.quiet_stats) print_stats(output, engine.stats());
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*cmd);
  cmd->add_option("-p,--prompt", options->prompt, "Prompt text ('-' or absent: read stdin)");
  cmd->add_flag("--chat", options->chat,
                "Treat the prompt as a user message and apply the chat template");
  cmd->add_option("--beams", options->beams,
                  "Beam search with this many beams; prints the highest-scoring text (sampling "
                  "options do not apply)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--length-penalty", options->length_penalty,
                  "Beam search: score = log-probability / length ^ this (default 1)");
  cmd->callback([options] { run(*options); });
}

}  // namespace inferd::app
