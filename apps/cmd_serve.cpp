// `inferd serve`: the OpenAI-compatible HTTP server over one engine (src/server).
#include <algorithm>
#include <cctype>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "agent/tool_set.h"
#include "commands.h"
#include "generation_options.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "stream_output.h"
#include "structured/grammar.h"
#include "util/comma_list.h"
#include "util/error.h"
#include "util/paths.h"

namespace inferd::app {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  ThreadOptions threads;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  int steps_in_flight = 0;  // (EngineConfig::steps_in_flight)
  bool expert_parallel = false;
  int64_t context = 0;
  int64_t cache_ram_mib = -1;  // --cache-ram: a hybrid model's snapshot memory; -1: the default
  int max_seqs = 16;
  // A step's tokens bound how long the sequences in it wait for their next token, and how
  // long requests that arrive together wait for their first: on a CPU 512 prompt tokens of even
  // a 135M model take about 2 s. 256 halves that; a long prompt alone loses < 1% (BENCHMARKS).
  int64_t max_batched_tokens = 256;
  size_t max_queue = 256;
  double log_interval = 10;
  bool no_prefix_cache = false;
  bool no_bf16_prompts = false;
  server::HttpLimits http;  // the transport's limits (server/http/transport.h)
  std::string api_key;
  bool no_webui = false;
  bool strict_model_name = false;
  std::string cors_origins;
  std::string reasoning_format = "auto";
  std::string served_model_name;
  std::string chat_template;
  DType kv_key_type = DType::F16;
  model::Device device = model::Device::kCpu;
  std::vector<model::LoraSpec> lora;
  std::vector<std::string> lora_modules;  // vLLM's NAME=PATH (or its JSON form)
  bool lora_init_without_apply = false;
  bool enable_lora = false;  // vLLM's flag; no effect
  DType kv_value_type = DType::F16;
  int kv_exact_recent = kv::kDefaultExactRecentTokens;
  bool swa_full = false;
  engine::SpeculativeConfig spec;
  engine::GrammarThread grammar_thread = engine::GrammarThread::kAuto;
  // Defaults of the requests' sampling fields; OpenAI's unless --temp, --seed, ... say.
  sampling::SamplingParams sampling = server::openai_sampling_defaults();
  // The defaults of llama-server's own API (/completion, /infill): llama.cpp's, with the sampling
  // flags that were given (native_sampling_from).
  sampling::SamplingParams native_sampling = server::llama_sampling_defaults();
  // llama-server's flags with a meaning here (see add_llama_server_flags).
  int parallel = 0;       // -np: sequences; splits -c among them as llama-server does
  int64_t n_predict = 0;  // -n: max_tokens of requests that give none
  std::string api_key_file;
  std::string chat_template_file;
  std::vector<std::string> ignored;  // accepted flags that change nothing here
  // Embeddings (server/api/embeddings.h): the routes answer with --embedding or --reranking.
  bool embedding = false;
  bool reranking = false;
  std::string pooling;  // empty: the file's <arch>.pooling_type, else last
  bool no_metrics = false;
  bool verbose = false;
  // llama-server's --kv-unified: the -np sequences share one KV pool of --ctx-size tokens, each
  // able to grow to all of it, instead of each getting ctx-size / np.
  bool kv_unified = false;
  int64_t kv_pool_tokens = 0;  // 0: enough for every sequence's whole context
  // Variables every chat template render gets (llama-server's --chat-template-kwargs, and
  // enable_thinking from --reasoning on|off); a request cannot override them yet.
  std::string chat_template_kwargs;
  std::string reasoning = "auto";
  bool slots = false;
  // llama-server's agent features (server/agent/agent_routes.h): off unless asked for.
  agent::AgentOptions agent;
  bool cors_proxy = false;
  bool agent_all = false;  // --agent: all built-in tools and the CORS proxy
};

