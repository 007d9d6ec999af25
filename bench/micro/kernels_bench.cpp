// Micro-benchmarks of the hot kernels, for every ISA this CPU runs (Google
// Benchmark). They tell where a kernel stands against the machine's peak; speed claims about
// the whole engine come from `inferd bench` and bench/compare-llama-cpp, not from here.
//
//   build/bin/inferd_kernels_bench --benchmark_filter=Gemm
//
// Gemm cases run on 1 and 2 threads (wall-clock time). Counters: MAC/s for the matmuls
// (multiply-adds of weights by activations), keys/s for attention (query rows x keys attended per
// second), tokens/s for Gated DeltaNet (one head's tokens through its state per second).
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/delta_net.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/packed.h"
#include "kv/kv_cache.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"
#include "util/thread_pool.h"

namespace inferd::kernels {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// GGUF rows of `type`: normal random weights through our quantizer, so every scale is valid.
std::vector<uint8_t> random_rows(DType type, int64_t rows, int64_t cols, size_t& row_bytes) {
  row_bytes = static_cast<size_t>(*inferd::row_bytes(type, cols));
  std::vector<uint8_t> data(row_bytes * static_cast<size_t>(rows));
  const auto quantize = quant::quantizer_for(type);
  const auto weights = random_floats(static_cast<size_t>(cols), 7);
  for (int64_t r = 0; r < rows; ++r)  // one row repeated: speed does not depend on the values
    quantize(weights.data(), data.data() + static_cast<size_t>(r) * row_bytes, cols);
  return data;
}

// `copies` > 1 cycles through that many copies of the matrix, so that with enough of them
// (more than the last-level cache holds) the weights come from memory, as in a model.
void BM_PackedGemm(benchmark::State& state, const KernelTable* table, DType type, int64_t rows,
                   int64_t cols, int copies) {
  const int64_t n_tokens = state.range(0);
  size_t row_bytes = 0;
  const auto raw = random_rows(type, rows, cols, row_bytes);
  std::vector<WeightMatrix> matrices;
  for (int c = 0; c < copies; ++c) {
    matrices.push_back({type, rows, cols, row_bytes, raw.data(), nullptr});
    matrices.back().packed = PackedWeights::pack(type, raw.data(), rows, cols, row_bytes);
  }
  size_t next = 0;
  const auto x = random_floats(static_cast<size_t>(n_tokens * cols), 1);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  ActivationScratch scratch;
  scratch.reserve(n_tokens, cols);
  ThreadPool pool(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    matmul(matrices[next], x.data(), n_tokens, y.data(), scratch, pool, *table);
    next = (next + 1) % matrices.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(rows * cols * n_tokens),
                                               benchmark::Counter::kIsIterationInvariantRate);
  // Packed weight bytes read per second: against the machine's read bandwidth for decode.
  const auto& packed = *matrices.front().packed;
  state.counters["weight_B/s"] = benchmark::Counter(
      static_cast<double>(packed.groups() * packed.blocks_per_row() * packed.block_bytes()),
      benchmark::Counter::kIsIterationInvariantRate);
}

// Packing a matrix at load (PackedWeights::pack, on the threads it takes: as many as the CPUs
// allowed): GGUF bytes read per second, the part of a model's load time that is inferd's own
// work (the rest is reading the file and the kernel's page faults). malloc is told to keep
// freed memory, so each pack writes into pages the one before faulted in.
void BM_Pack(benchmark::State& state, DType type) {
  constexpr int64_t kRows = 2048, kCols = 8192;
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  size_t row_bytes = 0;
  const auto raw = random_rows(type, kRows, kCols, row_bytes);
  benchmark::DoNotOptimize(PackedWeights::pack(type, raw.data(), kRows, kCols, row_bytes));
  for (auto _ : state) {
    auto packed = PackedWeights::pack(type, raw.data(), kRows, kCols, row_bytes);
    benchmark::DoNotOptimize(packed->group(0));
  }
  state.counters["gguf_B/s"] = benchmark::Counter(static_cast<double>(raw.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// Attention of `n_tokens` query tokens (the last ones of a context of `context` tokens) of one
// sequence, of `shape` (SmolLM2's: 9 query heads over 3 kv heads of 64; Qwen3.5's full layers:
// 16 over 4 of 256). `layers` > 1 cycles through that many layers of KV, so that with enough of
// them (a KV cache larger than the last-level cache, as with many sequences in a batch) keys
// and values come from memory. MAC/s counts the two products (q.k and p.v) of every key.
void BM_Attention(benchmark::State& state, const KernelTable* table, int layers,
                  AttentionShape shape) {
  const int n_tokens = static_cast<int>(state.range(0)), context = static_cast<int>(state.range(1));
  const int block_size = 16, blocks = (context + block_size - 1) / block_size;
  kv::KvCache cache(
      kv::KvCacheConfig{layers, shape.n_kv_heads, shape.head_dim, block_size, blocks, DType::F16});
  std::vector<int32_t> block_table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) block_table[static_cast<size_t>(b)] = blocks - 1 - b;
  const int kv_dim = shape.n_kv_heads * shape.head_dim, q_dim = shape.n_heads * shape.head_dim;
  const auto kv = random_floats(static_cast<size_t>(2 * kv_dim), 3);
  for (int t = 0; t < context; ++t) {
    const int64_t slot =
        int64_t{block_table[static_cast<size_t>(t / block_size)]} * block_size + t % block_size;
    for (int l = 0; l < layers; ++l) cache.write(l, slot, kv.data(), kv.data() + kv_dim);
  }
  const auto q = random_floats(static_cast<size_t>(n_tokens * q_dim), 4);
  std::vector<float> out(q.size());
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t) positions[static_cast<size_t>(t)] = context - n_tokens + t;
  const int tile_tokens = attention_tile_tokens(shape);
  int layer = 0;
  for (auto _ : state) {
    for (int t0 = 0; t0 < n_tokens; t0 += tile_tokens) {
      for (int h = 0; h < shape.n_kv_heads; ++h) {
        const AttentionTile tile{q.data() + t0 * q_dim, positions.data() + t0,
                                 std::min(tile_tokens, n_tokens - t0), h, out.data() + t0 * q_dim};
        attend_tile(tile, cache, layer, block_table, shape, nullptr, *table);
      }
    }
    layer = (layer + 1) % layers;
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["keys/s"] =
      benchmark::Counter(static_cast<double>(n_tokens) * shape.n_heads * context,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MAC/s"] =
      benchmark::Counter(2.0 * n_tokens * shape.n_heads * context * shape.head_dim,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// n floats at a 64-byte boundary, zeroed.
std::unique_ptr<float[], void (*)(void*)> aligned_floats(size_t n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  std::unique_ptr<float[], void (*)(void*)> p(static_cast<float*>(std::aligned_alloc(64, bytes)),
                                              std::free);
  std::memset(p.get(), 0, bytes);
  return p;
}

// One Gated DeltaNet head (d = 128, Qwen3-Next's and Qwen3.5's) over n_tokens tokens, the state
// carried from call to call (it stays in L2: 64 KiB), in the recurrent or the chunked form. The
// buffers are 64-byte aligned, as a model's should be (rows that straddle cache lines cost about
// 30% here).
void BM_DeltaNet(benchmark::State& state, const KernelTable* table, bool chunked) {
  const int d = 128;
  const int64_t n = state.range(0);
  const size_t size = static_cast<size_t>(n * d);
  auto q = aligned_floats(size), k = aligned_floats(size), v = aligned_floats(size);
  for (auto [x, seed] : {std::pair{q.get(), 1u}, std::pair{k.get(), 2u}, std::pair{v.get(), 3u}}) {
    const auto values = random_floats(size, seed);
    std::memcpy(x, values.data(), size * sizeof(float));
  }
  l2_norm_rows(q.get(), n, d, d, 1e-6f);
  l2_norm_rows(k.get(), n, d, d, 1e-6f);
  std::vector<float> g(static_cast<size_t>(n), -0.05f), beta(static_cast<size_t>(n), 0.5f);
  auto s = aligned_floats(static_cast<size_t>(d * d)), out = aligned_floats(size);
  auto scratch = aligned_floats(static_cast<size_t>(delta_net_chunked_scratch_floats(d)));
  const float scale = 1.0f / std::sqrt(float(d));
  for (auto _ : state) {
    if (chunked) {
      table->delta_net.chunked(s.get(), d, n, q.get(), k.get(), d, v.get(), d, g.data(),
                               beta.data(), 1, scale, out.get(), d, scratch.get());
    } else {
      table->delta_net.recurrent(s.get(), d, n, q.get(), k.get(), d, v.get(), d, g.data(),
                                 beta.data(), 1, scale, out.get(), d);
    }
    benchmark::DoNotOptimize(out.get());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// LoRA's up projection (KernelTable::lora_up) over Llama-3.2-1B's ffn_up (out 8192) at rank
// `rank`, for `rows` tokens; "memory" cycles through copies of B that together pass the
// last-level cache (as a decode step reads a whole adapter).
void BM_LoraUp(benchmark::State& state, const KernelTable* table, int64_t rank, int copies) {
  const int64_t rows = state.range(0), out = 8192;
  std::vector<std::vector<float>> bts;
  for (int c = 0; c < copies; ++c)
    bts.push_back(random_floats(static_cast<size_t>(rank * out), 7 + static_cast<uint32_t>(c)));
  const auto low = random_floats(static_cast<size_t>(rows * rank), 3);
  std::vector<float> y(static_cast<size_t>(rows * out));
  std::vector<float*> y_rows;
  for (int64_t t = 0; t < rows; ++t) y_rows.push_back(y.data() + t * out);
  size_t c = 0;
  for (auto _ : state) {
    table->lora_up(rows, rank, out, out, low.data(), bts[c].data(), y_rows.data());
    c = (c + 1) % bts.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  for (auto [type, name] : {std::pair{DType::Q4_K, "q4_k"}, std::pair{DType::Q5_K, "q5_k"},
                            std::pair{DType::Q6_K, "q6_k"}, std::pair{DType::Q8_0, "q8_0"},
                            std::pair{DType::IQ4_XS, "iq4_xs"}, std::pair{DType::Q3_K, "q3_k"},
                            std::pair{DType::Q2_K, "q2_k"}, std::pair{DType::Q4_0, "q4_0"},
                            std::pair{DType::Q5_0, "q5_0"}, std::pair{DType::F16, "f16"},
                            std::pair{DType::MXFP4, "mxfp4"}}) {
    benchmark::RegisterBenchmark((std::string("Pack/") + name + "/2048x8192").c_str(), BM_Pack,
                                 type)
        ->UseRealTime();
  }
  for (const KernelTable* table : available_kernels()) {
    const std::string isa(table->isa);
    // SmolLM2-135M's shapes: gate/up (1536 x 576) and down (576 x 1536).
    for (auto [type, name] : {std::pair{DType::Q4_1, "q4_1"}, std::pair{DType::Q8_0, "q8_0"}}) {
      for (auto [rows, cols] : {std::pair{1536, 576}, std::pair{576, 1536}}) {
        for (auto [copies, where] : {std::pair{1, "cached"}, std::pair{128, "memory"}}) {
          const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
          benchmark::RegisterBenchmark(
              ("Gemm/" + isa + "/" + name + "/" + shape + "/" + where).c_str(), BM_PackedGemm,
              table, type, rows, cols, copies)
              ->ArgsProduct({{1, 2, 3, 4, 5, 6, 8, 16, 17, 24, 32, 64, 512}, {1, 2}})
              ->ArgNames({"tokens", "threads"})
              ->UseRealTime();
        }
      }
    }
    // SmolLM2-135M's output head (Q8_0, 49152 x 576, 30 MB: two copies pass the last-level
    // cache), at the few tokens of a speculative verification step.
    benchmark::RegisterBenchmark(("Gemm/" + isa + "/q8_0/49152x576/memory").c_str(), BM_PackedGemm,
                                 table, DType::Q8_0, 49152, 576, 2)
        ->ArgsProduct({{1, 2, 3, 4, 5, 6}, {1, 2}})
        ->ArgNames({"tokens", "threads"})
        ->UseRealTime();
    // F16 at the few tokens of a speculative verification step (a draft target in F16).
    for (auto [rows, cols] : {std::pair{1536, 576}, std::pair{576, 1536}}) {
      const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
      for (auto [copies, where] : {std::pair{1, "cached"}, std::pair{64, "memory"}}) {
        benchmark::RegisterBenchmark(("Gemm/" + isa + "/f16/" + shape + "/" + where).c_str(),
                                     BM_PackedGemm, table, DType::F16, rows, cols, copies)
            ->ArgsProduct({{1, 2, 3, 4, 5, 8}, {1, 2}})
            ->ArgNames({"tokens", "threads"})
            ->UseRealTime();
      }
    }
    // Llama-3.2-1B's attention projection (2048 x 2048) in the types of its quantized files;
    // "memory" cycles through 24 copies (50 MB and more, past any last-level cache here).
    for (auto [type, name] : {std::pair{DType::Q4_K, "q4_k"}, std::pair{DType::Q5_K, "q5_k"},
                              std::pair{DType::Q6_K, "q6_k"}, std::pair{DType::Q8_0, "q8_0"},
                              std::pair{DType::IQ4_XS, "iq4_xs"}, std::pair{DType::Q3_K, "q3_k"},
                              std::pair{DType::Q2_K, "q2_k"}}) {
      for (auto [copies, where] : {std::pair{1, "cached"}, std::pair{24, "memory"}}) {
        benchmark::RegisterBenchmark(("Gemm/" + isa + "/" + name + "/2048x2048/" + where).c_str(),
                                     BM_PackedGemm, table, type, 2048, 2048, copies)
            ->ArgsProduct({{1, 512}, {1, 2}})
            ->ArgNames({"tokens", "threads"})
            ->UseRealTime();
      }
    }
    for (auto [layers, where] : {std::pair{1, "cached"}, std::pair{256, "memory"}}) {
      benchmark::RegisterBenchmark(("Attention/" + isa + "/" + where).c_str(), BM_Attention, table,
                                   layers, AttentionShape{9, 3, 64, 0.125f})
          ->Args({1, 256})
          ->Args({16, 256})
          ->Args({128, 128})
          ->Args({512, 512});
    }
    // A prompt step of 64 tokens deep in a long prompt, on Qwen3.5's full-attention layers.
    benchmark::RegisterBenchmark(("Attention/" + isa + "/cached/hd256").c_str(), BM_Attention,
                                 table, 1, AttentionShape{16, 4, 256, 0.0625f})
        ->Args({64, 4096});
    for (int64_t rank : {8, 64}) {
      for (auto [copies, where] : {std::pair{1, "cached"}, std::pair{24, "memory"}}) {
        benchmark::RegisterBenchmark(
            ("LoraUp/" + isa + "/rank" + std::to_string(rank) + "/" + where).c_str(), BM_LoraUp,
            table, rank, copies)
            ->ArgsProduct({{1, 8, 64}})
            ->ArgNames({"tokens"});
      }
    }
    for (bool chunked : {false, true}) {
      benchmark::RegisterBenchmark(
          ("DeltaNet/" + isa + (chunked ? "/chunked" : "/recurrent") + "/d128").c_str(),
          BM_DeltaNet, table, chunked)
          ->ArgsProduct({{1, 16, 64, 512}})
          ->ArgNames({"tokens"});
    }
  }
}

}  // namespace
}  // namespace inferd::kernels

int main(int argc, char** argv) {
  inferd::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
