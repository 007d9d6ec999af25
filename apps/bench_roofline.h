// The physical limits `inferd bench` reports against: bytes of weights (and KV) read per
// decoded token, the machine's measured read bandwidth, and prefill FLOPs.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "kernels/read_bandwidth.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace inferd::app {

struct ModelFootprint {
  uint64_t total_bytes = 0;        // all tensors
  uint64_t parameters = 0;         // all tensor elements
  // Weights a decode step of one token streams: every 2-D matrix (the output once even when
  // tied) and, of a mixture of experts, expert_used_count / expert_count of the routed experts.
  uint64_t matmul_bytes = 0;
  uint64_t matmul_parameters = 0;  // their elements: 2 FLOPs each per token
};

ModelFootprint model_footprint(const gguf::GgufFile& file);

// Read bandwidth of this machine for the roofline: the probe of kernels/read_bandwidth.h with
// the decode pool's threads over read_bandwidth_probe_bytes(), best of 10 passes.
kernels::ReadBandwidth measure_read_bandwidth(ThreadPool& pool);

// The report's words for a decode rate that reads `fraction` of the measured bandwidth:
// "83% of bandwidth"; above 1 the percentage is capped at 100 and the text says the bound is
// wrong (the probe under-measured, or part of the weights stayed in the caches).
std::string describe_bandwidth_fraction(double fraction);

// Adds the roofline fields to each pp/tg result in `tests` (llama-bench JSON objects), with the
// read bandwidth measured once: "read_bandwidth_gbs" (best pass), "read_bandwidth_median_gbs",
// "read_bandwidth_buffer_mib", "read_bandwidth_isa" on all; tg: "bytes_per_token",
// "achieved_gbs", "bandwidth_fraction" (achieved / measured, as measured: it can exceed 1),
// "bandwidth_bound_exceeded" (it does), "bound_ts"; pp: "gflops", "gflop_per_token".
// `cache` tells the K and V bytes a token reads at a given context (kv/kv_cache.h).
void add_roofline(const ModelFootprint& footprint, const model::Model& model,
                  const kv::KvCache& cache, nlohmann::json& tests,
                  const kernels::ReadBandwidth& bandwidth);

// Prints the roofline fields of `tests` as a short summary.
void print_roofline(const ModelFootprint& footprint, const nlohmann::json& tests, int threads);

}  // namespace inferd::app