// The agent features: they run commands, touch files and reach other hosts with the server's
// rights, so each is off unless named, and the server refuses to offer them on an address
// other machines can reach without --api-key (check_agent_exposure).
void add_agent_flags(CLI::App& cmd, ServeArgs& args) {
  cmd.add_option("--tools", args.agent.tools,
                 "Built-in tools for agents at GET/POST /tools: 'all' or a comma-separated list "
                 "of read_file, file_glob_search, grep_search, exec_shell_command, write_file, "
                 "edit_file, get_info. They run commands and write files as this server's user: "
                 "only for a trusted machine");
  cmd.add_option("--tools-runtime", args.agent.tools_runtime,
                 "Where the tools run by default: 'docker-container:ID', "
                 "'podman-container:ID' (a running container), 'docker:IMAGE', 'podman:IMAGE' (a "
                 "container started for the server, removed at its exit), 'ssh:TARGET' (default: "
                 "this machine)");
  cmd.add_option("--mcp-servers-config", args.agent.mcp_servers_config,
                 "A JSON file of MCP servers ({\"mcpServers\": {NAME: {\"command\", \"args\", "
                 "\"env\", \"timeout_ms\"}}}): their tools are served at /tools as NAME_TOOL");
  cmd.add_option("--mcp-servers-json", args.agent.mcp_servers_json,
                 "The same MCP servers' JSON, inline");
  cmd.add_flag("--ui-mcp-proxy,--webui-mcp-proxy,!--no-ui-mcp-proxy,!--no-webui-mcp-proxy",
               args.cors_proxy,
               "Serve GET/POST /cors-proxy?url=URL: requests to other hosts on the chat page's "
               "behalf (off by default)");
  cmd.add_flag("--agent,!--no-agent", args.agent_all,
               "All built-in tools and the CORS proxy (--tools all --ui-mcp-proxy)");
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

// Tools and the proxy act with this server's rights: on an address another machine can reach,
// only behind a key.
void check_agent_exposure(const ServeArgs& args) {
  if (!args.agent.tools_runtime.empty() && args.agent.tools.empty())
    fail("--tools-runtime {}: there are no built-in tools to run there (add --tools)",
         args.agent.tools_runtime);
  if ((!args.agent.enabled() && !args.cors_proxy) || !args.api_key.empty()) return;
  for (const std::string_view host : comma_list(args.host)) {
    if (!is_loopback_host(host))
      fail(
          "--host {}: the tools and the CORS proxy would let anyone who reaches this address act "
          "as this server's user (commands, files, requests to other hosts); add --api-key (or "
          "listen on 127.0.0.1)",
          host);
  }
}

// llama-server's command line, so that its users can swap the binary: flags with the same
// meaning map onto inferd's; flags for GPUs, memory locking and other things a CPU engine
// with its own scheduler does not have are accepted with one warning each, never an error.
void add_llama_server_flags(CLI::App& cmd, ServeArgs& args) {
  cmd.add_option("--parallel", args.parallel,
                 "llama-server's slots: sequences at once, each with --ctx-size / N of context "
                 "(--max-seqs keeps --ctx-size per sequence)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("-n,--n-predict", args.n_predict,
                 "max_tokens of requests that give none (default: OpenAI's)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  cmd.add_option("--api-key-file", args.api_key_file, "A file whose first line is the API key");
  cmd.add_option("--chat-template-file", args.chat_template_file, "A Jinja chat template file");
  cmd.add_option("--chat-template-kwargs", args.chat_template_kwargs,
                 "Extra chat template variables for every request, a JSON object "
                 "('{\"enable_thinking\": false}')");
  cmd.add_option("--reasoning", args.reasoning,
                 "Thinking in chat answers: the template's enable_thinking, on for on and auto "
                 "(unless --chat-template-kwargs sets it), off for off")
      ->check(CLI::IsMember({"on", "off", "auto"}));
  // Accepted, and the same here: Jinja templates are always used, metrics served unless
  // --no-metrics (llama-server's are off without --metrics; vLLM's always on).
  for (const char* name : {"--jinja", "--metrics", "--cont-batching"})
    cmd.add_flag_callback(
        name, [] {}, "Accepted for llama-server's command line; always on in inferd");
  cmd.add_flag("--no-metrics", args.no_metrics, "GET /metrics answers 501 (on by default)");
  cmd.add_flag("-v,--verbose", args.verbose,
               "Chat answers carry \"__verbose\" with the rendered prompt (a request's "
               "\"verbose\" sets it for itself)");
  cmd.add_option("--cache-ram", args.cache_ram_mib,
                 "MiB of memory for state snapshots, from which prefixes resume: a hybrid "
                 "model's recurrent state (at least two per --max-seqs sequence; default: the "
                 "smaller of 2048 and an eighth of the available memory; -1: the default), or a "
                 "quantized KV cache's exact copies (default: two per sequence). Dense models "
                 "with an F16 cache keep prefixes in the KV pool and ignore it.")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24));
  cmd.add_flag("--kv-unified", args.kv_unified,
               "With --parallel: one KV pool of --ctx-size tokens shared by the sequences, each "
               "able to use all of it (a full pool preempts the newest)");
  cmd.add_flag("--slots,!--no-slots", args.slots,
               "Serve llama-server's GET /slots (off by default, as there)");
  add_agent_flags(cmd, args);
  // Named in the warning by its first long name.
  const auto first_name = [](const std::string& names) { return names.substr(0, names.find(',')); };
  const auto ignore = [&args, first_name](const std::string& flag) {
    return [&args, flag = first_name(flag)](const auto&) { args.ignored.push_back(flag); };
  };
  for (const char* names : {"--gpu-layers,--n-gpu-layers",
                            "--ubatch-size",
                            "--flash-attn",
                            "--threads-batch",
                            "--numa",
                            "--split-mode",
                            "--tensor-split",
                            "--main-gpu",
                            "--cache-reuse",
                            "--keep",
                            "--poll",
                            "--prio",
                            "-C,--cpu-mask",
                            "--log-file",
                            "--slot-save-path",
                            "--sleep-idle-seconds",
                            "--hf-token",
                            "--tags",
                            "--media-path",
                            "--log-verbosity"}) {
    cmd.add_option_function<std::string>(names, ignore(names),
                                         "Accepted and ignored (llama-server)");
  }
  for (const char* names :
       {"--mlock", "--no-mmap", "--mmap", "--no-cont-batching", "--no-kv-offload", "--log-disable",
        "--no-warmup", "--offline", "--context-shift", "--no-context-shift", "--no-jinja",
        "--backend-sampling", "--log-colors", "--no-perf", "--check-tensors", "--cache-idle-slots",
        "--no-cache-idle-slots"}) {
    cmd.add_flag_callback(
        names, [&args, flag = first_name(names)] { args.ignored.push_back(flag); },
        "Accepted and ignored (llama-server)");
  }
}

