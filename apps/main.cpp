// inferd: the command-line entry point. Parses the subcommand and runs it.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"inferd: run and serve GGUF language models on the CPU"};
  app.require_subcommand(1);
  inferd::app::register_inspect(app);
  inferd::app::register_tokenize(app);
  inferd::app::register_detokenize(app);
  inferd::app::register_run(app);
  inferd::app::register_chat(app);
  inferd::app::register_perplexity(app);
  inferd::app::register_bench(app);
  inferd::app::register_serve(app);
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
