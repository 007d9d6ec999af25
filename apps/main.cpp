// inferd: the command-line entry point. Parses the subcommand and runs it.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "util/error.h"

namespace inferd::app {

std::string default_model_path() {
  if (const char* env = std::getenv("INFERD_MODEL"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  std::string cache = (home != nullptr ? std::string(home) : std::string(".")) + "/.cache/inferd";
  if (const char* env = std::getenv("INFERD_CACHE"); env != nullptr && *env != '\0') cache = env;
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace inferd::app

int main(int argc, char** argv) {
  CLI::App app{"inferd: run and serve GGUF language models on the CPU"};
  app.require_subcommand(1);
  inferd::app::register_inspect(app);
  inferd::app::register_tokenize(app);
  inferd::app::register_detokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const inferd::Error& e) {
    fmt::print(stderr, "inferd: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "inferd: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