// llama.cpp's sampling defaults with every sampling flag the command line gave (`given` holds
// the parsed values, OpenAI's defaults where a flag was not given).
sampling::SamplingParams native_sampling_from(const CLI::App& cmd,
                                              const sampling::SamplingParams& given) {
  sampling::SamplingParams out = server::llama_sampling_defaults();
  const auto set = [&](const char* flag) { return cmd.get_option(flag)->count() > 0; };
  if (set("--temp")) out.temperature = given.temperature;
  if (set("--top-k")) out.top_k = given.top_k;
  if (set("--top-p")) out.top_p = given.top_p;
  if (set("--min-p")) out.min_p = given.min_p;
  if (set("--repeat-penalty")) out.repetition_penalty = given.repetition_penalty;
  if (set("--repeat-last-n")) out.repeat_last_n = given.repeat_last_n;
  if (set("--presence-penalty")) out.presence_penalty = given.presence_penalty;
  if (set("--frequency-penalty")) out.frequency_penalty = given.frequency_penalty;
  if (set("--seed")) out.seed = given.seed;
  if (set("--typical")) out.typical_p = given.typical_p;
  if (set("--top-nsigma")) out.top_n_sigma = given.top_n_sigma;
  if (set("--xtc-probability")) out.xtc_probability = given.xtc_probability;
  if (set("--xtc-threshold")) out.xtc_threshold = given.xtc_threshold;
  if (set("--dynatemp-range")) out.dynatemp_range = given.dynatemp_range;
  if (set("--dynatemp-exp")) out.dynatemp_exponent = given.dynatemp_exponent;
  if (set("--mirostat")) out.mirostat = given.mirostat;
  if (set("--mirostat-lr")) out.mirostat_eta = given.mirostat_eta;
  if (set("--mirostat-ent")) out.mirostat_tau = given.mirostat_tau;
  if (set("--dry-multiplier")) out.dry_multiplier = given.dry_multiplier;
  if (set("--dry-base")) out.dry_base = given.dry_base;
  if (set("--dry-allowed-length")) out.dry_allowed_length = given.dry_allowed_length;
  if (set("--dry-penalty-last-n")) out.dry_penalty_last_n = given.dry_penalty_last_n;
  if (set("--dry-sequence-breaker")) out.dry_sequence_breakers = given.dry_sequence_breakers;
  return out;
}

