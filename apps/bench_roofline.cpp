#include "bench_roofline.h"

#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace inferd::app {

ModelFootprint model_footprint(const gguf::GgufFile& file) {
  ModelFootprint f;
  const bool tied = file.find_tensor("output.weight") == nullptr;
  for (const gguf::TensorInfo& t : file.tensors()) {
    f.total_bytes += t.num_bytes;
    f.parameters += t.num_elements();
    // Decode reads every 2-D matrix once per token. The embedding table is only looked up
    // (one row) unless it doubles as the output matrix.
    const bool embedding = t.name == "token_embd.weight";
    if (t.shape.size() == 2 && (!embedding || tied)) {
      f.matmul_bytes += t.num_bytes;
      f.matmul_parameters += t.num_elements();
    }
  }
  return f;
}

double measure_read_bandwidth(int threads) {
  constexpr size_t kBytes = size_t{1} << 30;  // 1 GiB: far beyond any last-level cache
  std::vector<uint64_t> buffer(kBytes / sizeof(uint64_t), 1);
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    std::vector<std::thread> workers;
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const auto begin = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const size_t n = buffer.size() / static_cast<size_t>(threads);
        const uint64_t* p = buffer.data() + n * static_cast<size_t>(t);
        uint64_t a = 0, b = 0, c = 0, d = 0;  // independent chains so loads overlap
        for (size_t i = 0; i + 4 <= n; i += 4) {
          a += p[i];
          b += p[i + 1];
          c += p[i + 2];
          d += p[i + 3];
        }
        sums[static_cast<size_t>(t)] = a + b + c + d;
      });
    }
    for (auto& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    uint64_t total = 0;
    for (uint64_t s : sums) total += s;
    if (total == 0) return 0;  // keeps the loads from being optimised away
    best = std::max(best, double(kBytes) / seconds);
  }
  return best;
}

void add_roofline(const ModelFootprint& f, const model::Model& model, double kv_bytes_per_position,
                  nlohmann::json& tests, int threads) {
  const model::ModelConfig& c = model.config();
  const double bandwidth = measure_read_bandwidth(threads);
  for (auto& t : tests) {
    const int64_t np = t["n_prompt"], ng = t["n_gen"], nd = t["n_depth"], npl = t["n_parallel"];
    const double tps = t["avg_ts"];
    // Mean context a token of the test attends to: the depth plus half the test's own tokens.
    const double context = double(nd) + double(np + ng) / 2;
    t["read_bandwidth_gbs"] = bandwidth / 1e9;
    if (ng > 0) {
      // Weights are read once per step and shared by the step's n_parallel tokens; each token
      // reads its own sequence's K and V in every layer.
      const double kv = context * kv_bytes_per_position;
      const double per_token = double(f.matmul_bytes) / double(npl) + kv;
      t["bytes_per_token"] = per_token;
      t["kv_bytes_per_token"] = kv;
      t["achieved_gbs"] = per_token * tps / 1e9;
      t["bandwidth_fraction"] = per_token * tps / bandwidth;
      t["bound_ts"] = bandwidth / per_token;
    }
    const double attention = 2.0 * 2 * c.n_layers * c.n_heads * c.head_dim * context;  // QK, PV
    const double flop_per_token = 2.0 * double(f.matmul_parameters) + attention;
    t["gflop_per_token"] = flop_per_token / 1e9;
    t["gflops"] = tps * flop_per_token / 1e9;
  }
}

void print_roofline(const ModelFootprint& f, const nlohmann::json& tests, int threads) {
  if (tests.empty()) return;
  fmt::print("\nroofline ({} threads, measured read bandwidth {:.1f} GB/s):\n", threads,
             tests[0]["read_bandwidth_gbs"].get<double>());
  for (const auto& t : tests) {
    const int64_t np = t["n_prompt"], ng = t["n_gen"], npl = t["n_parallel"];
    if (ng > 0) {
      fmt::print(
          "  tg{}{}: {:.1f} MB read per token ({:.1f} MB weights{} + {:.2f} MB KV), {:.1f} GB/s "
          "= {:.0f}% of bandwidth; bound {:.0f} tok/s\n",
          ng, npl > 1 ? fmt::format(" x{}", npl) : "", t["bytes_per_token"].get<double>() / 1e6,
          f.matmul_bytes / 1e6, npl > 1 ? fmt::format(" / {}", npl) : "",
          t["kv_bytes_per_token"].get<double>() / 1e6, t["achieved_gbs"].get<double>(),
          100 * t["bandwidth_fraction"].get<double>(), t["bound_ts"].get<double>());
    }
    if (np > 0 || npl > 1) {
      fmt::print("  {}: {:.1f} GFLOP/s ({:.2f} GFLOP per token)\n",
                 np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{} x{}", ng, npl),
                 t["gflops"].get<double>(), t["gflop_per_token"].get<double>());
    }
  }
}

}  // namespace inferd::app
