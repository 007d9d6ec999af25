// The CUDA executor of the shared decoder (model/decoder.h): the same ArchSpec, run with the
// kernels of cuda/kernels.cuh on weights, KV blocks and activations in device memory.
//
// Weights are uploaded as the file's GGUF blocks (Q4_K, Q6_K, Q8_0, F16, BF16, F32); other
// types are dequantized to F16 on the host at load. Decode-sized steps (up to kGemvTokens rows)
// multiply with the int8 matrix-vector kernels on the quantized blocks; larger steps dequantize
// each weight matrix in slices to F16 and multiply with cuBLAS on the tensor cores.
//
// The KV cache keeps the engine's block tables and pools (kv/kv_cache.h: the prefix cache and
// the scheduler work on block ids, unchanged); only the blocks' storage is here, F16,
// [layer][block][kv head][offset][head dim], allocated at the first step for the cache's shape.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/cublas_library.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.cuh"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/decoder.h"
#include "model/layer_weights.h"
#include "tensor/half.h"
#include "util/error.h"

namespace inferd::model {
namespace {

using cuda::check;
using cuda::DeviceBuffer;
using cuda::DeviceMatrix;
using cuda::WeightType;

// Steps of at most this many tokens take the matrix-vector kernels (weights read once per 8
// tokens); larger ones the dequantize + cuBLAS route.
constexpr int64_t kGemvTokens = 16;
// Values of the F16 slice a weight matrix is dequantized into for cuBLAS.
constexpr int64_t kDequantSliceValues = int64_t{64} << 20;

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS: {} failed: {}", what, cuda::cublas().status_string(status));
}

std::optional<WeightType> device_type(DType type) {
  switch (type) {
    case DType::F32: return WeightType::F32;
    case DType::F16: return WeightType::F16;
    case DType::BF16: return WeightType::BF16;
    case DType::Q8_0: return WeightType::Q8_0;
    case DType::Q4_K: return WeightType::Q4_K;
    case DType::Q6_K: return WeightType::Q6_K;
    default: return std::nullopt;
  }
}

struct CudaLayer {
  const float* attn_norm = nullptr;  // [n_embd]
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  bool sliding = false;
};

// Uploads the tensors the decoder takes, remembering which, so that one it does not use stops
// the load (as model/weights.h does for the CPU).
class DeviceWeightLoader {
 public:
  explicit DeviceWeightLoader(const gguf::GgufFile& file) : file_(file) {}

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

  DeviceMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    return matrix_rows(name, 0, rows, rows, cols);
  }

  // Rows [row_begin, row_begin + rows) of a [total_rows, cols] matrix (fused tensors).
  DeviceMatrix matrix_rows(const std::string& name, int64_t row_begin, int64_t rows,
                           int64_t total_rows, int64_t cols) {
    const gguf::TensorInfo& t = find(name);
    if (t.shape.size() != 2 || int64_t(t.shape[0]) != cols || int64_t(t.shape[1]) != total_rows)
      fail("{}: tensor '{}' has shape {}, expected [{}, {}]", file_.name(), name,
           t.shape_string(), cols, total_rows);
    if (cols % 32 != 0)
      fail("{}: tensor '{}' rows of {} values are not a multiple of 32", file_.name(), name, cols);
    auto it = uploaded_.find(name);
    if (it == uploaded_.end()) it = uploaded_.emplace(name, upload(t, total_rows, cols)).first;
    DeviceMatrix m = it->second;
    m.data += static_cast<size_t>(row_begin) * m.row_bytes;
    m.rows = rows;
    return m;
  }

  const float* vector(const std::string& name, int64_t n) {
    const std::vector<float> values = host_vector(name, n);
    return static_cast<const float*>(keep(values.data(), values.size() * sizeof(float)));
  }

  // A vector's values on the host (what the device does not read: RoPE's frequency divisors,
  // which go into the tables), taken as used like the others.
  std::vector<float> host_vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = find(name);
    if (int64_t(t.num_elements()) != n)
      fail("{}: tensor '{}' has shape {}, expected {} values", file_.name(), name,
           t.shape_string(), n);
    std::vector<float> values(static_cast<size_t>(n));
    if (t.type == DType::F32) {
      std::memcpy(values.data(), t.data, values.size() * sizeof(float));
    } else if (t.type == DType::F16 || t.type == DType::BF16) {
      const auto* h = reinterpret_cast<const uint16_t*>(t.data);
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = t.type == DType::F16 ? fp16_to_fp32(h[i]) : bf16_to_fp32(h[i]);
    } else {
      fail("{}: tensor '{}' is {}, expected F32, F16 or BF16", file_.name(), name,
           dtype_name(t.type));
    }
    return values;
  }

  const float* optional_vector(const std::string& name, int64_t n) {
    return has(name) ? vector(name, n) : nullptr;
  }

  void check_all_used() const {
    for (const gguf::TensorInfo& t : file_.tensors()) {
      if (!used_.contains(t.name))
        fail("{}: tensor '{}' is not used by the {} architecture on CUDA (not implemented)",
             file_.name(), t.name, file_.architecture());
    }
  }

  std::vector<DeviceBuffer> take_buffers() { return std::move(buffers_); }
  size_t bytes() const { return bytes_; }

 private:
  const gguf::TensorInfo& find(const std::string& name) {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) fail("{}: tensor '{}' not found", file_.name(), name);
    used_.insert(name);
    return *t;
  }

  const void* keep(const void* host, size_t bytes) {
    // kWeightPadding bytes more: the Q6_K kernel's aligned loads read up to 3 bytes past a
    // 2-byte aligned run (kernels.cu, load_words_a2).
    DeviceBuffer& b = buffers_.emplace_back(bytes + cuda::kWeightPadding);
    cuda::check(cudaMemset(b.get(), 0, b.bytes()), "clearing weights");
    cuda::check(cudaMemcpy(b.get(), host, bytes, cudaMemcpyHostToDevice), "uploading weights");
    bytes_ += bytes;
    return b.get();
  }

  // The whole tensor, as its GGUF blocks when a kernel reads its type, else as F16.
  DeviceMatrix upload(const gguf::TensorInfo& t, int64_t rows, int64_t cols) {
    DeviceMatrix m;
    m.rows = rows;
    m.cols = cols;
    if (const std::optional<WeightType> type = device_type(t.type)) {
      m.type = *type;
      m.row_bytes = static_cast<size_t>(cols / cuda::block_values(*type)) *
                    static_cast<size_t>(cuda::block_bytes(*type));
      m.data = static_cast<const uint8_t*>(keep(t.data, m.row_bytes * static_cast<size_t>(rows)));
      return m;
    }
    // Any type the CPU reads, dequantized row by row and rounded to F16.
    const kernels::WeightMatrix host{t.type, rows, cols,
                                     static_cast<size_t>(t.num_bytes / static_cast<uint64_t>(rows)),
                                     t.data, nullptr};
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint16_t> halves(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      kernels::dequantize_row(host, r, row.data());
      for (int64_t c = 0; c < cols; ++c) halves[static_cast<size_t>(r * cols + c)] = fp32_to_fp16(row[size_t(c)]);
    }
    m.type = WeightType::F16;
    m.row_bytes = static_cast<size_t>(cols) * 2;
    m.data = static_cast<const uint8_t*>(keep(halves.data(), halves.size() * 2));
    return m;
  }

  const gguf::GgufFile& file_;
  std::unordered_set<std::string> used_;
  std::unordered_map<std::string, DeviceMatrix> uploaded_;
  std::vector<DeviceBuffer> buffers_;
  size_t bytes_ = 0;
};

