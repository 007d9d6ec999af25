#include "generation_options.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "commands.h"
#include "util/error.h"

namespace inferd::app {

int default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 4u));
}

void ThreadOptions::add_to(CLI::App& cmd) {
  cmd.add_option("-t,--threads", threads, "Threads (0: cores, at most 4)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--no-pin", no_pin,
               "Let the OS move the compute threads between CPUs (by default, when there are as "
               "many threads as CPUs this process may use, each stays on its own)");
}

int ThreadOptions::count() const {
  return threads > 0 ? threads : default_threads();
}

void add_parallel_options(CLI::App& cmd, int& tensor_ranks, int& pipeline_ranks, int& data_ranks,
                          bool& expert_parallel) {
  cmd.add_option("--tensor-parallel,--tensor-parallel-size", tensor_ranks,
                 "Split the model over this many processes (tensor parallelism: heads and "
                 "feed-forward columns per rank), started by `mpirun -n N inferd ...` on one "
                 "machine or several")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--pipeline-parallel,--pipeline-parallel-size", pipeline_ranks,
                 "Split the model over this many processes by layers (pipeline parallelism: a "
                 "run of layers per rank, micro-batches flowing from rank to rank), started by "
                 "`mpirun -n N inferd ...`")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--data-parallel,--data-parallel-size", data_ranks,
                 "Run the model in this many processes, each holding all of it but 1/N of the "
                 "vocabulary projection (with --expert-parallel: 1/N of the experts too) and "
                 "computing its own sequences, started by `mpirun -n N inferd ...`")
      ->check(CLI::Range(1, 64));
  cmd.add_flag("--expert-parallel,--enable-expert-parallel", expert_parallel,
               "With --tensor-parallel N: a mixture of experts' experts spread whole over the N "
               "ranks (1/N of them each), attention split by heads as without. With "
               "--data-parallel N: the same spread of experts, each token sent to its experts' "
               "ranks and back (all-to-all)");
}

