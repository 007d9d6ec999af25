// `inferd bench`: prompt processing (pp N: one batch of N tokens from an empty cache) and
// text generation (tg N: N single-token steps from an empty cache) speeds as llama-bench
// defines them, repeated, with llama-bench's JSON fields; plus a roofline line (bytes read
// per decoded token against measured read bandwidth, GFLOP/s of prefill).
#include <chrono>
#include <cmath>
#include <ctime>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_roofline.h"
#include "cuda/device_info.h"
#include "dist/model_parallel.h"
#include "commands.h"
#include "generation_options.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels.h"
#include "model/registry.h"

namespace inferd::app {
namespace {

struct BenchArgs {
  std::string model;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  ThreadOptions threads;
  int64_t n_depth = 0;
  int64_t n_parallel = 1;
  // Prompt tokens a step (llama-bench's -ub, whose default is also 512): a longer prompt runs in
  // steps of this many, as the server's chunked prefill runs it.
  int64_t n_ubatch = 512;
  int repetitions = 5;
  bool json = false;
  DType kv_key_type = DType::F16;
  DType kv_value_type = DType::F16;
  int kv_exact_recent = kv::kDefaultExactRecentTokens;
  model::Device device = model::Device::kCpu;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  bool expert_parallel = false;
  std::vector<model::LoraSpec> lora;  // LoRA adapters on every token (what they cost)
};

using Clock = std::chrono::steady_clock;

// The KV blocks of each benchmarked sequence, and its recurrent state slot (hybrid models;
// -1 otherwise).
struct BenchSequences {
  std::vector<kv::BlockTables> tables;
  std::vector<int32_t> state_slots;
  size_t size() const { return tables.size(); }
};

// Runs one step: for each sequence s, `count` tokens at positions [start, start + count), all in
// one batch; logits of each sequence's last token go to `logits`. Steps of at least
// kBf16PromptTokens tokens are prompts, as the engine would mark them (model/batch.h).
void run_step(model::Model& model, kv::KvCache& cache, ThreadPool& pool, const BenchSequences& tables,
              std::span<const int32_t> tokens, int64_t count, int32_t start,
              std::vector<float>& logits) {
  const auto n_seq = static_cast<int64_t>(tables.size());
  std::vector<int32_t> pos(static_cast<size_t>(n_seq * count));
  std::vector<model::BatchSequence> seqs;
  std::vector<int32_t> last;
  for (int64_t s = 0; s < n_seq; ++s) {
    for (int64_t i = 0; i < count; ++i)
      pos[static_cast<size_t>(s * count + i)] = start + static_cast<int32_t>(i);
    seqs.push_back({s * count, (s + 1) * count, &tables.tables[static_cast<size_t>(s)],
                    tables.state_slots[static_cast<size_t>(s)]});
    last.push_back(static_cast<int32_t>((s + 1) * count - 1));
  }
  const int64_t bf16_rows_begin =
      count >= model::kBf16PromptTokens ? 0 : static_cast<int64_t>(pos.size());
  model.forward({tokens.first(pos.size()), pos, seqs, last, bf16_rows_begin}, cache, logits.data(),
                pool);
}

struct TestResult {
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0, n_parallel = 1, n_ubatch = 512;
  std::vector<double> seconds;
  // A model split over ranks: what rank 0 sent and its seconds communicating (waiting for the
  // others included) over the timed repetitions, and their forward steps.
  int64_t comm_bytes = 0;
  double comm_seconds = 0;
  int64_t steps = 0;
};

// Positions [start, start + n) of every sequence, in steps of at most `ubatch` positions.
void run_steps(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
               const BenchSequences& tables, std::span<const int32_t> tokens, int64_t n,
               int64_t start, int64_t ubatch, std::vector<float>& logits) {
  const auto n_seq = static_cast<int64_t>(tables.size());
  for (int64_t done = 0; done < n; done += ubatch) {
    const int64_t count = std::min(ubatch, n - done);
    run_step(model, cache, pool, tables, tokens.subspan(static_cast<size_t>(done * n_seq)), count,
             static_cast<int32_t>(start + done), logits);
  }
}

// pp: n_prompt tokens in steps of at most n_ubatch; tg: n_gen steps of one token for each of
// the sequences. Both start after n_depth tokens already in the cache (filled untimed).
TestResult run_test(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
                    const BenchSequences& tables, int64_t n_prompt, int64_t n_gen, int64_t n_depth,
                    int64_t n_ubatch, int repetitions, const dist::Communicator* ranks) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(0, model.config().n_vocab - 1);
  const auto n_seq = static_cast<int64_t>(tables.size());
  std::vector<float> logits(static_cast<size_t>(model.config().n_vocab * n_seq));
  TestResult result{n_prompt, n_gen, n_depth, n_seq, n_ubatch, {}};
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = token(rng);
    return t;
  };
  for (int r = -1; r < repetitions; ++r) {  // r = -1 is the warm-up, not counted
    if (n_depth > 0)
      run_steps(model, cache, pool, tables, random_tokens(n_depth * n_seq), n_depth, 0, n_ubatch,
                logits);
    const auto prompt = random_tokens(n_prompt * n_seq);
    const int64_t bytes_before = ranks != nullptr ? ranks->bytes_sent() : 0;
    const double comm_before = ranks != nullptr ? ranks->comm_seconds() : 0;
    const auto begin = Clock::now();
    // The warm-up runs one step of the prompt: a 16k-token prompt's would take minutes, and one
    // step already touches every weight and buffer (llama-bench's warm-up is shorter still).
    const int64_t prompt_tokens = r < 0 ? std::min(n_prompt, n_ubatch) : n_prompt;
    if (prompt_tokens > 0)
      run_steps(model, cache, pool, tables, prompt, prompt_tokens, n_depth, n_ubatch, logits);
    for (int64_t i = 0; i < n_gen; ++i) {
      const auto next = random_tokens(n_seq);
      run_step(model, cache, pool, tables, next, 1, static_cast<int32_t>(n_depth + i), logits);
    }
    if (r >= 0) {
      result.seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
      result.steps += (n_prompt + n_ubatch - 1) / n_ubatch + n_gen;
      if (ranks != nullptr) {
        result.comm_bytes += ranks->bytes_sent() - bytes_before;
        result.comm_seconds += ranks->comm_seconds() - comm_before;
      }
    }
  }
  return result;
}