// Carves typed spans out of one device allocation.
class DeviceArena {
 public:
  template <typename T>
  void plan(T** slot, size_t count) {
    plans_.push_back({reinterpret_cast<void**>(slot), (count * sizeof(T) + 255) / 256 * 256});
  }
  void allocate() {
    size_t total = 0;
    for (const Plan& p : plans_) total += p.bytes;
    memory_ = DeviceBuffer(total);
    size_t offset = 0;
    for (const Plan& p : plans_) {
      *p.slot = memory_.get<uint8_t>() + offset;
      offset += p.bytes;
    }
    plans_.clear();
  }
  size_t bytes() const { return memory_.bytes(); }

 private:
  struct Plan {
    void** slot;
    size_t bytes;
  };
  std::vector<Plan> plans_;
  DeviceBuffer memory_;
};

// INFERD_CUDA_STEP_TIMES=1: where a decode step's time goes, printed to stderr when the model is
// destroyed: the device's time from the step's upload to its logits' download (events), the
// host's time in forward(), and the caller's time between one forward() and the next (a
// device idle gap). Steps keep their graphs.
class StepTimes {
 public:
  using Clock = std::chrono::steady_clock;
  bool on() const { return on_; }
  void enable() {
    on_ = true;
    check(cudaEventCreate(&start_), "creating a step event");
    check(cudaEventCreate(&end_), "creating a step event");
  }
  ~StepTimes() {
    if (!on_) return;
    if (steps_ > 0) {
      std::fprintf(stderr,
                   "inferd: CUDA step times, decode steps (%d): device %.3f ms, forward() %.3f ms, "
                   "caller between steps %.3f ms\n",
                   steps_, device_ms_ / steps_, host_ms_ / steps_,
                   gaps_ > 0 ? gap_ms_ / gaps_ : 0.0);
    }
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  void begin(cudaStream_t stream) {
    entered_ = Clock::now();
    if (returned_) {
      gap_ms_ += std::chrono::duration<double, std::milli>(entered_ - *returned_).count();
      ++gaps_;
    }
    check(cudaEventRecord(start_, stream), "recording a step event");
  }
  void end(cudaStream_t stream) { check(cudaEventRecord(end_, stream), "recording a step event"); }
  // After the step's synchronization.
  void finish(bool decode) {
    returned_ = Clock::now();
    if (!decode) {
      returned_.reset();  // a gap after a batched step is not a decode gap
      return;
    }
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, end_), "timing a step");
    device_ms_ += ms;
    host_ms_ += std::chrono::duration<double, std::milli>(*returned_ - entered_).count();
    ++steps_;
  }

 private:
  bool on_ = false;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  Clock::time_point entered_;
  std::optional<Clock::time_point> returned_;
  double device_ms_ = 0, host_ms_ = 0, gap_ms_ = 0;
  int steps_ = 0, gaps_ = 0;
};

// INFERD_CUDA_PROFILE=1: device time per section of the forward pass (events between the
// sections; steps run without graphs), printed to stderr when the model is destroyed, per step
// and separately for decode-sized and batched steps.
class SectionProfile {
 public:
  enum Section { kEmbed, kNorm, kQkv, kRope, kAttention, kOut, kGateUp, kDown, kLogits, kCount };
  static constexpr const char* kNames[kCount] = {"embed",  "norms",  "q/k/v",  "rope+kv",
                                                 "attention", "out proj", "gate/up", "down",
                                                 "logits"};
  bool on() const { return on_; }
  void enable(cudaStream_t stream) {
    on_ = true;
    stream_ = stream;
    events_.resize(4096);
    for (cudaEvent_t& e : events_) check(cudaEventCreate(&e), "creating a profile event");
  }
  ~SectionProfile() {
    if (!on_) return;
    for (int kind = 0; kind < 2; ++kind) {
      if (steps_[kind] == 0) continue;
      double total = 0;
      for (double ms : ms_[kind]) total += ms;
      std::fprintf(stderr, "inferd: CUDA profile, %s steps (%d): %.3f ms per step:",
                   kind == 0 ? "decode-sized" : "batched", steps_[kind], total / steps_[kind]);
      for (int sct = 0; sct < kCount; ++sct)
        std::fprintf(stderr, " %s %.3f", kNames[sct], ms_[kind][sct] / steps_[kind]);
      std::fprintf(stderr, "\n");
    }
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void begin() {
    if (!on_) return;
    used_ = 0;
    record(kCount);
  }
  // Ends the section that began at the previous mark.
  void mark(Section section) {
    if (on_) record(section);
  }
  void finish(bool batched) {
    if (!on_) return;
    check(cudaEventSynchronize(events_[size_t(used_ - 1)]), "profiling a step");
    for (int i = 1; i < used_; ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[size_t(i - 1)], events_[size_t(i)]), "profiling");
      ms_[batched][sections_[size_t(i)]] += ms;
    }
    ++steps_[batched];
  }

 private:
  void record(int section) {
    if (used_ >= int(events_.size())) return;
    check(cudaEventRecord(events_[size_t(used_)], stream_), "recording a profile event");
    sections_[size_t(used_)] = section;
    ++used_;
  }
  bool on_ = false;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::array<int, 4096> sections_{};
  int used_ = 0;
  double ms_[2][kCount] = {};
  int steps_[2] = {};
};

