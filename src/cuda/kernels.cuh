// The CUDA executor's kernels, as host functions that launch them on a stream. Plain pointers
// to device memory only: this header is included by the host code (g++) and the .cu files
// (nvcc), and knows nothing of the engine. Every kernel has a test against the CPU's scalar
// reference in tests/cuda/ (label gpu).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace inferd::cuda {

// Weight types with a device kernel. Others are converted to F16 on the host at load.
enum class WeightType : int { F32, F16, BF16, Q8_0, Q4_K, Q6_K };

// Values per block and bytes per block of each type (GGUF's layouts, tensor/quant_blocks.h).
int block_values(WeightType type);
int block_bytes(WeightType type);

// Bytes a weight matrix's device buffer must have after its last block (the Q6_K kernel's
// aligned loads may read a few bytes past a block's end).
constexpr size_t kWeightPadding = 16;

// A weight matrix in device memory: `rows` rows of `cols` values, each row `row_bytes` of
// GGUF blocks, rows back to back.
struct DeviceMatrix {
  WeightType type = WeightType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  // The same rows dequantized to F16 ([rows, cols]), when the executor keeps such a copy for
  // its cuBLAS route; null otherwise. The matrix-vector kernels read `data`.
  const uint16_t* f16 = nullptr;
};

// Activations quantized for the int8 products: per token, cols / 32 blocks of 32 int8 values
// with a float scale and the scale times the block's sum (llama.cpp's q8_1, in a layout of
// our own: the scales apart from the values, so the values load 16 bytes at a time).
struct QuantizedActivations {
  int8_t* values = nullptr;  // [tokens, cols]
  float2* scales = nullptr;  // [tokens, cols / 32] (d, d * sum(q))
};

// The longest batch the matrix-vector kernels take in one pass (more tokens go in passes).
constexpr int kGemvMaxTokens = 8;

// out[t, :] = row tokens[t] of `table`, as floats, times `scale`.
void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t n_tokens, float scale,
                float* out, cudaStream_t stream);

// out[rows, cols] (row-major, F16) = the dequantized rows [row_begin, row_begin + rows) of w.
void dequantize_f16(const DeviceMatrix& w, int64_t row_begin, int64_t rows, void* out,
                    cudaStream_t stream);

// x [n_tokens, cols] floats -> int8 blocks of 32 (cols a multiple of 32).
void quantize_activations(const float* x, int64_t n_tokens, int64_t cols, QuantizedActivations q,
                          cudaStream_t stream);

// One matrix of a gemv launch, as the kernel reads it.
struct GemvMatrix {
  WeightType type;
  int64_t rows, cols;
  size_t row_bytes;
  const uint8_t* data;
  float* y;  // its output, row stride ldy
  int64_t ldy;
};

constexpr int kGemvMaxMatrices = 3;

// What one gemv launch computes (by value as a kernel parameter).
struct GemvParams {
  GemvMatrix m[kGemvMaxMatrices];
  int64_t first_block[kGemvMaxMatrices + 1];  // the matrices' thread blocks, one after another
  int count;
  bool glu;   // m[0] is a gate and m[1] an up projection: m[0].y = act(gate) * up
  bool gelu;  // the activation is gelu_tanh (else silu)
};

// A product of the same input with one matrix.
struct GemvTarget {
  DeviceMatrix w;
  float* y;
  int64_t ldy;
};

// y = w x for up to kGemvMaxMatrices matrices of the same cols and one input, in one launch
// per kGemvMaxTokens tokens. With glu: count 2, gate and up of the same shape, and
// targets[0].y = silu(gate x) * (up x) (gelu_tanh with `gelu`); targets[1].y is not written.
void gemv_many(const GemvTarget* targets, int count, const float* x, QuantizedActivations qx,
               int64_t n_tokens, bool glu, bool gelu, cudaStream_t stream);

// How many rows a warp computes together in a one-token matrix-vector product: 1, 2 or 4, or 0
// (the default): 2 for the int8 types (4 for a matrix of 65536 rows or more: a vocabulary), 1
// for the float types. A fused gate/up takes at least 2
// (a gate row and its up row). More rows share the loads of the activations and keep more
// weight loads in flight, at the cost of registers. For measuring the choices (tests/cuda,
// INFERD_CUDA_GEMV_ROWS); not while kernels run.
void set_gemv_rows(int rows);

// Whether kernels are launched with programmatic dependent launch (on by default: each kernel's
// launch and first weight loads overlap the previous kernel; kernels.cu). Off for comparisons
// (INFERD_CUDA_PDL=0); not while kernels run.
void set_programmatic_launch(bool on);