nlohmann::json to_json(const TestResult& t, const model::Model& model, const std::string& path,
                       uint64_t model_bytes, uint64_t params, int threads,
                       const std::string& backend) {
  const double tokens = static_cast<double>((t.n_prompt + t.n_gen) * t.n_parallel);
  std::vector<double> ts, ns;
  for (double s : t.seconds) {
    ts.push_back(tokens / s);
    ns.push_back(s * 1e9);
  }
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  };
  auto stddev = [&](const std::vector<double>& v) {
    if (v.size() < 2) return 0.0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / double(v.size() - 1));
  };
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"build_commit", "inferd"},
          {"cpu_info", kernels::cpu_features().describe()},
          {"backends", backend},
          {"model_filename", path},
          {"model_type", model.config().architecture},
          {"model_size", model_bytes},
          {"model_n_params", params},
          {"n_threads", threads},
          {"type_k", "f16"},
          {"type_v", "f16"},
          {"n_prompt", t.n_prompt},
          {"n_gen", t.n_gen},
          {"n_depth", t.n_depth},
          {"n_parallel", t.n_parallel},
          {"n_ubatch", t.n_ubatch},
          {"test_time", when},
          {"avg_ns", static_cast<int64_t>(mean(ns))},
          {"stddev_ns", static_cast<int64_t>(stddev(ns))},
          {"avg_ts", mean(ts)},
          {"stddev_ts", stddev(ts)},
          {"samples_ns", ns},
          {"samples_ts", ts},
          // (inferd's own: a model split over ranks, rank 0's communication)
          {"comm_bytes_per_token", t.comm_bytes / std::max(tokens * double(t.seconds.size()), 1.0)},
          {"comm_ms_per_step", t.comm_seconds * 1e3 / double(std::max<int64_t>(t.steps, 1))},
          {"ms_per_step", std::accumulate(t.seconds.begin(), t.seconds.end(), 0.0) * 1e3 /
                              double(std::max<int64_t>(t.steps, 1))}};
}

