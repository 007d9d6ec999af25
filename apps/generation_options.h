// Command-line options shared by `inferd run` and `inferd chat`: model, engine shape and
// sampling, registered on a CLI11 subcommand and turned into engine and request settings.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "inferd/engine.h"

namespace inferd::app {

// -t/--threads and --no-pin, for every command that computes.
struct ThreadOptions {
  int threads = 0;  // 0: the default for this machine
  bool no_pin = false;

  void add_to(CLI::App& cmd);
  int count() const;
  bool pin() const { return !no_pin; }
};

struct GenerationOptions {
  std::string model;
  int64_t max_tokens = 256;
  int64_t context = 0;
  ThreadOptions threads;
  sampling::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string chat_template;  // built-in name or file; empty: the model's own
  std::string system_prompt;
  bool quiet_stats = false;
  DType kv_key_type = DType::F16;
  DType kv_value_type = DType::F16;
  int kv_exact_recent = 32;
  bool swa_full = false;
  bool no_prefix_cache = false;
  engine::SpeculativeConfig spec;
  engine::GrammarThread grammar_thread = engine::GrammarThread::kAuto;
  model::Device device = model::Device::kCpu;
  std::vector<model::LoraSpec> lora;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  bool expert_parallel = false;
  // Structured output (structured/grammar.h): at most one of these.
  std::string json_schema;  // a JSON schema, inline or a file's path
  std::string grammar;      // a GBNF grammar, inline or a file's path
  std::string regex;        // a regular expression the whole output matches

  void add_to(CLI::App& cmd);
  // The same settings for the public API (include/inferd/engine.h), which `run` and `chat` use:
  // the engine's options (max_seqs 1: one conversation) and the sampling of each request, with
  // the output constraint's text read from its file where a file was given.
  inferd::EngineOptions api_options() const;
  inferd::SamplingParams api_sampling() const;
};

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
// --frequency-penalty, -s/--seed (llama.cpp's names), over the values `sampling` holds.
void add_sampling_options(CLI::App& cmd, sampling::SamplingParams& sampling);
// -ctk/--cache-type-k and -ctv/--cache-type-v (f16, q8_0 or q4_0, as llama.cpp spells them).
void add_kv_type_options(CLI::App& cmd, DType& key_type, DType& value_type);
// --cache-exact-recent N: a quantized KV cache's exact copies (kv/kv_cache.h).
void add_exact_recent_option(CLI::App& cmd, int& tokens);
// --swa-full (llama.cpp's flag): sliding-window layers keep every position in the KV cache.
void add_swa_full_option(CLI::App& cmd, bool& swa_full);
// --no-prefix-cache: every request computes its whole prompt (kv/prefix_cache.h).
void add_prefix_cache_option(CLI::App& cmd, bool& no_prefix_cache);

// --device cpu|cuda: where the model runs (model::Device; cuda: one GPU, src/cuda/).
void add_device_option(CLI::App& cmd, model::Device& device);
// --lora FILE and --lora-scaled FILE SCALE (llama.cpp's flags; repeatable): LoRA adapters.
void add_lora_options(CLI::App& cmd, std::vector<model::LoraSpec>& adapters);
// --tensor-parallel N (vLLM's -tp / --tensor-parallel-size): the model split over the N
// processes of `mpirun -n N` (dist/model_parallel.h).
// --tensor-parallel, --pipeline-parallel, --data-parallel and --expert-parallel
// (dist/model_parallel.h).
void add_parallel_options(CLI::App& cmd, int& tensor_ranks, int& pipeline_ranks, int& data_ranks,
                          bool& expert_parallel);

// --grammar-thread auto|on|off (engine::GrammarThread).
void add_grammar_thread_option(CLI::App& cmd, engine::GrammarThread& grammar_thread);

// --spec off|ngram, --spec-k, --spec-ngram-min/max, --spec-max-rows (engine/speculative.h).
void add_spec_options(CLI::App& cmd, engine::SpeculativeConfig& spec);

// The thread count used when none is given: the number of cores, at most 4 (small models
// gain nothing past that and lose to synchronisation).
int default_threads();

}  // namespace inferd::app