// The most threads add_rms_norm gives a row: 1024 (the default) or 512. For measuring; not while
// kernels run.
void set_norm_max_threads(int threads);

// y[t, r] = w[r, :] . x[t, :], kGemvMaxTokens tokens per launch. Int8 types read `qx` (from
// quantize_activations of x); float types read x. y has row stride ldy.
void gemv(const DeviceMatrix& w, const float* x, QuantizedActivations qx, int64_t n_tokens,
          float* y, int64_t ldy, cudaStream_t stream);

// out[n, cols] F16 = x[n, cols] floats.
void to_f16(const float* x, int64_t n, void* out, cudaStream_t stream);

// The longest row add_rms_norm takes.
constexpr int64_t kMaxNormRow = 8192;

// If add: x += add. Then out = rms_norm(x) * weight, per row of n <= kMaxNormRow (rows of x and
// out n apart).
// `out` may be x. With q.values, out is also quantized into q as quantize_activations would
// (n a multiple of 32): one launch instead of two before the int8 products.
void add_rms_norm(float* x, const float* add, const float* weight, float* out, int64_t rows,
                  int64_t n, float eps, cudaStream_t stream, QuantizedActivations q = {});

// out[r, :] = rms_norm(x[rows[r], :] + add[rows[r], :]) * weight: the final norm of the rows
// that need logits.
void gather_add_rms_norm(const float* x, const float* add, const int32_t* rows, int64_t n_rows,
                         const float* weight, float* out, int64_t n, float eps,
                         cudaStream_t stream);

// x[t, :] += bias, x being [n_tokens, n].
void add_bias(float* x, const float* bias, int64_t n_tokens, int64_t n, cudaStream_t stream);

// a = silu(a) * b (gelu_tanh when `gelu`), element-wise over n.
void gated_activation(float* a, const float* b, int64_t n, bool gelu, cudaStream_t stream);

// x = cap * tanh(x / cap), element-wise over n.
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);

// The layout of the paged KV cache on the device: per layer, [blocks, kv_heads, block_size,
// head_dim] F16 for keys and the same for values.
struct KvLayout {
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int64_t layer_stride = 0;  // halves between one layer's blocks and the next's
};

// Rotates the first rot_dims of every q and k head of each token by its position (cos/sin
// tables [positions, rot_dims / 2]; neox pairs (i, i + half), else (2i, 2i + 1)), then stores
// k and v at the token's slot of `k_cache`/`v_cache` (this layer's base).
void rope_store_kv(float* q, float* k, const float* v, const int32_t* positions,
                   const int64_t* slots, int64_t n_tokens, int n_heads, const KvLayout& kv,
                   int rot_dims, bool neox, const float* cos_table, const float* sin_table,
                   uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream);

// Per query token: its position, and where its sequence's block table is in `tables`.
struct AttentionToken {
  int32_t position;
  int32_t table_offset;
};

struct AttentionParams {
  int n_heads = 0;
  float scale = 0;    // scores = q.k * scale
  float softcap = 0;  // 0: none
  int window = 0;     // 0: all keys up to the query's position
  // Keys one thread block scores before its partial result is written (at most
  // kAttentionChunk): fewer when the batch has too few (token, kv head) pairs to fill the device.
  int keys_per_block = 256;
};

// The most keys one attention block scores before its partial result is written.
constexpr int kAttentionChunk = 256;

// Scratch an attention call needs: n_tokens * n_heads * max_chunks * (head_dim + 2) floats.
size_t attention_scratch_floats(int64_t n_tokens, int n_heads, int head_dim, int max_chunks);

// out[t, h * head_dim ...] = softmax(q k^T) v over the keys the token sees (positions
// <= its own, within the window), read through the block tables: split into chunks of
// params.keys_per_block keys (flash-decoding), each a thread block, then combined. max_chunks:
// the most chunks any token of the batch has (ceil(keys seen / keys_per_block)).
void paged_attention(const float* q, const AttentionToken* tokens, const int32_t* tables,
                     int64_t n_tokens, const AttentionParams& params, const KvLayout& kv,
                     const uint16_t* k_cache, const uint16_t* v_cache, int max_chunks,
                     float* scratch, float* out, cudaStream_t stream);

// ids[r] = the index of the largest value of row r of x [rows, n] (the first of ties).
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream);

// Copies block `from` to block `to` of one layer's cache (both K and V).
void copy_kv_block(uint16_t* k_cache, uint16_t* v_cache, const KvLayout& kv, int32_t from,
                   int32_t to, cudaStream_t stream);

}  // namespace inferd::cuda