void bench(const BenchArgs& args) {
  const std::string path = args.model.empty() ? default_model_path() : args.model;
  gguf::GgufFile file = gguf::GgufFile::open(path);
  const int threads = args.threads.count();
  const int64_t context = args.n_depth + std::max<int64_t>(args.n_prompt, args.n_gen) + 16;
  const int64_t max_batch =
      std::max({std::min(args.n_prompt, args.n_ubatch),
                std::min(args.n_depth, args.n_ubatch) * args.n_parallel, args.n_parallel,
                int64_t{1}});
  const bool cuda = args.device == model::Device::kCuda;
  std::optional<cuda::DeviceInfo> device;
  if (cuda) device = cuda::probe_device();
  model::ModelOptions options{max_batch, context, cuda ? model::Device::kCuda : model::Device::kCpu};
  const dist::ParallelWorld world = dist::apply_parallel_world(
      options, {args.tensor_parallel, args.pipeline_parallel, args.data_parallel},
      args.expert_parallel, "bench");
  const int ranks = world.ranks();
  options.lora = args.lora;
  auto model = model::load_model(file, options);
  const int block = 16;
  const auto blocks = static_cast<int32_t>((context + block - 1) / block);
  kv::KvCache cache(model->kv_config(blocks * static_cast<int32_t>(args.n_parallel), block,
                                     args.kv_key_type, args.kv_value_type,
                                     static_cast<int32_t>(args.n_parallel), args.kv_exact_recent));
  model->attach_cache(cache.config(), threads);  // (tensor parallelism: the other ranks')
  BenchSequences tables;
  for (int64_t s = 0; s < args.n_parallel; ++s) {
    tables.tables.push_back(cache.allocate_sequence(context));
    tables.state_slots.push_back(cache.allocate_state());
  }
  const BenchSequences one_sequence{{tables.tables.front()}, {tables.state_slots.front()}};
  ThreadPool pool(threads, args.threads.pin());
  const ModelFootprint footprint = model_footprint(file);
  nlohmann::json out = nlohmann::json::array();
  std::vector<TestResult> results;
  if (args.n_prompt > 0)
    results.push_back(run_test(*model, cache, pool, one_sequence, args.n_prompt, 0, args.n_depth,
                               args.n_ubatch, args.repetitions, world.split()));
  if (args.n_gen > 0)
    results.push_back(
        run_test(*model, cache, pool, tables, 0, args.n_gen, args.n_depth, args.n_ubatch,
                 args.repetitions, world.split()));
  for (const TestResult& t : results) {
    out.push_back(to_json(t, *model, path, footprint.total_bytes, footprint.parameters, threads,
                          device ? fmt::format("CUDA ({})", device->name)
                          : ranks > 1
                              ? fmt::format("CPU ({}), {} {} ranks", kernels::active_kernels().isa,
                                            ranks, world.kind())
                              : fmt::format("CPU ({})", kernels::active_kernels().isa)));
  }
  if (ranks > 1) {
    // Each rank reads its shard over links this process cannot see: no single bound applies.
  } else if (device) {
    // The bound of a decode step on the device: its weights and KV over the device's measured
    // copy bandwidth (bytes read + written).
    kernels::ReadBandwidth copy;
    copy.best_bytes_per_second = copy.median_bytes_per_second = device->copy_bytes_per_second;
    copy.buffer_bytes = device->copy_buffer_bytes;
    copy.passes = device->copy_passes;
    copy.isa = "cuda device-to-device copy";
    add_roofline(footprint, *model, cache, out, copy);
  } else {
    add_roofline(footprint, *model, cache, out, measure_read_bandwidth(pool));
  }
  if (args.json) {
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "| model | size | params | backend | threads | test | t/s "
      "|\n|---|---:|---:|---|---:|---:|---:|\n");
  for (const auto& j : out) {
    const int64_t np = j["n_prompt"], ng = j["n_gen"], nd = j["n_depth"], npl = j["n_parallel"];
    std::string test = np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{}", ng);
    if (npl > 1) test += fmt::format(" x{}", npl);
    if (nd > 0) test += fmt::format(" @ d{}", nd);
    fmt::print("| {} | {:.2f} MiB | {:.2f} M | {} | {} | {} | {:.2f} ± {:.2f} |\n",
               model->config().name, footprint.total_bytes / 1048576.0, footprint.parameters / 1e6,
               j["backends"].get<std::string>(), threads, test, j["avg_ts"].get<double>(),
               j["stddev_ts"].get<double>());
  }
  if (ranks > 1) {
    for (const auto& j : out) {
      const int64_t np = j["n_prompt"], ng = j["n_gen"];
      fmt::print("  {}: rank 0 sent {:.0f} bytes a token; {:.2f} ms of each {:.2f} ms step "
                 "communicating (waiting for the other ranks included)\n",
                 np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{}", ng),
                 j["comm_bytes_per_token"].get<double>(), j["comm_ms_per_step"].get<double>(),
                 j["ms_per_step"].get<double>());
    }
    fmt::print("  roofline: not computed for {} ranks (each reads its shard; threads are per rank)\n",
               ranks);
    return;
  }
  print_roofline(footprint, out, threads);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Measure prompt processing and generation speed (llama-bench style)");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("-m,--model", args->model, "GGUF model file (default: the fetched SmolLM2)");
  cmd->add_option("-p,--n-prompt", args->n_prompt, "Prompt tokens for the pp test (0: skip)")
      ->check(CLI::Range(0, 131072));
  cmd->add_option("-n,--n-gen", args->n_gen, "Generated tokens for the tg test (0: skip)")
      ->check(CLI::Range(0, 8192));
  cmd->add_option("-d,--n-depth", args->n_depth,
                  "Tokens already in each sequence's cache before a test (as llama-bench -d)")
      ->check(CLI::Range(0, 131072));
  cmd->add_option("--ubatch-size", args->n_ubatch,
                  "Prompt tokens a step: longer prompts (and -d) run in steps of this many, as "
                  "llama-bench's -ub and the server's chunked prefill")
      ->check(CLI::Range(1, 131072));
  cmd->add_option("--parallel", args->n_parallel,
                  "Sequences decoding together in the tg test, one token each per step; "
                  "t/s counts all of them")
      ->check(CLI::Range(1, 256));
  args->threads.add_to(*cmd);
  cmd->add_option("-r,--repetitions", args->repetitions, "Repetitions of each test")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", args->json, "Print a JSON list with llama-bench's fields");
  add_kv_type_options(*cmd, args->kv_key_type, args->kv_value_type);
  add_exact_recent_option(*cmd, args->kv_exact_recent);
  add_device_option(*cmd, args->device);
  add_parallel_options(*cmd, args->tensor_parallel, args->pipeline_parallel, args->data_parallel,
                       args->expert_parallel);
  add_lora_options(*cmd, args->lora);
  cmd->callback([args] { bench(*args); });
}

}  // namespace inferd::app
