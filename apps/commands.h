// Each `inferd` subcommand lives in its own file and registers itself on the CLI here.
// A registration adds a CLI11 subcommand and sets its callback; the callback throws
// inferd::Error for bad input, which main() prints as one clear line.
#pragma once

#include <CLI/CLI.hpp>

#include "util/paths.h"

namespace inferd::app {

void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_serve(CLI::App& app);
void register_template(CLI::App& app);
void register_quantize(CLI::App& app);
void register_dequantize(CLI::App& app);

using inferd::default_model_path;  // util/paths.h

}  // namespace inferd::app
