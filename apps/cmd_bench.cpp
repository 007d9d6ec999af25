// `inferd bench`: prompt processing (pp N: one batch of N tokens from an empty cache) and
// text generation (tg N: N single-token steps from an empty cache) speeds as llama-bench
// defines them, repeated, with llama-bench's JSON fields; plus a roofline line (bytes read
// per decoded token against measured read bandwidth, GFLOP/s of prefill).
#include <chrono>
#include <cmath>
#include <ctime>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_roofline.h"
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
  int threads = 0;
  int repetitions = 5;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

// Runs `tokens` from position `start` of one sequence, in one batch; logits of the last token.
void run_batch(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
               std::span<const int32_t> table, std::span<const int32_t> tokens, int32_t start,
               std::vector<float>& logits) {
  const int block = cache.block_size();
  std::vector<int32_t> pos(tokens.size());
  std::vector<int64_t> slots(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    pos[i] = start + static_cast<int32_t>(i);
    slots[i] = int64_t{table[static_cast<size_t>(pos[i] / block)]} * block + pos[i] % block;
  }
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;
  model::BatchSequence seq{0, static_cast<int64_t>(tokens.size()), table};
  model.forward({tokens, pos, slots, {&seq, 1}, {&last, 1}}, cache, logits.data(), pool);
}

struct TestResult {
  int64_t n_prompt = 0, n_gen = 0;
  std::vector<double> seconds;
};

TestResult run_test(model::Model& model, kv::KvCache& cache, ThreadPool& pool,
                    std::span<const int32_t> table, int64_t n_prompt, int64_t n_gen,
                    int repetitions) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(0, model.config().n_vocab - 1);
  std::vector<float> logits(static_cast<size_t>(model.config().n_vocab));
  TestResult result{n_prompt, n_gen, {}};
  for (int r = -1; r < repetitions; ++r) {  // r = -1 is the warm-up, not counted
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int32_t& t : prompt) t = token(rng);
    const auto begin = Clock::now();
    if (n_prompt > 0) run_batch(model, cache, pool, table, prompt, 0, logits);
    for (int64_t i = 0; i < n_gen; ++i) {
      const int32_t next = token(rng);
      run_batch(model, cache, pool, table, {&next, 1}, static_cast<int32_t>(i), logits);
    }
    if (r >= 0)
      result.seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return result;
}

nlohmann::json to_json(const TestResult& t, const model::Model& model, const std::string& path,
                       uint64_t model_bytes, uint64_t params, int threads) {
  const double tokens = static_cast<double>(t.n_prompt + t.n_gen);
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
          {"backends", fmt::format("CPU ({})", kernels::active_kernels().isa)},
          {"model_filename", path},
          {"model_type", model.config().architecture},
          {"model_size", model_bytes},
          {"model_n_params", params},
          {"n_threads", threads},
          {"type_k", "f16"},
          {"type_v", "f16"},
          {"n_prompt", t.n_prompt},
          {"n_gen", t.n_gen},
          {"test_time", when},
          {"avg_ns", static_cast<int64_t>(mean(ns))},
          {"stddev_ns", static_cast<int64_t>(stddev(ns))},
          {"avg_ts", mean(ts)},
          {"stddev_ts", stddev(ts)},
          {"samples_ns", ns},
          {"samples_ts", ts}};
}

void bench(const BenchArgs& args) {
  const std::string path = args.model.empty() ? default_model_path() : args.model;
  gguf::GgufFile file = gguf::GgufFile::open(path);
  const int threads = args.threads > 0 ? args.threads : default_threads();
  const int64_t context = std::max<int64_t>(args.n_prompt, args.n_gen) + 16;
  auto model = model::load_model(file, {std::max<int64_t>(args.n_prompt, 1), context});
  const int block = 16;
  const auto blocks = static_cast<int32_t>((context + block - 1) / block);
  kv::KvCache cache(model->kv_config(blocks, block));
  std::vector<int32_t> table;
  for (int32_t b = 0; b < blocks; ++b) table.push_back(*cache.pool().allocate());
  ThreadPool pool(threads);
  const ModelFootprint footprint = model_footprint(file);
  nlohmann::json out = nlohmann::json::array();
  std::vector<TestResult> results;
  if (args.n_prompt > 0)
    results.push_back(run_test(*model, cache, pool, table, args.n_prompt, 0, args.repetitions));
  if (args.n_gen > 0)
    results.push_back(run_test(*model, cache, pool, table, 0, args.n_gen, args.repetitions));
  for (const TestResult& t : results) {
    out.push_back(to_json(t, *model, path, footprint.total_bytes, footprint.parameters, threads));
  }
  add_roofline(footprint, *model, out, threads);
  if (args.json) {
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "| model | size | params | backend | threads | test | t/s "
      "|\n|---|---:|---:|---|---:|---:|---:|\n");
  for (const auto& j : out) {
    const int64_t np = j["n_prompt"], ng = j["n_gen"];
    fmt::print("| {} | {:.2f} MiB | {:.2f} M | {} | {} | {} | {:.2f} ± {:.2f} |\n",
               model->config().name, footprint.total_bytes / 1048576.0, footprint.parameters / 1e6,
               j["backends"].get<std::string>(), threads,
               np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{}", ng),
               j["avg_ts"].get<double>(), j["stddev_ts"].get<double>());
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
      ->check(CLI::Range(0, 8192));
  cmd->add_option("-n,--n-gen", args->n_gen, "Generated tokens for the tg test (0: skip)")
      ->check(CLI::Range(0, 8192));
  cmd->add_option("-t,--threads", args->threads, "Threads (0: cores, at most 4)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-r,--repetitions", args->repetitions, "Repetitions of each test")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", args->json, "Print a JSON list with llama-bench's fields");
  cmd->callback([args] { bench(*args); });
}

}  // namespace inferd::app
