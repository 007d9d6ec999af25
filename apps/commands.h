// Each `inferd` subcommand lives in its own file and registers itself on the CLI here.
// A registration adds a CLI11 subcommand and sets its callback; the callback throws
// inferd::Error for bad input, which main() prints as one clear line.
#pragma once

#include <CLI/CLI.hpp>

namespace inferd::app {

void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);

// The default model: $INFERD_MODEL, else the file scripts/fetch-model caches.
std::string default_model_path();

}  // namespace inferd::app
