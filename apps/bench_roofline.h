// The physical limits `inferd bench` reports against: bytes of weights (and KV) read per
// decoded token, the machine's measured read bandwidth, and prefill FLOPs.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "model/model.h"

namespace inferd::app {

struct ModelFootprint {
  uint64_t total_bytes = 0;        // all tensors
  uint64_t parameters = 0;         // all tensor elements
  uint64_t matmul_bytes = 0;       // 2-D weights a decode step streams (output once even when tied)
  uint64_t matmul_parameters = 0;  // their elements: 2 FLOPs each per token
};

ModelFootprint model_footprint(const gguf::GgufFile& file);

// Read bandwidth of this machine in bytes/s: `threads` threads summing a buffer far larger
// than the caches; the best of a few runs.
double measure_read_bandwidth(int threads);

// Adds the roofline fields to each pp/tg result in `tests` (llama-bench JSON objects), measuring
// the read bandwidth once: "read_bandwidth_gbs" on all; tg: "bytes_per_token", "achieved_gbs",
// "bandwidth_fraction", "bound_ts"; pp: "gflops", "gflop_per_token". kv_bytes_per_position: the
// KV cache bytes of one token position over all layers (K and V, in the cache's types).
void add_roofline(const ModelFootprint& footprint, const model::Model& model,
                  double kv_bytes_per_position, nlohmann::json& tests, int threads);

// Prints the roofline fields of `tests` as a short summary.
void print_roofline(const ModelFootprint& footprint, const nlohmann::json& tests, int threads);

}  // namespace inferd::app