// The extra variables of every chat template render: --chat-template-kwargs, then --reasoning.
nlohmann::ordered_json chat_template_variables(const ServeArgs& args) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (!args.chat_template_kwargs.empty()) {
    vars = nlohmann::ordered_json::parse(args.chat_template_kwargs, nullptr, false);
    if (!vars.is_object())
      fail("--chat-template-kwargs '{}' is not a JSON object", args.chat_template_kwargs);
  }
  // auto: thinking on where the template has a switch, as llama-server renders it (a template
  // left to its own default, such as Command R7B's, would write an empty thinking block).
  if (args.reasoning != "auto" || !vars.contains("enable_thinking"))
    vars["enable_thinking"] = args.reasoning != "off";
  return vars;
}

// Folds llama-server's flags into inferd's settings; warns once per ignored flag.
void apply_llama_server_flags(ServeArgs& args) {
  for (const std::string& flag : args.ignored)
    fmt::print(stderr,
               "[inferd] warning: {} is accepted for llama-server's command line and "
               "ignored (nothing it sets exists in inferd's CPU engine)\n",
               flag);
  if (args.parallel > 0) {
    args.max_seqs = args.parallel;
    if (args.kv_unified) {
      args.kv_pool_tokens = args.context;
    } else if (args.context > 0) {
      args.context = std::max<int64_t>(args.context / args.parallel, 1);
    }
  }
  if (!args.api_key_file.empty()) {
    std::ifstream in(args.api_key_file);
    std::string line;
    if (in) std::getline(in, line);
    // A key never ends in white space; a file written on Windows ends its line with \r.
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (line.empty())
      fail("--api-key-file {}: cannot read a key from its first line", args.api_key_file);
    args.api_key = line;
  }
  // The sampling flags become every request's defaults: a bad one is an error now, naming it,
  // rather than in every request that leaves the field out.
  try {
    args.sampling.validate();
  } catch (const Error& e) {
    fail("sampling flags (--temp, --top-k, ...): {}", e.what());
  }
  if (!args.chat_template_file.empty()) args.chat_template = args.chat_template_file;
  if (args.agent_all) {
    args.agent.tools = "all";
    args.cors_proxy = true;
  }
  check_agent_exposure(args);
}

// What the embedding routes serve. Pooling comes from --pooling, else from the file (embedding
// models name theirs), else `last`: llama.cpp would pool a decoder without the key per token
// ("none"), which the OpenAI route refuses, while a causal model's last token is the one that
// has read the whole input.
server::EmbeddingOptions embedding_options(const ServeArgs& args, const gguf::GgufFile& file) {
  server::EmbeddingOptions o;
  o.embeddings = args.embedding || args.reranking;
  if (args.reranking) {
    server::set_pooling(o, "rank");
  } else if (!args.pooling.empty()) {
    server::set_pooling(o, args.pooling);
  } else if (const auto type = file.get_int(file.architecture() + ".pooling_type")) {
    if (!server::set_pooling_from_file(o, *type))
      fail("{}: {}.pooling_type {} is not a pooling llama.cpp knows: pass --pooling", file.name(),
           file.architecture(), *type);
  }
  if (o.rank) {
    o.embeddings = true;  // --pooling rank serves the rerank routes, as --reranking does
    o.rerank_template = file.get_string("tokenizer.chat_template.rerank").value_or("");
    // Reranker models score with a classification head (cls.*, cls_out.* tensors), which such
    // files would have and the decoder refuses at load; a model that loads here has none, so
    // its scores are not relevance. Said once, at start-up, rather than served silently.
    fmt::print(stderr,
               "[inferd] warning: --reranking on {}: this model has no classification head, so "
               "a score is the first component of the last token's hidden state (what "
               "llama-server reads there), not a trained relevance score\n",
               file.name());
  }
  return o;
}

server::HttpServer* g_server = nullptr;
agent::ToolSet* g_tools = nullptr;

void on_signal(int) {
  // Tool calls in flight see the flag within a poll's slice and end, so the HTTP threads
  // they hold are free for the transport to stop.
  if (g_tools != nullptr) g_tools->request_stop();
  if (g_server != nullptr) g_server->stop();
}