void add_lora_options(CLI::App& cmd, std::vector<model::LoraSpec>& adapters) {
  // llama.cpp's forms: --lora FNAME[,FNAME...] and --lora-scaled FNAME:SCALE[,FNAME:SCALE...],
  // each repeatable.
  const auto items = [](const std::string& value) {
    std::vector<std::string> out;
    for (size_t begin = 0;;) {
      const size_t comma = value.find(',', begin);
      out.push_back(value.substr(begin, comma - begin));
      if (comma == std::string::npos) return out;
      begin = comma + 1;
    }
  };
  cmd.add_option_function<std::vector<std::string>>(
         "--lora",
         [&adapters, items](const std::vector<std::string>& values) {
           for (const std::string& value : values)
             for (const std::string& file : items(value)) adapters.push_back({file, 1.0f});
         },
         "LoRA adapter (GGUF), FNAME[,FNAME...] (repeatable), at scale 1 for every request "
         "that gives no scales of its own")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd.add_option_function<std::vector<std::string>>(
         "--lora-scaled",
         [&adapters, items](const std::vector<std::string>& values) {
           for (const std::string& value : values) {
             for (const std::string& item : items(value)) {
               const size_t colon = item.rfind(':');
               float scale = 0;
               size_t used = 0;
               try {
                 if (colon == std::string::npos) throw std::invalid_argument("no scale");
                 scale = std::stof(item.substr(colon + 1), &used);
               } catch (const std::exception&) {
                 used = std::string::npos;
               }
               if (colon == 0 || used != item.size() - colon - 1)
                 throw CLI::ValidationError(
                     "--lora-scaled", "'" + item + "' is not FNAME:SCALE (a file and a number)");
               adapters.push_back({item.substr(0, colon), scale});
             }
           }
         },
         "LoRA adapter with its scale: FNAME:SCALE[,FNAME:SCALE...] (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_device_option(CLI::App& cmd, model::Device& device) {
  // llama.cpp's names too: "none" (no GPU) and "CUDA0" (its first CUDA device).
  cmd.add_option_function<std::string>(
      "--device",
      [&device](const std::string& value) {
        std::string name = value;
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (name == "cpu" || name == "none") {
          device = model::Device::kCpu;
        } else if (name == "cuda" || name == "cuda0") {
          device = model::Device::kCuda;
        } else {
          throw CLI::ValidationError("--device", "'" + value +
                                                     "' is not a device: cpu, or cuda (one NVIDIA "
                                                     "GPU; llama.cpp's none and CUDA0 are taken too)");
        }
      },
      "Where the model runs: cpu, or cuda (one NVIDIA GPU; llama.cpp's none and CUDA0 are taken "
      "too)");
}

void add_kv_type_options(CLI::App& cmd, DType& key_type, DType& value_type) {
  const auto add = [&cmd](const std::string& name, DType& type, const std::string& help) {
    cmd.add_option_function<std::string>(
           name,
           [&type](std::string value) {  // one of the three names, in any case (the check)
             for (char& ch : value) ch = static_cast<char>(std::tolower(ch));
             type = value == "q8_0" ? DType::Q8_0 : value == "q4_0" ? DType::Q4_0 : DType::F16;
           },
           help)
        ->check(CLI::IsMember({"f16", "q8_0", "q4_0"}, CLI::ignore_case));
  };
  // -ctk and -ctv (llama.cpp's spellings) are renamed to these by main().
  add("--cache-type-k", key_type, "KV cache type of the keys: f16 (default), q8_0 or q4_0 (-ctk)");
  add("--cache-type-v", value_type,
      "KV cache type of the values: f16 (default), q8_0 or q4_0 (-ctv)");
}

void add_exact_recent_option(CLI::App& cmd, int& tokens) {
  cmd.add_option("--cache-exact-recent", tokens,
                 "With a q8_0 or q4_0 KV cache: also keep F16 copies of each sequence's first block "
                 "and of at least its latest N keys, which attention reads instead (0: none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
}

void add_prefix_cache_option(CLI::App& cmd, bool& no_prefix_cache) {
  cmd.add_flag("--no-prefix-cache", no_prefix_cache,
               "Do not reuse the KV of earlier requests' prompts (automatic prefix caching)");
}

void add_swa_full_option(CLI::App& cmd, bool& swa_full) {
  cmd.add_flag("--swa-full", swa_full,
               "Sliding-window layers keep every position in the KV cache, not only their window");
}

void add_grammar_thread_option(CLI::App& cmd, engine::GrammarThread& grammar_thread) {
  cmd.add_option_function<std::string>(
         "--grammar-thread",
         [&grammar_thread](const std::string& mode) {
           grammar_thread = mode == "on"    ? engine::GrammarThread::kOn
                            : mode == "off" ? engine::GrammarThread::kOff
                                            : engine::GrammarThread::kAuto;
         },
         "Structured output: compute grammar masks on a thread of their own while the forward "
         "pass runs (on), or after it on the compute threads (off); auto: on when a CPU is free "
         "beyond --threads")
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

void add_spec_options(CLI::App& cmd, engine::SpeculativeConfig& spec) {
  cmd.add_option_function<std::string>(
         "--spec",
         [&spec](const std::string& name) { spec.method = engine::parse_spec_method(name); },
         "Speculative decoding: off (default), ngram (drafts from earlier text: prompt lookup), "
         "draft (drafts from --draft-model), mtp (the model's own multi-token-prediction "
         "layer drafts: Qwen3.5, GLM-4.5 files that carry one) or eagle3 (an EAGLE-3 head, "
         "--draft-model, drafts from the model's hidden states)")
      ->check(CLI::IsMember({"off", "ngram", "draft", "mtp", "eagle3"}));
  cmd.add_option("--draft-model,--model-draft", spec.draft_model,
                 "GGUF file of a small model with the same vocabulary that drafts tokens "
                 "(implies --spec draft), or with --spec eagle3 of the EAGLE-3 head")
      ->each([&spec](const std::string&) {
        if (spec.method != engine::SpecMethod::kEagle3) spec.method = engine::SpecMethod::kDraftModel;
      });
  cmd.add_option_function<std::string>(
      "--speculative-config",
      [&spec](const std::string& json) { spec = engine::parse_speculative_config(json, spec); },
      "vLLM's JSON form, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
      "\"prompt_lookup_max\": 5}' or '{\"model\": \"draft.gguf\"}'");
  cmd.add_option("--spec-k", spec.num_tokens,
                 "Most draft tokens per sequence and step (adapts to acceptance below it)")
      ->check(CLI::Range(1, engine::SpecDecodeStats::kMaxPositions));
  cmd.add_option("--spec-ngram-min", spec.prompt_lookup_min,
                 "Shortest n-gram looked up for a draft (vLLM prompt_lookup_min; next to where "
                 "the text was copying from, one token is enough)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--spec-ngram-max", spec.prompt_lookup_max,
                 "Longest n-gram looked up for a draft (vLLM prompt_lookup_max)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--spec-max-rows", spec.max_step_rows,
                 "Drafts stop when a step's decode rows (sequences + drafts) would pass this "
                 "(0: no limit)")
      ->check(CLI::NonNegativeNumber);
}

void add_sampling_options(CLI::App& cmd, sampling::SamplingParams& sampling) {
  cmd.add_option("--temp,--temperature", sampling.temperature, "Temperature (0: greedy)");
  cmd.add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", sampling.top_p, "Nucleus sampling mass (1: off)");
  cmd.add_option("--min-p", sampling.min_p,
                 "Drop tokens below min-p times the top probability (0: off)");
  cmd.add_option("--repeat-penalty", sampling.repetition_penalty, "Repetition penalty (1: off)");
  cmd.add_option("--repeat-last-n", sampling.repeat_last_n,
                 "Tokens the repetition penalty looks back over");
  cmd.add_option("--presence-penalty", sampling.presence_penalty, "Presence penalty (0: off)");
  cmd.add_option("--frequency-penalty", sampling.frequency_penalty, "Frequency penalty (0: off)");
  cmd.add_option("-s,--seed", sampling.seed,
                 "Random seed (same seed and settings: same text; default: a new one each time)");
  // llama.cpp's own samplers, with its flag names (any of the first four: its chain's order).
  cmd.add_option("--typical,--typical-p", sampling.typical_p, "Locally typical sampling (1: off)");
  cmd.add_option("--top-nsigma,--top-n-sigma", sampling.top_n_sigma,
                 "Keep logits within n standard deviations of the top one (<= 0: off)");
  cmd.add_option("--xtc-probability", sampling.xtc_probability,
                 "Chance that XTC removes the top choices at a step (0: off)");
  cmd.add_option("--xtc-threshold", sampling.xtc_threshold,
                 "Probability from which XTC removes a top choice (> 0.5: off)");
  cmd.add_option("--dynatemp-range", sampling.dynatemp_range,
                 "Dynamic temperature: temperature +- this, by the entropy (0: off)");
  cmd.add_option("--dynatemp-exp", sampling.dynatemp_exponent, "Dynamic temperature exponent");
  cmd.add_option("--mirostat", sampling.mirostat, "Mirostat 1 or 2 (0: off)")
      ->check(CLI::Range(0, 2));
  cmd.add_option("--mirostat-lr", sampling.mirostat_eta, "Mirostat learning rate (eta)");
  cmd.add_option("--mirostat-ent", sampling.mirostat_tau, "Mirostat target surprise (tau)");
  cmd.add_option("--dry-multiplier", sampling.dry_multiplier, "DRY penalty multiplier (0: off)");
  cmd.add_option("--dry-base", sampling.dry_base, "DRY penalty base");
  cmd.add_option("--dry-allowed-length", sampling.dry_allowed_length,
                 "DRY: repeats up to this long are free");
  cmd.add_option("--dry-penalty-last-n", sampling.dry_penalty_last_n,
                 "DRY: tokens looked back over (-1: the whole context, 0: off)");
  cmd.add_option_function<std::vector<std::string>>(
         "--dry-sequence-breaker",
         [&sampling](const std::vector<std::string>& given) {
           // The first one replaces the defaults; "none" clears what came before it.
           sampling.dry_sequence_breakers.clear();
           for (const std::string& b : given) {
             if (b == "none") {
               sampling.dry_sequence_breakers.clear();
             } else {
               sampling.dry_sequence_breakers.push_back(b);
             }
           }
         },
         "DRY sequence breaker (repeatable; replaces the defaults \\n : \" *; none: no breakers)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void GenerationOptions::add_to(CLI::App& cmd) {
  cmd.add_option("-m,--model", model, "GGUF model file (default: the fetched SmolLM2)");
  cmd.add_option("-n,--max-tokens", max_tokens, "Most tokens to generate")
      ->check(CLI::PositiveNumber);
  cmd.add_option("-c,--ctx-size", context, "Context size in tokens (0: the model's, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  threads.add_to(cmd);
  add_sampling_options(cmd, sampling);
  cmd.add_option("--stop", stop, "Stop string (repeatable); never part of the output");
  cmd.add_flag("--ignore-eos", ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd.add_option(
      "--chat-template", chat_template,
      "Chat template: a built-in name (chatml, llama3, gemma, mistral-v7, phi3, ...) or a file");
  cmd.add_option("--system", system_prompt, "System message for chat mode");
  cmd.add_flag("--no-stats", quiet_stats, "Do not print timing statistics to stderr");
  add_kv_type_options(cmd, kv_key_type, kv_value_type);
  add_exact_recent_option(cmd, kv_exact_recent);
  add_swa_full_option(cmd, swa_full);
  add_prefix_cache_option(cmd, no_prefix_cache);
  add_spec_options(cmd, spec);
  add_grammar_thread_option(cmd, grammar_thread);
  add_device_option(cmd, device);
  add_lora_options(cmd, lora);
  add_parallel_options(cmd, tensor_parallel, pipeline_parallel, data_parallel, expert_parallel);
  auto* schema = cmd.add_option("-j,--json-schema,--json-schema-file", json_schema,
                                "Constrain the output to a JSON schema (inline JSON or a file)");
  auto* gbnf = cmd.add_option("--grammar,--grammar-file", grammar,
                              "Constrain the output to a GBNF grammar, start rule root (inline "
                              "or a file)");
  auto* re = cmd.add_option("--regex", regex, "Constrain the output to a regular expression");
  schema->excludes(gbnf)->excludes(re);
  gbnf->excludes(re);
}

namespace {

// An option that is either the text itself or a file holding it: inline text is recognised by
// what files names lack (a schema's braces, a grammar's "::=").
std::string inline_or_file(const std::string& value, std::string_view inline_marker,
                           const char* option) {
  if (value.find(inline_marker) != std::string::npos) return value;
  std::ifstream in(value);
  if (!in) fail("{} '{}' is neither inline text nor a readable file", option, value);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

inferd::EngineOptions GenerationOptions::api_options() const {
  const auto kv = [](DType type) {
    return type == DType::Q8_0   ? inferd::KvCacheType::kQ8_0
           : type == DType::Q4_0 ? inferd::KvCacheType::kQ4_0
                                 : inferd::KvCacheType::kF16;
  };
  inferd::EngineOptions o;
  o.threads = threads.count();
  o.pin_threads = threads.pin();
  o.context = context;
  o.max_seqs = 1;
  o.kv_cache_type_k = kv(kv_key_type);
  o.kv_cache_type_v = kv(kv_value_type);
  o.kv_exact_recent_tokens = kv_exact_recent;
  o.swa_full = swa_full;
  o.prefix_caching = !no_prefix_cache;
  o.device = device == model::Device::kCuda ? inferd::Device::kCuda : inferd::Device::kCpu;
  for (const model::LoraSpec& a : lora) o.lora_adapters.push_back({a.path, a.scale});
  o.tensor_parallel = tensor_parallel;
  o.pipeline_parallel = pipeline_parallel;
  o.data_parallel = data_parallel;
  o.expert_parallel = expert_parallel;
  o.grammar_thread = grammar_thread == engine::GrammarThread::kOn    ? inferd::GrammarThread::kOn
                     : grammar_thread == engine::GrammarThread::kOff ? inferd::GrammarThread::kOff
                                                                     : inferd::GrammarThread::kAuto;
  o.speculative.method = std::string(engine::spec_method_name(spec.method));
  o.speculative.draft_model = spec.draft_model;
  o.speculative.num_tokens = spec.num_tokens;
  o.speculative.prompt_lookup_min = spec.prompt_lookup_min;
  o.speculative.prompt_lookup_max = spec.prompt_lookup_max;
  o.speculative.max_step_rows = spec.max_step_rows;
  o.chat_template = chat_template;
  return o;
}

inferd::SamplingParams GenerationOptions::api_sampling() const {
  inferd::SamplingParams p;
  p.temperature = sampling.temperature;
  p.top_k = sampling.top_k;
  p.top_p = sampling.top_p;
  p.min_p = sampling.min_p;
  p.repetition_penalty = sampling.repetition_penalty;
  p.repeat_last_n = sampling.repeat_last_n;
  p.presence_penalty = sampling.presence_penalty;
  p.frequency_penalty = sampling.frequency_penalty;
  p.typical_p = sampling.typical_p;
  p.top_n_sigma = sampling.top_n_sigma;
  p.xtc_probability = sampling.xtc_probability;
  p.xtc_threshold = sampling.xtc_threshold;
  p.dynatemp_range = sampling.dynatemp_range;
  p.dynatemp_exponent = sampling.dynatemp_exponent;
  p.mirostat = sampling.mirostat;
  p.mirostat_tau = sampling.mirostat_tau;
  p.mirostat_eta = sampling.mirostat_eta;
  p.dry_multiplier = sampling.dry_multiplier;
  p.dry_base = sampling.dry_base;
  p.dry_allowed_length = sampling.dry_allowed_length;
  p.dry_penalty_last_n = sampling.dry_penalty_last_n;
  p.dry_sequence_breakers = sampling.dry_sequence_breakers;
  if (sampling.seed != sampling::SamplingParams::kRandomSeed) p.seed = sampling.seed;
  p.max_tokens = max_tokens;
  p.stop = stop;
  p.ignore_eos = ignore_eos;
  if (!json_schema.empty()) p.json_schema = inline_or_file(json_schema, "{", "--json-schema");
  if (!grammar.empty()) p.grammar = inline_or_file(grammar, "::=", "--grammar");
  p.regex = regex;
  return p;
}

}  // namespace inferd::app
