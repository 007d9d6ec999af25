// inferd: the command-line entry point. Parses the subcommand and runs it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "dist/communicator.h"
#include "dist/model_parallel.h"
#include "inferd/engine.h"
#include "util/error.h"

namespace {

// llama.cpp's multi-letter short options that inferd takes too; CLI11 allows one letter after a
// single dash, so they are renamed to their long forms before parsing. `inferd serve` also takes
// long names written with underscores, as llama-server does (--backend_sampling is
// --backend-sampling): the name, up to any "=value", is read with dashes. Only there: the other
// commands take text (prompts) that may look like an option.
std::vector<std::string> with_long_names(int argc, char** argv) {
  static const std::pair<const char*, const char*> kLongNames[] = {
      {"-ctk", "--cache-type-k"},    {"-ctv", "--cache-type-v"},      {"-md", "--draft-model"},
      {"-np", "--parallel"},         {"-ngl", "--n-gpu-layers"},      {"-ub", "--ubatch-size"},
      {"-fa", "--flash-attn"},       {"-tb", "--threads-batch"},      {"-to", "--timeout"},
      {"-sm", "--split-mode"},       {"-ts", "--tensor-split"},       {"-mg", "--main-gpu"},
      {"-lv", "--log-verbosity"},    {"-nocb", "--no-cont-batching"}, {"-nkvo", "--no-kv-offload"},
      {"-dev", "--device"},          {"-cb", "--cont-batching"},      {"-rea", "--reasoning"},
      {"-bs", "--backend-sampling"}, {"-kvu", "--kv-unified"},        {"-ag", "--agent"},
      {"-no-ag", "--no-agent"},     {"-tp", "--tensor-parallel"}, {"-pp", "--pipeline-parallel"},
      {"-ep", "--expert-parallel"},  {"-dp", "--data-parallel"}};
  std::vector<std::string> args(argv, argv + argc);
  const bool serve = args.size() > 1 && args[1] == "serve";
  for (std::string& a : args) {
    for (const auto& [short_name, long_name] : kLongNames)
      if (a == short_name) a = long_name;
    if (serve && a.starts_with("--"))
      std::replace(a.begin(), a.begin() + std::min(a.find('='), a.size()), '_', '-');
  }
  return args;
}

}  // namespace

namespace {

int run_command(int argc, char** argv) {
  CLI::App app{"inferd: run and serve GGUF language models on the CPU"};
  app.require_subcommand(1);
  // (CLI11 prints it and exits 0 before asking for a subcommand)
  app.set_version_flag("--version", std::string("inferd ") + inferd::version());
  inferd::app::register_inspect(app);
  inferd::app::register_tokenize(app);
  inferd::app::register_detokenize(app);
  inferd::app::register_run(app);
  inferd::app::register_chat(app);
  inferd::app::register_perplexity(app);
  inferd::app::register_bench(app);
  inferd::app::register_serve(app);
  inferd::app::register_template(app);
  inferd::app::register_quantize(app);
  inferd::app::register_dequantize(app);
  try {
    std::vector<std::string> args = with_long_names(argc, argv);
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    args.pop_back();                         // the program name
    app.parse(args);
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

}  // namespace

// Under `mpirun -n N` every process starts here: rank 0 runs the command (whose engine splits
// the model over the ranks, --tensor-parallel N), the others follow it (dist::run_worker) until
// it is done.
int main(int argc, char** argv) {
  inferd::dist::init(argc, argv);
  inferd::dist::Communicator& world = inferd::dist::world();
  const int code = world.rank() == 0 ? run_command(argc, argv) : inferd::dist::run_worker(world);
  inferd::dist::release_workers(world);
  inferd::dist::finalize();
  return code;
}
