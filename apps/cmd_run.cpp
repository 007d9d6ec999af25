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
  int32_t beams = 0;  // > 0: beam search with this many beams
  float length_penalty = 1.0f;
};

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void run(const RunOptions& options) {
  gguf::GgufFile file =
      gguf::GgufFile::open(options.model.empty() ? default_model_path() : options.model);
  engine::EngineConfig config = options.engine_config();
  if (options.beams > 0) config.max_seqs = options.beams;  // one running sequence per beam
  engine::Engine engine(file, config);
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
  engine::Request request = options.make_request(std::move(ids), output);
  request.beam_width = options.beams;
  request.length_penalty = options.length_penalty;
  request.grammar = options.compile_constraint(engine);
  engine.add_request(std::move(request));
  engine.run_until_idle();
  const engine::RequestResult& result = output->result();
  if (!result.beams.empty()) {  // a beam search's text is known only at its end
    std::fputs(result.beams.front().text.c_str(), stdout);
    std::fflush(stdout);
    if (!options.quiet_stats) {
      fmt::print(stderr,
                 "\nbeam search: best of {} beams, {} tokens, log-probability {:.4f}, "
                 "score {:.4f} ({})\n",
                 options.beams, result.beams.front().tokens.size(),
                 result.beams.front().cum_logprob, result.beams.front().score,
                 engine::finish_reason_name(result.beams.front().finish_reason));
    }
  }
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
  cmd->add_option("--beams", options->beams,
                  "Beam search with this many beams; prints the highest-scoring text (sampling "
                  "options do not apply)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--length-penalty", options->length_penalty,
                  "Beam search: score = log-probability / length ^ this (default 1)");
  cmd->callback([options] { run(*options); });
}

}  // namespace inferd::app
