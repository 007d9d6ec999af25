// `inferd perplexity MODEL FILE -c N`: perplexity of a text, defined as llama-perplexity
// defines it (see engine/perplexity.h), printing the running value after every chunk.
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.h"
#include "engine/perplexity.h"
#include "generation_options.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace inferd::app {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string text_file;
  int64_t n_ctx = 512;
  int64_t max_chunks = 0;
  ThreadOptions threads;
  bool json = false;
  DType kv_key_type = DType::F16;
  DType kv_value_type = DType::F16;
  int kv_exact_recent = kv::kDefaultExactRecentTokens;
  std::vector<model::LoraSpec> lora;  // LoRA adapters (llama-perplexity's --lora)
};

void run_perplexity(const PerplexityArgs& args) {
  std::ifstream in(args.text_file, std::ios::binary);
  if (!in) fail("cannot read '{}'", args.text_file);
  std::stringstream text;
  text << in.rdbuf();
  gguf::GgufFile file =
      gguf::GgufFile::open(args.model.empty() ? default_model_path() : args.model);
  auto tokenizer = tokenizer::Tokenizer::from_gguf(file);
  std::vector<int32_t> tokens = tokenizer->encode(text.str(), true, false);
  engine::PerplexityOptions options;
  options.n_ctx = args.n_ctx;
  options.n_batch = std::min<int64_t>(args.n_ctx, 512);
  options.max_chunks = args.max_chunks;
  options.kv_key_type = args.kv_key_type;
  options.kv_value_type = args.kv_value_type;
  options.kv_exact_recent = args.kv_exact_recent;
  options.bos_id = tokenizer->vocab().add_bos() ? tokenizer->vocab().special().bos : -1;
  model::ModelOptions model_options{options.n_batch, args.n_ctx};
  model_options.lora = args.lora;
  auto model = model::load_model(file, model_options);
  ThreadPool pool(args.threads.count(), args.threads.pin());
  fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}\n", tokens.size(),
             tokens.size() / args.n_ctx, args.n_ctx);
  auto result = engine::perplexity(*model, pool, tokens, options, [](int64_t chunk, double ppl) {
    fmt::print(stderr, "[{}]{:.4f} ", chunk + 1, ppl);
    std::fflush(stderr);
  });
  fmt::print(stderr, "\n");
  if (args.json) {
    fmt::print(
        "{{\"n_ctx\": {}, \"tokens\": {}, \"chunks\": {}, \"scored\": {}, \"ppl\": {:.6f}, "
        "\"stderr\": {:.6f}}}\n",
        args.n_ctx, result.num_tokens, result.num_chunks, result.num_scored, result.ppl,
        result.ppl_stderr);
  } else {
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f} ({} chunks of {}, {} tokens scored)\n",
               result.ppl, result.ppl_stderr, result.num_chunks, args.n_ctx, result.num_scored);
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a model on a text file (llama-perplexity's definition)");
  auto args = std::make_shared<PerplexityArgs>();
  cmd->add_option("model", args->model, "GGUF model file")->required();
  cmd->add_option("file", args->text_file, "Text file")->required();
  cmd->add_option("-c,--ctx-size", args->n_ctx, "Chunk size in tokens")
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--chunks", args->max_chunks, "Evaluate at most this many chunks (0: all)");
  args->threads.add_to(*cmd);
  cmd->add_flag("--json", args->json, "Print the result as JSON");
  add_kv_type_options(*cmd, args->kv_key_type, args->kv_value_type);
  add_exact_recent_option(*cmd, args->kv_exact_recent);
  add_lora_options(*cmd, args->lora);
  cmd->callback([args] { run_perplexity(*args); });
}

}  // namespace inferd::app