// The variables llama-server gives every chat template beside HF's: today's date as Llama 3.x
// templates read it (date_string) and as FireFunction's does (datetime), and the tools as
// FireFunction's reads them (functions). Those the command line set are kept.
nlohmann::ordered_json with_llama_server_template_variables(nlohmann::ordered_json variables,
                                                            const nlohmann::ordered_json& tools) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  const auto format = [&utc](const char* f) {
    char buffer[64];
    return std::string(buffer, std::strftime(buffer, sizeof(buffer), f, &utc));
  };
  if (!variables.contains("date_string")) variables["date_string"] = format("%d %b %Y");
  if (!variables.contains("datetime")) variables["datetime"] = format("%b %d %Y %H:%M:%S GMT");
  if (!variables.contains("functions"))
    variables["functions"] = tools.is_array() && !tools.empty() ? tools.dump(2) : "";
  return variables;
}

void serve(ServeArgs args) {
  apply_llama_server_flags(args);
  if (args.http.handler_threads <= 0)
    args.http.handler_threads = server::HttpLimits{}.handler_threads;
  const std::string path = args.model.empty() ? default_model_path() : args.model;
  gguf::GgufFile file = gguf::GgufFile::open(path);
  engine::EngineConfig config;
  config.threads = args.threads.count();
  config.pin_threads = args.threads.pin();
  config.tensor_parallel = args.tensor_parallel;
  config.pipeline_parallel = args.pipeline_parallel;
  config.data_parallel = args.data_parallel;
  config.steps_in_flight = args.steps_in_flight;
  config.expert_parallel = args.expert_parallel;
  config.context = args.context;
  config.max_seqs = args.max_seqs;
  if (args.kv_pool_tokens > 0)
    config.kv_blocks =
        static_cast<int32_t>((args.kv_pool_tokens + config.block_size - 1) / config.block_size);
  config.max_batched_tokens = args.max_batched_tokens;
  config.kv_key_type = args.kv_key_type;
  config.kv_value_type = args.kv_value_type;
  config.kv_exact_recent = args.kv_exact_recent;
  config.swa_full = args.swa_full;
  config.prefix_caching = !args.no_prefix_cache;
  config.bf16_prompts = !args.no_bf16_prompts;
  if (args.cache_ram_mib >= 0) config.state_cache_bytes = args.cache_ram_mib << 20;
  config.spec = args.spec;
  config.device = args.device;
  // The adapters in the engine's order: --lora / --lora-scaled ones (at scale 0 with
  // --lora-init-without-apply), then the named modules (applied when a request names them).
  std::vector<server::LoraAdapterInfo> adapters;
  for (const model::LoraSpec& spec : args.lora)
    adapters.push_back({spec.path, "", args.lora_init_without_apply ? 0.0f : spec.scale, "", ""});
  for (const std::string& module : args.lora_modules)
    adapters.push_back(server::parse_lora_module(module));
  for (const server::LoraAdapterInfo& a : adapters) config.lora.push_back({a.path, a.scale});
  config.grammar_thread = args.grammar_thread;
  // Names the API answers to: --served-model-name / --alias, comma-separated (the first is
  // the one reported), else the file's name.
  std::vector<std::string> model_ids;
  for (std::string_view rest = args.served_model_name; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) model_ids.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (model_ids.empty()) model_ids.push_back(std::filesystem::path(path).stem().string());
  const std::string model_id = model_ids.front();
  // A module's name chooses it: it must be no other module's, nor the model's.
  for (size_t i = 0; i < adapters.size(); ++i) {
    const std::string& name = adapters[i].name;
    if (name.empty()) continue;
    if (std::ranges::find(model_ids, name) != model_ids.end())
      fail("--lora-modules name '{}' is also the served model's", name);
    for (size_t j = 0; j < i; ++j)
      if (adapters[j].name == name) fail("--lora-modules name '{}' is given twice", name);
  }
  server::ServerMetrics metrics(model_id);
  server::EngineLoop loop(file, config, args.max_queue, metrics, args.log_interval);
  // A model without a chat template still serves completions; chat requests are refused with
  // a 400 that says why (--chat-template fixes it).
  // A file without one gets its family's built-in template where the architecture names a
  // single format (Gemma, Qwen, Phi-3), as `inferd run --chat` does.
  std::optional<tokenizer::ChatTemplate> chat_template;
  try {
    chat_template = load_chat_template(file, args.chat_template);
    if (args.chat_template.empty() && !file.get_string("tokenizer.chat_template"))
      fmt::print(stderr, "[inferd] {} has no chat template: using its family's built-in one\n",
                 path);
  } catch (const Error& e) {
    if (!args.chat_template.empty()) throw;
    fmt::print(stderr,
               "[inferd] {}: /v1/chat/completions is off (pass --chat-template NAME|FILE to turn "
               "it on)\n",
               e.what());
  }
  for (server::LoraAdapterInfo& a : adapters) server::read_lora_metadata(a);
  server::LoraRegistry lora(std::move(adapters));
  server::ParseContext context;
  context.lora = &lora;
  context.tokenizer = &loop.tokenizer();
  context.context = loop.context();
  context.model_ids = model_ids;
  context.strict_model_name = args.strict_model_name;
  context.sampling_defaults = args.sampling;
  context.native_sampling_defaults = args.native_sampling;
  context.default_max_tokens = args.n_predict > 0 ? args.n_predict : 0;
  context.spec_tokens = config.spec.enabled() ? config.spec.num_tokens : 0;
  // Learns the vocabulary once; each request's schema or grammar is compiled on its HTTP thread.
  const structured::GrammarCompiler grammars(loop.tokenizer(), loop.model_config().n_vocab,
                                             config.threads);
  context.grammars = &grammars;
  context.reasoning_format = server::parse_reasoning_format(args.reasoning_format);
  // <think> tags, or Gemma 4's thought channel.
  context.template_thinks =
      chat_template && (chat_template->source().find("<think>") != std::string::npos ||
                        chat_template->source().find("<|channel>thought") != std::string::npos);
  const nlohmann::ordered_json template_variables = chat_template_variables(args);
  context.render_chat = [&loop, chat_template, path, template_variables](
                            const nlohmann::ordered_json& messages,
                            const nlohmann::ordered_json& tools,
                            bool add_generation_prompt) -> std::string {
    if (!chat_template) {
      throw server::ApiError(
          400,
          fmt::format("the model {} has no chat template (tokenizer.chat_template): use "
                      "/v1/completions, or restart the server with --chat-template NAME|FILE",
                      std::filesystem::path(path).filename().string()),
          "messages", "invalid_request_error", "no_chat_template");
    }
    tokenizer::ChatInputs inputs;
    inputs.messages = messages;
    inputs.add_generation_prompt = add_generation_prompt;
    inputs.extra = with_llama_server_template_variables(template_variables, tools);
    if (!tools.is_null()) inputs.tools = tools;
    return tokenizer::render_chat_prompt(*chat_template, loop.tokenizer(), std::move(inputs));
  };
  if (chat_template) context.tool_format = server::detect_tool_call_format(chat_template->source());
  server::ServerOptions options;
  options.host = args.host;
  options.port = args.port;
  options.api_key = args.api_key;
  options.http = args.http;
  options.vertex = server::vertex_settings_from_env();
  if (options.vertex.enabled && options.vertex.port > 0) options.port = options.vertex.port;
  options.webui = !args.no_webui;
  options.cors_origins = args.cors_origins;
  options.model_path = std::filesystem::absolute(path).string();
  options.total_slots = config.max_seqs;
  options.embeddings = embedding_options(args, file);
  options.metrics = !args.no_metrics;
  options.slots = args.slots;
  options.verbose = args.verbose;
  if (chat_template) options.chat_template = chat_template->source();
  // Started before the model serves: a bad tool list or MCP config stops the server here.
  std::unique_ptr<agent::ToolSet> tools;
  if (args.agent.enabled()) tools = std::make_unique<agent::ToolSet>(args.agent);
  options.tools = tools.get();
  options.cors_proxy = args.cors_proxy;
  options.lora = &lora;
  server::HttpServer http(loop, metrics, std::move(context), options);
  g_server = &http;
  g_tools = tools.get();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  fmt::print(stderr, "[inferd] model {} ({} threads, context {}, up to {} sequences, KV {}/{})\n",
             model_id, config.threads, loop.context(), config.max_seqs,
             dtype_name(config.kv_key_type), dtype_name(config.kv_value_type));
  if (const int64_t state_floats = loop.model_config().recurrent_state_floats; state_floats > 0) {
    const double state_mib = static_cast<double>(state_floats) * sizeof(float) / (1 << 20);
    fmt::print(stderr,
               "[inferd] recurrent state {:.1f} MiB a sequence; {} snapshots of it for prefix "
               "caching ({:.0f} MiB, --cache-ram)\n",
               state_mib, loop.state_snapshots(), state_mib * loop.state_snapshots());
  } else if (const int64_t exact = loop.exact_copy_bytes(); exact > 0 && loop.state_snapshots() > 0) {
    const double exact_mib = static_cast<double>(exact) / (1 << 20);
    fmt::print(stderr,
               "[inferd] exact copies of the KV cache's first and latest blocks {:.1f} MiB a "
               "sequence; {} snapshots of them for prefix caching ({:.0f} MiB, --cache-ram)\n",
               exact_mib, loop.state_snapshots(), exact_mib * loop.state_snapshots());
  }
  if (loop.kv_blocks_capped()) {
    fmt::print(
        stderr,
        "[inferd] the KV cache for {} sequences of {} tokens does not fit in the memory "
        "left after the model: it holds {} blocks of {} tokens (--max-seqs, -c or --parallel "
        "set what it must hold)\n",
        config.max_seqs, loop.context(), loop.kv_blocks(), config.block_size);
  }
  http.listen();
  g_server = nullptr;
  g_tools = nullptr;
  if (tools) tools->stop();
}

}  // namespace

