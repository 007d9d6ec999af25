#include "generation_options.h"

#include <thread>

#include "commands.h"

namespace inferd::app {

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 4u));
}

void GenerationOptions::add_to(CLI::App& cmd) {
  cmd.add_option("-m,--model", model, "GGUF model file (default: the fetched SmolLM2)");
  cmd.add_option("-n,--max-tokens", max_tokens, "Most tokens to generate")
      ->check(CLI::PositiveNumber);
  cmd.add_option("-c,--ctx-size", context, "Context size in tokens (0: the model's, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("-t,--threads", threads, "Threads (0: cores, at most 4)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--temp", sampling.temperature, "Temperature (0: greedy)");
  cmd.add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", sampling.top_p, "Nucleus sampling mass (1: off)");
  cmd.add_option("--min-p", sampling.min_p,
                 "Drop tokens below min-p times the top probability (0: off)");
  cmd.add_option("--repeat-penalty", sampling.repetition_penalty, "Repetition penalty (1: off)");
  cmd.add_option("--repeat-last-n", sampling.repeat_last_n,
                 "Tokens the repetition penalty looks back over");
  cmd.add_option("--presence-penalty", sampling.presence_penalty, "Presence penalty (0: off)");
  cmd.add_option("--frequency-penalty", sampling.frequency_penalty, "Frequency penalty (0: off)");
  cmd.add_option("-s,--seed", sampling.seed, "Random seed (same seed and settings: same text)");
  cmd.add_option("--stop", stop, "Stop string (repeatable); never part of the output");
  cmd.add_flag("--ignore-eos", ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd.add_option("--chat-template", chat_template,
                 "Chat template: a built-in name (chatml) or a file");
  cmd.add_option("--system", system_prompt, "System message for chat mode");
  cmd.add_flag("--no-stats", quiet_stats, "Do not print timing statistics to stderr");
}

engine::EngineConfig GenerationOptions::engine_config() const {
  engine::EngineConfig config;
  config.threads = threads > 0 ? threads : default_threads();
  config.context = context;
  config.max_seqs = 1;
  return config;
}

engine::Request GenerationOptions::make_request(
    std::vector<int32_t> prompt, std::shared_ptr<engine::OutputChannel> output) const {
  engine::Request request;
  request.prompt = std::move(prompt);
  request.sampling = sampling;
  request.max_tokens = max_tokens;
  request.stop = stop;
  request.ignore_eos = ignore_eos;
  request.output = std::move(output);
  return request;
}

}  // namespace inferd::app
