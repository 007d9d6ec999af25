#include "bench_roofline.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <string>

namespace inferd::app {

namespace {

// Whether a tensor holds routed experts: merged (`blk.N.ffn_gate_exps.weight`, 3-D) or one
// expert's matrix in Mixtral's older files (`blk.N.ffn_up.E.weight`).
bool routed_experts(const gguf::TensorInfo& t) {
  if (t.shape.size() == 3 && t.name.find("_exps.") != std::string::npos) return true;
  const size_t ffn = t.name.find(".ffn_");
  if (ffn == std::string::npos) return false;
  const size_t dot = t.name.find('.', ffn + 1);
  return dot != std::string::npos && dot + 1 < t.name.size() &&
         std::isdigit(static_cast<unsigned char>(t.name[dot + 1]));
}

}  // namespace

ModelFootprint model_footprint(const gguf::GgufFile& file) {
  ModelFootprint f;
  const bool tied = file.find_tensor("output.weight") == nullptr;
  // A decode token reads expert_used_count of expert_count routed experts per layer.
  const std::string a = file.architecture() + ".";
  const int64_t experts = file.get_int(a + "expert_count").value_or(0);
  const double active = experts > 0 ? double(file.get_int(a + "expert_used_count").value_or(experts)) /
                                          double(experts)
                                    : 1.0;
  // Gemma 4's KV-sharing layers may carry key and value projections they never run.
  const int64_t first_shared = file.get_int(a + "block_count").value_or(0) -
                               file.get_int(a + "attention.shared_kv_layers").value_or(0);
  const auto unused_kv_projection = [&](const std::string& name) {
    int layer = -1;
    char kind[16] = {};
    return std::sscanf(name.c_str(), "blk.%d.attn_%15[^.].weight", &layer, kind) == 2 &&
           layer >= first_shared && (std::string(kind) == "k" || std::string(kind) == "v");
  };
  for (const gguf::TensorInfo& t : file.tensors()) {
    f.total_bytes += t.num_bytes;
    f.parameters += t.num_elements();
    // Decode reads every 2-D matrix once per token, and its share of the routed experts. The
    // embedding tables (the token's and Gemma 4's per-layer one) are only looked up (one row)
    // unless the first doubles as the output matrix.
    const bool embedding = t.name == "token_embd.weight";
    if (t.name == "per_layer_token_embd.weight" || unused_kv_projection(t.name)) continue;
    if (routed_experts(t)) {
      f.matmul_bytes += static_cast<uint64_t>(double(t.num_bytes) * active);
      f.matmul_parameters += static_cast<uint64_t>(double(t.num_elements()) * active);
    } else if (t.shape.size() == 2 && (!embedding || tied)) {
      f.matmul_bytes += t.num_bytes;
      f.matmul_parameters += t.num_elements();
    }
  }
  return f;
}

kernels::ReadBandwidth measure_read_bandwidth(ThreadPool& pool) {
  return kernels::measure_read_bandwidth(pool, kernels::read_bandwidth_probe_bytes(), 10);
}

std::string describe_bandwidth_fraction(double fraction) {
  if (!(fraction > 1)) return fmt::format("{:.0f}% of bandwidth", 100 * fraction);
  return fmt::format(
      "100% of bandwidth (decode read {:.0f}% of the probe's figure: the bound is wrong, the probe "
      "under-measured or the weights partly stayed in the caches)",
      100 * fraction);
}

void add_roofline(const ModelFootprint& f, const model::Model& model, const kv::KvCache& cache,
                  nlohmann::json& tests, const kernels::ReadBandwidth& probe) {
  const model::ModelConfig& c = model.config();
  const double bandwidth = probe.best_bytes_per_second;
  for (auto& t : tests) {
    const int64_t np = t["n_prompt"], ng = t["n_gen"], nd = t["n_depth"], npl = t["n_parallel"];
    const double tps = t["avg_ts"];
    // Mean context a token of the test attends to: the depth plus half the test's own tokens.
    const double context = double(nd) + double(np + ng) / 2;
    t["read_bandwidth_gbs"] = bandwidth / 1e9;
    t["read_bandwidth_median_gbs"] = probe.median_bytes_per_second / 1e9;
    t["read_bandwidth_buffer_mib"] = double(probe.buffer_bytes) / 1048576.0;
    t["read_bandwidth_isa"] = std::string(probe.isa);
    if (ng > 0) {
      // Weights are read once per step and shared by the step's n_parallel tokens; each token
      // reads its own sequence's K and V in every layer.
      const double kv = cache.bytes_read_at(context);
      // A hybrid model's recurrent state is read and written whole by every token.
      const double state = 2.0 * double(c.recurrent_state_floats) * sizeof(float);
      const double per_token = double(f.matmul_bytes) / double(npl) + kv + state;
      t["bytes_per_token"] = per_token;
      t["kv_bytes_per_token"] = kv;
      t["state_bytes_per_token"] = state;
      t["achieved_gbs"] = per_token * tps / 1e9;
      t["bandwidth_fraction"] = per_token * tps / bandwidth;
      t["bandwidth_bound_exceeded"] = per_token * tps > bandwidth;
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
  const nlohmann::json& first = tests[0];
  fmt::print(
      "\nroofline ({} threads, measured read bandwidth {:.1f} GB/s: best of the probe's passes "
      "over {:.0f} MiB with {} loads, median {:.1f} GB/s):\n",
      threads, first["read_bandwidth_gbs"].get<double>(),
      first["read_bandwidth_buffer_mib"].get<double>(),
      first["read_bandwidth_isa"].get<std::string>(),
      first["read_bandwidth_median_gbs"].get<double>());
  for (const auto& t : tests) {
    const int64_t np = t["n_prompt"], ng = t["n_gen"], npl = t["n_parallel"];
    if (ng > 0) {
      fmt::print(
          "  tg{}{}: {:.1f} MB read per token ({:.1f} MB weights{} + {:.2f} MB KV{}), {:.1f} GB/s "
          "= {}; bound {:.0f} tok/s\n",
          ng, npl > 1 ? fmt::format(" x{}", npl) : "", t["bytes_per_token"].get<double>() / 1e6,
          f.matmul_bytes / 1e6, npl > 1 ? fmt::format(" / {}", npl) : "",
          t["kv_bytes_per_token"].get<double>() / 1e6,
          t["state_bytes_per_token"].get<double>() > 0
              ? fmt::format(" + {:.1f} MB recurrent state read and written",
                            t["state_bytes_per_token"].get<double>() / 1e6)
              : "",
          t["achieved_gbs"].get<double>(),
          describe_bandwidth_fraction(t["bandwidth_fraction"].get<double>()),
          t["bound_ts"].get<double>());
    }
    if (np > 0 || npl > 1) {
      fmt::print("  {}: {:.1f} GFLOP/s ({:.2f} GFLOP per token)\n",
                 np > 0 ? fmt::format("pp{}", np) : fmt::format("tg{} x{}", ng, npl),
                 t["gflops"].get<double>(), t["gflop_per_token"].get<double>());
    }
  }
}

}  // namespace inferd::app