class CudaDecoder final : public Model {
 public:
  CudaDecoder(const gguf::GgufFile& file, const ModelOptions& options, ArchSpec spec)
      : config_(ModelConfig::from_gguf(file)), spec_(std::move(spec)),
        max_tokens_(options.max_batch_tokens) {
    if (!cuda::device_available()) fail("--device cuda: no CUDA device is available");
    if (spec_.moe) fail("{}: mixtures of experts do not run on CUDA yet", file.name());
    if (spec_.attention_sinks) fail("{}: attention sinks do not run on CUDA yet", file.name());
    if (spec_.mla || config_.value_head_dim > 0)
      fail("{}: values of another head size than the keys' (DeepSeek's latent attention) do not "
           "run on CUDA yet", file.name());
    if (spec_.per_layer_embd > 0 || spec_.shared_kv_layers > 0 || spec_.sliding_head_dim > 0 ||
        spec_.value_norm || spec_.layer_output_scale || spec_.full_layers_take_rope_freqs)
      fail("{}: Gemma 4's layers (per-layer embeddings, shared KV, two head sizes) do not run on "
           "CUDA yet", file.name());
    if (spec_.delta_net || spec_.gated_attention)
      fail("{}: hybrid linear-attention models (Gated DeltaNet) do not run on CUDA yet",
           file.name());
    config_.rope_mode = spec_.rope_mode;
    if (spec_.attention_scale <= 0)
      spec_.attention_scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
    const ModelConfig& c = config_;
    if (c.n_embd > cuda::kMaxNormRow || c.n_embd % 32 != 0)
      fail("{}: hidden size {} is beyond the CUDA norm kernel (a multiple of 32 up to {})",
           file.name(), c.n_embd, cuda::kMaxNormRow);
    if (c.head_dim % 8 != 0)
      fail("{}: head size {} is not a multiple of 8 (the CUDA attention kernel's loads)",
           file.name(), c.head_dim);
    if (c.head_dim > 256 || c.n_heads / c.n_kv_heads > 16)
      fail("{}: head size {} with {} query heads per kv head is beyond the CUDA attention kernel "
           "(256 and 16)",
           file.name(), c.head_dim, c.n_heads / c.n_kv_heads);
    if (spec_.sliding_window > 0) {
      config_.sliding_window = spec_.sliding_window;
      config_.sliding_layers = spec_.sliding_layers;
    }
    cuda::cublas();  // opened now, or an error that names it, before any device state exists
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    check(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, 0),
          "reading the device's multiprocessor count");
    check_cublas(cuda::cublas().create(&cublas_), "creating the handle");
    check_cublas(cuda::cublas().set_stream(cublas_, stream_), "setting the stream");
    load_weights(file, options);
    allocate_workspace();
    keep_f16_copies();
    print_memory();
    const char* graphs = std::getenv("INFERD_CUDA_GRAPHS");  // 0: launch kernels one by one
    use_graphs_ = graphs == nullptr || std::string(graphs) != "0";
    // For comparisons (kernels.cuh): INFERD_CUDA_GEMV_ROWS=1|2|4 rows a warp in one-token
    // products; INFERD_CUDA_PDL=0 launches without programmatic dependent launch.
    if (const char* rows = std::getenv("INFERD_CUDA_GEMV_ROWS")) cuda::set_gemv_rows(std::atoi(rows));
    if (const char* pdl = std::getenv("INFERD_CUDA_PDL")) cuda::set_programmatic_launch(std::string(pdl) != "0");
    if (const char* t = std::getenv("INFERD_CUDA_STEP_TIMES"); t != nullptr && std::string(t) == "1")
      step_times_.enable();
    if (const char* p = std::getenv("INFERD_CUDA_PROFILE"); p != nullptr && std::string(p) == "1") {
      profile_.enable(stream_);
      use_graphs_ = false;
    }
  }

  ~CudaDecoder() override {
    cudaStreamSynchronize(stream_);
    graphs_.clear();
    if (cublas_ != nullptr) cuda::cublas().destroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const ModelConfig& config() const override { return config_; }
  bool kv_on_device() const override { return true; }

  int64_t device_memory_for_kv() const override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "reading free device memory");
    // vLLM's --gpu-memory-utilization 0.9: of the device's memory, what is left of 90% after
    // the weights and work buffers (already allocated).
    const auto used = static_cast<int64_t>(total - free);
    return std::max<int64_t>(0, static_cast<int64_t>(0.9 * static_cast<double>(total)) - used);
  }

  void copy_kv_block(kv::KvCache& cache, size_t group, int32_t from, int32_t to) override {
    ensure_kv(cache);
    for (int l = 0; l < config_.n_layers; ++l) {
      if (static_cast<size_t>(cache.group_of(l)) != group) continue;
      cuda::copy_kv_block(k_cache(l), v_cache(l), kv_layout_, from, to, stream_);
    }
    check(cudaStreamSynchronize(stream_), "copying a KV block");
  }

  void forward(const Batch& batch, kv::KvCache& cache, float* logits, ThreadPool&) override {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens();
    if (T > max_tokens_)
      fail("batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
    if (T == 0) return;
    ensure_kv(cache);
    if (step_times_.on()) step_times_.begin(stream_);
    const Step step = stage(batch, cache);
    check(cudaMemcpyAsync(staging_.device, staging_.host.get(), step.bytes, cudaMemcpyHostToDevice,
                          stream_),
          "uploading the step");
    const auto R = static_cast<int64_t>(batch.logit_rows.size());
    if (use_graphs_ && T <= kGemvTokens && batch.hidden_rows.empty()) {
      // A decode step is hundreds of short kernels: launched one by one, the CPU's launch
      // overhead, not the GPU, sets the pace. The step is captured once per shape (tokens,
      // logit rows, chunks of keys) and replayed; its inputs are in the staging buffer, whose
      // address the graph holds.
      const GraphKey key{T, R, step.max_chunks[0], step.max_chunks[1]};
      auto it = graphs_.find(key);
      if (it == graphs_.end()) {
        cudaGraph_t graph = nullptr;
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capturing a step");
        try {
          run_layers(step, T, R);
        } catch (...) {  // leave the stream out of capture mode
          if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
          throw;
        }
        check(cudaStreamEndCapture(stream_, &graph), "capturing a step");
        cudaGraphExec_t exec = nullptr;
        const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        check(status, "instantiating a step's graph");
        it = graphs_.emplace(key, GraphExec(exec)).first;
      }
      check(cudaGraphLaunch(it->second.get(), stream_), "launching a step's graph");
    } else {
      profile_.begin();
      run_layers(step, T, R);
      profile_.finish(T > kGemvTokens);
    }
    if (!batch.hidden_rows.empty()) {
      if (batch.hidden == nullptr) fail("batch asks for hidden states without a buffer for them");
      const auto H = static_cast<int64_t>(batch.hidden_rows.size());
      cuda::gather_add_rms_norm(ws_.x, ws_.proj, staged<int32_t>(step.hidden_rows), H,
                                output_norm_, ws_.last, c.n_embd, c.rms_eps, stream_);
      check(cudaMemcpyAsync(batch.hidden, ws_.last, size_t(H * c.n_embd) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream_),
            "downloading hidden states");
    }
    // A decode step's logits come back through pinned memory: a copy into the caller's pageable
    // memory goes through the driver's own staging, chunk by chunk, while the device waits.
    const size_t logit_bytes = size_t(R * c.n_vocab) * sizeof(float);
    const bool pinned = logit_bytes <= logits_host_.bytes();
    if (R > 0) {
      check(cudaMemcpyAsync(pinned ? logits_host_.get() : static_cast<void*>(logits), ws_.logits,
                            logit_bytes, cudaMemcpyDeviceToHost, stream_),
            "downloading logits");
    }
    if (step_times_.on()) step_times_.end(stream_);
    check(cudaGetLastError(), "launching the step's kernels");
    check(cudaStreamSynchronize(stream_), "running the step");
    if (R > 0 && pinned) std::memcpy(logits, logits_host_.get(), logit_bytes);
    if (step_times_.on()) step_times_.finish(T <= kGemvTokens);
  }

 private:
  // Where each of a step's uploaded arrays is, as byte offsets into the staging buffers.
  struct Step {
    size_t tokens = 0, positions = 0, logit_rows = 0, hidden_rows = 0;
    size_t slots[kv::kMaxKvGroups] = {};
    size_t attention_tokens[kv::kMaxKvGroups] = {};
    size_t tables[kv::kMaxKvGroups] = {};
    int max_chunks[kv::kMaxKvGroups] = {};
    int keys_per_block = cuda::kAttentionChunk;
    size_t bytes = 0;
  };

  // Keys per attention block: a decode step has a few (token, kv head) pairs, too few blocks to
  // fill the device unless each one's keys are split finer.
  int keys_per_block(int64_t T) const {
    return T <= kFineSplitTokens && T * config_.n_kv_heads < 2 * multiprocessors_
               ? kFineSplitKeys
               : cuda::kAttentionChunk;
  }
  static constexpr int64_t kFineSplitTokens = 8;
  static constexpr int kFineSplitKeys = 32;

  struct Staging {
    cuda::PinnedBuffer host;
    DeviceBuffer device_memory;
    void* device = nullptr;
  };

  template <typename T>
  const T* staged(size_t offset) const {
    return reinterpret_cast<const T*>(static_cast<const uint8_t*>(staging_.device) + offset);
  }

  // The embeddings, every layer, and the logits of the R rows asked for (into ws_.logits).
  void run_layers(const Step& step, int64_t T, int64_t R) {
    const ModelConfig& c = config_;
    cuda::embed_rows(token_embd_, staged<int32_t>(step.tokens), T,
                     spec_.scale_embedding ? std::sqrt(static_cast<float>(c.n_embd)) : 1.0f, ws_.x,
                     stream_);
    profile_.mark(SectionProfile::kEmbed);
    for (int l = 0; l < c.n_layers; ++l) {
      attention_block(l, step, T);
      feed_forward_block(l, T);
    }
    if (R > 0) {
      cuda::gather_add_rms_norm(ws_.x, ws_.proj, staged<int32_t>(step.logit_rows), R, output_norm_,
                                ws_.last, c.n_embd, c.rms_eps, stream_);
      matmul(output_, ws_.last, R, ws_.logits);
      if (spec_.final_softcap > 0)
        cuda::softcap(ws_.logits, R * c.n_vocab, spec_.final_softcap, stream_);
      profile_.mark(SectionProfile::kLogits);
    }
  }

  struct GraphKey {
    int64_t tokens, logit_rows;
    int chunks0, chunks1;
    bool operator<(const GraphKey& o) const {
      return std::tie(tokens, logit_rows, chunks0, chunks1) <
             std::tie(o.tokens, o.logit_rows, o.chunks0, o.chunks1);
    }
  };
  struct GraphExecDeleter {
    void operator()(CUgraphExec_st* g) const { cudaGraphExecDestroy(g); }
  };
  using GraphExec = std::unique_ptr<CUgraphExec_st, GraphExecDeleter>;

  // Lays out the step's tokens, positions, KV slots, attention tokens and block tables in the
  // pinned staging buffer (grown, outside the steady state, when a step needs more).
  Step stage(const Batch& batch, const kv::KvCache& cache) {
    const ModelConfig& c = config_;
    const int64_t T = batch.num_tokens(), block_size = cache.block_size();
    const size_t groups = cache.groups().size();
    check_batch(batch, c.n_vocab, max_positions_);
    size_t table_entries = 0;
    for (const BatchSequence& seq : batch.sequences)
      for (size_t g = 0; g < groups; ++g) table_entries += (*seq.block_tables)[g].size();
    Step step;
    size_t offset = 0;
    const auto reserve = [&](size_t bytes) {
      const size_t at = offset;
      offset += (bytes + 15) / 16 * 16;
      return at;
    };
    step.tokens = reserve(size_t(T) * 4);
    step.positions = reserve(size_t(T) * 4);
    step.logit_rows = reserve(batch.logit_rows.size() * 4);
    step.hidden_rows = reserve(batch.hidden_rows.size() * 4);
    for (size_t g = 0; g < groups; ++g) {
      step.slots[g] = reserve(size_t(T) * 8);
      step.attention_tokens[g] = reserve(size_t(T) * sizeof(cuda::AttentionToken));
      step.tables[g] = reserve(table_entries * 4);
    }
    step.bytes = offset;
    if (step.bytes > staging_.host.bytes()) {
      const size_t bytes = std::max(step.bytes * 2, size_t{1} << 20);
      staging_.host = cuda::PinnedBuffer(bytes);
      staging_.device_memory = DeviceBuffer(bytes);
      staging_.device = staging_.device_memory.get();
      graphs_.clear();  // they read the old buffer
    }
    uint8_t* base = staging_.host.get<uint8_t>();
    const auto at = [&]<typename T>(size_t off, T*) { return reinterpret_cast<T*>(base + off); };
    auto* tokens = at(step.tokens, static_cast<int32_t*>(nullptr));
    auto* positions = at(step.positions, static_cast<int32_t*>(nullptr));
    std::copy(batch.tokens.begin(), batch.tokens.end(), tokens);
    std::copy(batch.positions.begin(), batch.positions.end(), positions);
    std::copy(batch.logit_rows.begin(), batch.logit_rows.end(),
              at(step.logit_rows, static_cast<int32_t*>(nullptr)));
    std::copy(batch.hidden_rows.begin(), batch.hidden_rows.end(),
              at(step.hidden_rows, static_cast<int32_t*>(nullptr)));
    step.keys_per_block = keys_per_block(T);
    for (size_t g = 0; g < groups; ++g) {
      auto* slots = at(step.slots[g], static_cast<int64_t*>(nullptr));
      auto* att = at(step.attention_tokens[g], static_cast<cuda::AttentionToken*>(nullptr));
      auto* tables = at(step.tables[g], static_cast<int32_t*>(nullptr));
      const int window = cache.groups()[g].window;
      int32_t table_offset = 0;
      int max_chunks = 0;
      for (const BatchSequence& seq : batch.sequences) {
        const std::vector<int32_t>& table = (*seq.block_tables)[g];
        std::copy(table.begin(), table.end(), tables + table_offset);
        for (int64_t t = seq.token_begin; t < seq.token_end; ++t) {
          const int32_t pos = batch.positions[size_t(t)];
          const int first = window > 0 ? std::max(0, pos - window + 1) : 0;
          kv_slot(table, first, block_size, g);  // the first key the query reads has a block
          slots[t] = kv_slot(table, pos, block_size, g);
          att[t] = {pos, table_offset};
          max_chunks = std::max(max_chunks, (pos + 1 - first + step.keys_per_block - 1) /
                                                step.keys_per_block);
        }
        table_offset += static_cast<int32_t>(table.size());
      }
      if (cuda::attention_scratch_floats(T, c.n_heads, c.head_dim, max_chunks) > scratch_floats_)
        fail("{} tokens seeing {} chunks of keys are more than the attention scratch holds", T,
             max_chunks);
      step.max_chunks[g] = max_chunks;
    }
    return step;
  }

  void load_weights(const gguf::GgufFile& file, const ModelOptions& options) {
    const ModelConfig& c = config_;
    DeviceWeightLoader w(file);
    token_embd_ = w.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    output_norm_ = w.vector("output_norm.weight", c.n_embd);
    output_ = w.has("output.weight") ? w.matrix("output.weight", c.n_vocab, c.n_embd) : token_embd_;
    for (int i = 0; i < c.n_layers; ++i) {
      CudaLayer& layer = layers_.emplace_back();
      load_layer_attention(w, spec_, c, i, layer);
      load_layer_dense_ffn(w, spec_, c, i, layer);
    }
    // RoPE: the CPU's tables (model/decoder.h), so rotations agree with it to the bit.
    const int64_t max_context = options.max_context > 0 ? options.max_context : c.context_length;
    const std::string factors = rope_factor_tensor(file, spec_, c, max_context);
    std::vector<float> freq_factors;
    for (const std::string& name : rope_factor_tensors(spec_)) {
      if (!w.has(name)) continue;
      std::vector<float> f = w.host_vector(name, c.rope_dims / 2);
      if (name == factors) freq_factors = std::move(f);
    }
    w.check_all_used();
    max_positions_ = max_context;
    const RopeTables tables = make_rope_tables(c, spec_, max_context, freq_factors);
    rope_ = upload_rope(tables.full);
    if (tables.own_sliding) rope_sliding_ = upload_rope(tables.sliding);
    weight_bytes_ = w.bytes();
    weights_ = w.take_buffers();
  }

  // Batched steps (prefill, many sequences decoding) take the cuBLAS route, which without a
  // copy dequantizes every weight matrix to F16 on each step: for an 8B model 16 GB written and
  // read again per step. When F16 copies of the matrices fit in kF16CopyShare of the device's
  // memory they are made once here (vLLM's serving trade: memory for batched speed), unless
  // INFERD_CUDA_F16_WEIGHTS=0; INFERD_CUDA_F16_WEIGHTS=1 makes them whatever they take.
  static constexpr double kF16CopyShare = 0.35;
  void keep_f16_copies() {
    std::vector<DeviceMatrix*> matrices;
    for (CudaLayer& l : layers_)
      for (DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        matrices.push_back(m);
    matrices.push_back(&output_);
    size_t bytes = 0;
    for (const DeviceMatrix* m : matrices) bytes += size_t(m->rows * m->cols) * 2;
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "reading free device memory");
    const char* env = std::getenv("INFERD_CUDA_F16_WEIGHTS");
    const std::string choice = env ? env : "";
    const bool fits = double(bytes) <= kF16CopyShare * double(total) && bytes + (size_t{4} << 30) < free;
    if (choice == "0" || (choice != "1" && !fits)) return;
    for (DeviceMatrix* m : matrices) {
      DeviceBuffer& b = weights_.emplace_back(size_t(m->rows * m->cols) * 2);
      cuda::dequantize_f16(*m, 0, m->rows, b.get(), stream_);
      m->f16 = b.get<uint16_t>();
    }
    check(cudaStreamSynchronize(stream_), "making F16 copies of the weights");
    f16_copy_bytes_ = bytes;
  }

  void print_memory() const {
    std::fprintf(stderr,
                 "inferd: on the CUDA device: %.0f MiB of weights, %.0f MiB of F16 copies for "
                 "batched steps, %.0f MiB of work buffers\n",
                 double(weight_bytes_) / 1048576.0, double(f16_copy_bytes_) / 1048576.0,
                 double(arena_.bytes()) / 1048576.0);
  }

  struct DeviceRope {
    DeviceBuffer cos, sin;
  };
  static DeviceRope upload_rope(const kernels::RopeTable& table) {
    DeviceRope r{DeviceBuffer(table.cos_values().size_bytes()),
                 DeviceBuffer(table.sin_values().size_bytes())};
    check(cudaMemcpy(r.cos.get(), table.cos_values().data(), r.cos.bytes(), cudaMemcpyHostToDevice),
          "uploading RoPE");
    check(cudaMemcpy(r.sin.get(), table.sin_values().data(), r.sin.bytes(), cudaMemcpyHostToDevice),
          "uploading RoPE");
    return r;
  }

  void allocate_workspace() {
    const ModelConfig& c = config_;
    const auto T = static_cast<size_t>(max_tokens_);
    const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
    const size_t max_cols = std::max({size_t(c.n_embd), size_t(c.n_ff), q_dim});
    // The most partial results an attention call writes: the largest batch in chunks of
    // kAttentionChunk keys, or a decode-sized one in finer chunks (keys_per_block).
    const auto chunks = [&](int keys) { return int((max_positions_ + keys - 1) / keys); };
    scratch_floats_ = std::max(
        cuda::attention_scratch_floats(max_tokens_, c.n_heads, c.head_dim, chunks(cuda::kAttentionChunk)),
        cuda::attention_scratch_floats(std::min(max_tokens_, kFineSplitTokens), c.n_heads,
                                       c.head_dim, chunks(kFineSplitKeys)));
    DeviceArena& a = arena_;
    a.plan(&ws_.x, T * c.n_embd);
    a.plan(&ws_.h, T * c.n_embd);
    a.plan(&ws_.q, T * q_dim);
    a.plan(&ws_.k, T * kv_dim);
    a.plan(&ws_.v, T * kv_dim);
    a.plan(&ws_.attn, T * q_dim);
    a.plan(&ws_.proj, T * c.n_embd);
    a.plan(&ws_.gate, T * c.n_ff);
    a.plan(&ws_.up, T * c.n_ff);
    a.plan(&ws_.last, T * c.n_embd);
    a.plan(&ws_.logits, T * size_t(c.n_vocab));
    a.plan(&ws_.xq_values, T * max_cols);
    a.plan(&ws_.xq_scales, T * max_cols / 32);
    a.plan(&ws_.x_f16, T * max_cols);
    a.plan(&ws_.w_f16, size_t(kDequantSliceValues));
    a.plan(&ws_.attention_scratch, scratch_floats_);
    a.allocate();
    logits_host_ = cuda::PinnedBuffer(size_t(std::min(max_tokens_, kGemvTokens)) *
                                      size_t(c.n_vocab) * sizeof(float));
  }

  // Allocates the blocks of the engine's cache on the device, once per cache shape.
  void ensure_kv(const kv::KvCache& cache) {
    const kv::KvCacheConfig& kc = cache.config();
    if (kc.key_type != DType::F16 || kc.value_type != DType::F16)
      fail(
          "--device cuda keeps its KV cache in f16 (asked: keys {}, values {}); leave out "
          "-ctk/--cache-type-k and -ctv/--cache-type-v, or run on the CPU",
          dtype_name(kc.key_type), dtype_name(kc.value_type));
    if (kv_for_ == &cache && same_blocks(cache)) return;
    kv_layout_ = {config_.n_kv_heads, config_.head_dim, cache.block_size(), 0};
    const size_t record = size_t(config_.n_kv_heads) * size_t(cache.block_size()) * config_.head_dim;
    kv_offsets_.assign(size_t(config_.n_layers), 0);
    size_t halves = 0;
    for (int l = 0; l < config_.n_layers; ++l) {
      kv_offsets_[size_t(l)] = halves;
      halves += record * size_t(cache.groups()[size_t(cache.group_of(l))].pool.num_blocks()) * 2;
    }
    graphs_.clear();  // they address the old blocks
    kv_memory_ = DeviceBuffer(halves * 2);
    kv_for_ = &cache;
    kv_blocks_ = group_blocks(cache);
  }
  // Whether the cache's groups still have the block counts the device blocks were made for
  // (checked every step, so without allocating).
  bool same_blocks(const kv::KvCache& cache) const {
    if (cache.groups().size() != kv_blocks_.size()) return false;
    for (size_t g = 0; g < kv_blocks_.size(); ++g)
      if (cache.groups()[g].pool.num_blocks() != kv_blocks_[g]) return false;
    return true;
  }
  static std::vector<int32_t> group_blocks(const kv::KvCache& cache) {
    std::vector<int32_t> blocks;
    for (const kv::KvGroup& g : cache.groups()) blocks.push_back(g.pool.num_blocks());
    return blocks;
  }
  uint16_t* k_cache(int l) { return kv_memory_.get<uint16_t>() + kv_offsets_[size_t(l)]; }
  uint16_t* v_cache(int l) {
    // Values follow the layer's keys: the same number of halves.
    const size_t record = size_t(config_.n_kv_heads) * size_t(kv_layout_.block_size) * config_.head_dim;
    const size_t blocks = size_t(kv_for_->groups()[size_t(kv_for_->group_of(l))].pool.num_blocks());
    return k_cache(l) + record * blocks;
  }

  // An input shared by several products (q/k/v of the normed stream, gate/up), converted once.
  struct Input {
    const float* x;
    int64_t n_tokens;
    bool quantized = false;  // xq holds x (int8 route)
    bool halves = false;     // x_f16 holds x (cuBLAS route)
  };

  static bool int8_type(const DeviceMatrix& w) {
    return w.type == WeightType::Q8_0 || w.type == WeightType::Q4_K || w.type == WeightType::Q6_K;
  }

  cuda::QuantizedActivations quantized() const { return {ws_.xq_values, ws_.xq_scales}; }

  void matmul(const DeviceMatrix& w, const float* x, int64_t n, float* y) {
    Input in{x, n};
    const Target t{&w, y};
    matmul(std::span<const Target>(&t, 1), in);
  }

  struct Target {
    const DeviceMatrix* w;
    float* y;  // [n_tokens, w->rows]
  };

  // y = x w^T for each target (all of the same cols) from one input. With glu (two targets,
  // gate and up): targets[0].y = act(gate) * up, and targets[1].y is left as it was.
  void matmul(std::span<const Target> targets, Input& in, bool glu = false) {
    const int64_t n = in.n_tokens;
    if (n <= kGemvTokens) {
      const bool int8 = std::any_of(targets.begin(), targets.end(),
                                    [](const Target& t) { return int8_type(*t.w); });
      if (int8 && !in.quantized) {
        cuda::quantize_activations(in.x, n, targets[0].w->cols, quantized(), stream_);
        in.quantized = true;
      }
      cuda::GemvTarget g[cuda::kGemvMaxMatrices];
      for (size_t i = 0; i < targets.size(); ++i) g[i] = {*targets[i].w, targets[i].y, targets[i].w->rows};
      cuda::gemv_many(g, static_cast<int>(targets.size()), in.x, quantized(), n, glu,
                      spec_.activation == FfnActivation::kGeluTanh, stream_);
      return;
    }
    for (const Target& t : targets) gemm(*t.w, in, t.y);
    if (glu) {
      cuda::gated_activation(targets[0].y, targets[1].y, n * targets[0].w->rows,
                             spec_.activation == FfnActivation::kGeluTanh, stream_);
    }
  }

  // y [n_tokens, w.rows] = x w^T through cuBLAS: w dequantized to F16 a slice at a time.
  void gemm(const DeviceMatrix& w, Input& in, float* y) {
    const int64_t n = in.n_tokens;
    if (!in.halves) {
      cuda::to_f16(in.x, n * w.cols, ws_.x_f16, stream_);
      in.halves = true;
    }
    // With an F16 copy the whole matrix is one product; else slices dequantized on the way.
    const int64_t slice_rows =
        w.f16 ? w.rows : std::max<int64_t>(1, kDequantSliceValues / w.cols);
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < w.rows; r0 += slice_rows) {
      const int64_t rows = std::min(slice_rows, w.rows - r0);
      const uint16_t* slice = w.f16;
      if (slice == nullptr) {
        cuda::dequantize_f16(w, r0, rows, ws_.w_f16, stream_);
        slice = ws_.w_f16;
      }
      // Column-major view: y^T [rows, n] (ld w.rows) = W_slice [rows, cols] x^T [cols, n].
      check_cublas(
          cuda::cublas().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                 static_cast<int>(n), static_cast<int>(w.cols), &alpha, slice,
                                 CUDA_R_16F, static_cast<int>(w.cols), ws_.x_f16, CUDA_R_16F,
                                 static_cast<int>(w.cols), &beta, y + r0, CUDA_R_32F,
                                 static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "multiplying");
    }
  }

  // The sub-layer's input norm, quantized in the same launch when a decode-sized step will
  // multiply it with int8 weights.
  Input norm_input(const float* add, const float* weight, int64_t T, const DeviceMatrix& first) {
    const ModelConfig& c = config_;
    const bool fuse = T <= kGemvTokens && int8_type(first);
    cuda::add_rms_norm(ws_.x, add, weight, ws_.h, T, c.n_embd, c.rms_eps, stream_,
                       fuse ? quantized() : cuda::QuantizedActivations{});
    Input in{ws_.h, T};
    in.quantized = fuse;
    return in;
  }

  void attention_block(int l, const Step& step, int64_t T) {
    const ModelConfig& c = config_;
    const CudaLayer& layer = layers_[size_t(l)];
    const int64_t q_dim = int64_t{c.n_heads} * c.head_dim, kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
    Input in = norm_input(l > 0 ? ws_.proj : nullptr, layer.attn_norm, T, layer.wq);
    profile_.mark(SectionProfile::kNorm);
    const Target qkv[] = {{&layer.wq, ws_.q}, {&layer.wk, ws_.k}, {&layer.wv, ws_.v}};
    matmul(qkv, in);
    profile_.mark(SectionProfile::kQkv);
    if (layer.bq) cuda::add_bias(ws_.q, layer.bq, T, q_dim, stream_);
    if (layer.bk) cuda::add_bias(ws_.k, layer.bk, T, kv_dim, stream_);
    if (layer.bv) cuda::add_bias(ws_.v, layer.bv, T, kv_dim, stream_);
    if (layer.q_norm)
      cuda::add_rms_norm(ws_.q, nullptr, layer.q_norm, ws_.q, T * c.n_heads, c.head_dim, c.rms_eps,
                         stream_);
    if (layer.k_norm)
      cuda::add_rms_norm(ws_.k, nullptr, layer.k_norm, ws_.k, T * c.n_kv_heads, c.head_dim,
                         c.rms_eps, stream_);
    const size_t g = size_t(kv_for_->group_of(l));
    const DeviceRope& rope = layer.sliding && rope_sliding_.cos.bytes() > 0 ? rope_sliding_ : rope_;
    cuda::rope_store_kv(ws_.q, ws_.k, ws_.v, staged<int32_t>(step.positions),
                        staged<int64_t>(step.slots[g]), T, c.n_heads, kv_layout_, c.rope_dims,
                        spec_.rope_mode == RopeMode::kNeox, rope.cos.get<float>(),
                        rope.sin.get<float>(), k_cache(l), v_cache(l), stream_);
    profile_.mark(SectionProfile::kRope);
    const cuda::AttentionParams params{c.n_heads, spec_.attention_scale, spec_.attention_softcap,
                                       layer.sliding ? spec_.sliding_window : 0,
                                       step.keys_per_block};
    cuda::paged_attention(ws_.q, staged<cuda::AttentionToken>(step.attention_tokens[g]),
                          staged<int32_t>(step.tables[g]), T, params, kv_layout_, k_cache(l),
                          v_cache(l), step.max_chunks[g], ws_.attention_scratch, ws_.attn, stream_);
    profile_.mark(SectionProfile::kAttention);
    matmul(layer.wo, ws_.attn, T, ws_.proj);
    profile_.mark(SectionProfile::kOut);
    if (layer.bo) cuda::add_bias(ws_.proj, layer.bo, T, c.n_embd, stream_);
    if (layer.post_attn_norm)
      cuda::add_rms_norm(ws_.proj, nullptr, layer.post_attn_norm, ws_.proj, T, c.n_embd, c.rms_eps,
                         stream_);
  }

  void feed_forward_block(int l, int64_t T) {
    const ModelConfig& c = config_;
    const CudaLayer& layer = layers_[size_t(l)];
    Input in = norm_input(ws_.proj, layer.ffn_norm, T, layer.w_gate);
    profile_.mark(SectionProfile::kNorm);
    const Target gate_up[] = {{&layer.w_gate, ws_.gate}, {&layer.w_up, ws_.up}};
    matmul(gate_up, in, /*glu=*/true);  // ws_.gate = act(gate) * up
    profile_.mark(SectionProfile::kGateUp);
    matmul(layer.w_down, ws_.gate, T, ws_.proj);
    profile_.mark(SectionProfile::kDown);
    if (layer.post_ffn_norm)
      cuda::add_rms_norm(ws_.proj, nullptr, layer.post_ffn_norm, ws_.proj, T, c.n_embd, c.rms_eps,
                         stream_);
  }


  ModelConfig config_;
  ArchSpec spec_;
  int64_t max_tokens_;
  int64_t max_positions_ = 0;
  StepTimes step_times_;
  size_t scratch_floats_ = 0;  // the attention scratch (partial results of chunks of keys)
  cuda::PinnedBuffer logits_host_;  // [min(max_tokens, kGemvTokens), n_vocab]: decode steps' logits
  int multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<DeviceBuffer> weights_;
  size_t weight_bytes_ = 0;
  size_t f16_copy_bytes_ = 0;  // F16 copies of the matrices (keep_f16_copies), 0: none
  DeviceMatrix token_embd_;   // [n_vocab, n_embd]
  const float* output_norm_ = nullptr;
  DeviceMatrix output_;       // [n_vocab, n_embd]
  std::vector<CudaLayer> layers_;
  DeviceRope rope_, rope_sliding_;
  struct Workspace {
    float* x = nullptr;     // [T, n_embd] residual stream
    float* h = nullptr;     // [T, n_embd] normed input of a sub-layer
    float* q = nullptr;     // [T, n_heads * head_dim]
    float* k = nullptr;     // [T, n_kv_heads * head_dim]
    float* v = nullptr;     // [T, n_kv_heads * head_dim]
    float* attn = nullptr;  // [T, n_heads * head_dim]
    float* proj = nullptr;  // [T, n_embd] output of wo / w_down
    float* gate = nullptr;  // [T, n_ff]
    float* up = nullptr;    // [T, n_ff]
    float* last = nullptr;  // [R, n_embd] final-normed rows that need logits
    float* logits = nullptr;             // [R, n_vocab]
    int8_t* xq_values = nullptr;         // [T, max_cols]
    float2* xq_scales = nullptr;         // [T, max_cols / 32]
    uint16_t* x_f16 = nullptr;           // [T, max_cols] halves
    uint16_t* w_f16 = nullptr;           // [kDequantSliceValues] halves
    float* attention_scratch = nullptr;  // attention_scratch_floats(...)
  } ws_;
  DeviceArena arena_;
  Staging staging_;
  // The device blocks of the cache they were allocated for.
  const kv::KvCache* kv_for_ = nullptr;
  std::vector<int32_t> kv_blocks_;
  cuda::KvLayout kv_layout_;
  std::vector<size_t> kv_offsets_;  // per layer: its keys' first half in kv_memory_
  DeviceBuffer kv_memory_;
  bool use_graphs_ = true;
  SectionProfile profile_;
  std::map<GraphKey, GraphExec> graphs_;  // decode steps by shape
};

}  // namespace

std::unique_ptr<Model> make_cuda_decoder(const gguf::GgufFile& file, const ModelOptions& options,
                                         ArchSpec spec) {
  return std::make_unique<CudaDecoder>(file, options, std::move(spec));
}

}  // namespace inferd::model