// The transport's limits (server/http/transport.h): what one client may cost the server.
void add_http_limit_options(CLI::App& cmd, server::HttpLimits& http) {
  cmd.add_option("--max-body-bytes", http.max_body_bytes,
                 "Larger request bodies get HTTP 413 (counted as they arrive, chunked too)")
      ->check(CLI::Range(1024, 1 << 30));
  cmd.add_option("--max-header-bytes", http.max_header_bytes,
                 "Request line and headers larger than this get HTTP 431")
      ->check(CLI::Range(1024, 1 << 20));
  cmd.add_option("--max-headers", http.max_headers, "More request headers get HTTP 431")
      ->check(CLI::Range(8, 10000));
  cmd.add_option("--header-timeout", http.header_timeout_s,
                 "Seconds a request's line and headers may take to arrive, from the connection "
                 "(or the previous answer); then 408 and closed (an idle connection just closes)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd.add_option("--body-timeout", http.body_timeout_s,
                 "Seconds a request body may take to arrive after its headers; then 408")
      ->check(CLI::Range(0.1, 3600.0));
  cmd.add_option("--write-timeout", http.write_timeout_s,
                 "Seconds an answer may wait for a client that reads nothing; then closed")
      ->check(CLI::Range(0.1, 3600.0));
  cmd.add_option_function<double>(
         "--timeout", [&http](double s) { http.body_timeout_s = http.write_timeout_s = s; },
         "llama-server's read/write timeout: sets --body-timeout and --write-timeout")
      ->check(CLI::Range(0.1, 86400.0));
  cmd.add_option("--max-connections", http.max_connections,
                 "Connections open at once (at the cap the oldest one still waiting for its "
                 "request is closed; at most the open-file limit allows)")
      ->check(CLI::Range(1, 1 << 22));
  cmd.add_option("--max-connections-per-client", http.max_connections_per_client,
                 "Connections open at once from one client address; more are refused (503)")
      ->check(CLI::Range(1, 1 << 22));
  cmd.add_option("--threads-http", http.handler_threads,
                 "Requests handled at once (a streamed answer holds one for its length); the "
                 "sockets themselves are served by one event-driven thread")
      ->check(CLI::Range(-1, 4096));  // llama-server's -1: the default
}

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  auto args = std::make_shared<ServeArgs>();
  cmd->add_option("-m,--model", args->model, "GGUF model file (default: the fetched SmolLM2)");
  cmd->add_option("--host", args->host,
                  "Address to listen on; several: comma-separated (127.0.0.1,::1)");
  cmd->add_option("--port", args->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  args->threads.add_to(*cmd);
  cmd->add_option("-c,--ctx-size", args->context,
                  "Tokens per sequence, prompt + output (0: the model's, at most 4096)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-seqs", args->max_seqs, "Sequences decoded together at most")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-batched-tokens,-b,--batch-size", args->max_batched_tokens,
                  "Tokens one step may process (the prefill chunk budget; default 256)")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--log-interval", args->log_interval,
                  "Seconds between log lines of throughput, load, KV use and prefix cache hit "
                  "rate (0: none)")
      ->check(CLI::NonNegativeNumber);
  add_prefix_cache_option(*cmd, args->no_prefix_cache);
  cmd->add_flag("--no-bf16-prompts", args->no_bf16_prompts,
                "On CPUs with AMX-BF16: compute long prompts with the int8 kernels too (slower "
                "prefill), so a chat turn resumed from the prefix cache gives the same bits as "
                "the turn computed from scratch");
  cmd->add_option("--max-queue", args->max_queue,
                  "Requests queued or running at most; more get HTTP 429")
      ->check(CLI::Range(1, 1 << 20));
  add_http_limit_options(*cmd, args->http);
  cmd->add_option("--api-key", args->api_key, "Require 'Authorization: Bearer KEY'");
  cmd->add_flag("--no-webui,--no-ui", args->no_webui,
                "Do not serve the chat page at / (the API is served either way)");
  cmd->add_option("--cors-origins", args->cors_origins,
                  "Browser origins allowed to call the API, comma-separated: exact origins, "
                  "'localhost' (this machine: the default) or '*' (any)");
  cmd->add_option("--reasoning-format", args->reasoning_format,
                  "Thinking models' <think> blocks: deepseek (in message.reasoning_content), none "
                  "(left in content), auto (deepseek when the chat template writes <think>)")
      ->check(CLI::IsMember({"auto", "deepseek", "none"}));
  cmd->add_option("--served-model-name,-a,--alias", args->served_model_name,
                  "Model id in the API, or several comma-separated (the first is reported; "
                  "default: the file name without .gguf)");
  cmd->add_flag("--strict-model-name", args->strict_model_name,
                "Answer 404 to a request whose 'model' is not a served name (vLLM); by default "
                "any name is served by the one model, as llama-server does");
  cmd->add_option(
      "--chat-template", args->chat_template,
      "Built-in template name (chatml, llama3, gemma, ...) or a Jinja file; default: the model's");
  add_kv_type_options(*cmd, args->kv_key_type, args->kv_value_type);
  add_exact_recent_option(*cmd, args->kv_exact_recent);
  add_swa_full_option(*cmd, args->swa_full);
  add_spec_options(*cmd, args->spec);
  add_grammar_thread_option(*cmd, args->grammar_thread);
  add_device_option(*cmd, args->device);
  add_lora_options(*cmd, args->lora);
  cmd->add_flag("--lora-init-without-apply", args->lora_init_without_apply,
                "Load the --lora adapters at scale 0: requests apply them with their 'lora' field, "
                "or POST /lora-adapters sets the scales (llama-server)");
  cmd->add_option("--lora-modules", args->lora_modules,
                  "LoRA adapters chosen by name (vLLM): NAME=PATH or {\"name\": ..., \"path\": "
                  "...}, one or more; a request whose 'model' is NAME runs with that adapter")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--enable-lora", args->enable_lora,
                "Accepted for vLLM's command lines: adapters are on whenever --lora or "
                "--lora-modules gives some");
  add_parallel_options(*cmd, args->tensor_parallel, args->pipeline_parallel, args->data_parallel,
                       args->expert_parallel);
  cmd->add_option("--steps-in-flight", args->steps_in_flight,
                  "With --pipeline-parallel N: steps run at once, each with its own sequences, so "
                  "that rank 0 starts one while the other ranks run another (vLLM's virtual "
                  "engines); 0 (default): N; 1: one step at a time")
      ->check(CLI::Range(0, 64));
  add_sampling_options(*cmd, args->sampling);
  cmd->add_flag("--embedding,--embeddings", args->embedding,
                "Serve embeddings: POST /v1/embeddings, /embeddings, /embedding (the prompt's "
                "final hidden states, pooled by --pooling)");
  cmd->add_option("--pooling", args->pooling,
                  "Embeddings' pooling: none (a vector per token), mean, cls (first token), last, "
                  "rank (reranking); default: the file's, else last")
      ->check(CLI::IsMember({"none", "mean", "cls", "last", "rank"}));
  cmd->add_flag("--reranking,--rerank", args->reranking,
                "Serve POST /rerank (and /reranking, /v1/rerank): pairs scored from the last "
                "token, as llama-server's --reranking");
  add_llama_server_flags(*cmd, *args);
  cmd->callback([args, cmd] {
    args->native_sampling = native_sampling_from(*cmd, args->sampling);
    serve(*args);
  });
}

}  // namespace inferd::app
