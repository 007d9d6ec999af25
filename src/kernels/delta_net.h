// Gated DeltaNet, the linear attention of Qwen3.5 / Qwen3-Next: the per-head recurrence (one
// token at a time, or 64-token chunks in the parallel "WY" form), its short causal convolution,
// and the norms around it. The recurrence kernels are per ISA (DeltaNetKernels in KernelTable).
#pragma once

#include <cstdint>

namespace inferd::kernels {

struct KernelTable;
const KernelTable& active_kernels();

// Tokens per chunk of the chunked form (the last chunk of a call may be shorter).
inline constexpr int kDeltaNetChunk = 64;

// One sequence, one value head, d = the head size of keys and values. The state S is d x d
// floats, row j = value dimension j, contiguous over the d key dimensions:
// state[j * d + i] = S[key i][value j]. For each token t, in order:
//   row_j *= exp(g[t])                      (g[t] <= 0, one decay per head and token)
//   delta_j = (v_t[j] - dot(row_j, k_t)) * beta[t]
//   row_j += delta_j * k_t
//   out_t[j] = scale * dot(row_j, q_t)      (the updated row)
// as llama.cpp's gated_delta_net (with its 1/sqrt(d) as `scale`). Token t reads q + t * qk_stride
// and k + t * qk_stride (d floats each), v + t * v_stride, g[t * gb_stride], beta[t * gb_stride],
// and writes d floats at out + t * out_stride; the state is updated in place. out overlaps no
// input. The SIMD tables take any d >= 1 (lanes past d are masked); n_tokens 0 does nothing.
// A state (and scratch) at a 64-byte boundary is faster: with d = 128 and 16-byte aligned rows,
// whose vectors then straddle cache lines, both forms took about 30% longer on an AMD EPYC.
using DeltaNetFn = void (*)(float* state, int d, int64_t n_tokens, const float* q, const float* k,
                            int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
                            const float* beta, int64_t gb_stride, float scale, float* out,
                            int64_t out_stride);
// The same with `scratch`, delta_net_chunked_scratch_floats(d) floats the caller owns.
using DeltaNetChunkedFn = void (*)(float* state, int d, int64_t n_tokens, const float* q,
                                   const float* k, int64_t qk_stride, const float* v,
                                   int64_t v_stride, const float* g, const float* beta,
                                   int64_t gb_stride, float scale, float* out, int64_t out_stride,
                                   float* scratch);

struct DeltaNetKernels {
  // Token by token: for a few rows at a time, their dots with k and q in one pass (the
  // horizontal sums together), then their update while they are still in L1. Nothing depends
  // on where a call starts: two calls give the bits of one.
  DeltaNetFn recurrent = nullptr;
  // Chunks of kDeltaNetChunk tokens: within a chunk the tokens' updates are solved together
  // (a unit lower-triangular system over the chunk, the UT transform), so the state is read and
  // written once per chunk and the work is matrix products. Equal to `recurrent` up to float
  // rounding. At d = 128 its multiply-adds per token (3 d^2 + 2 * 64 d) equal the recurrent
  // form's 4 d^2 vector operations: on the AMD EPYC here (inferd_kernels_bench, one head) the
  // two take the same time per token within about 10% from 16 tokens on, and for one token the
  // chunked form takes 5x longer (two d x d transposes).
  DeltaNetChunkedFn chunked = nullptr;
  // x[i] = x[i] / (1 + exp(-x[i])) for i < n.
  void (*silu)(float* x, int64_t n) = nullptr;
};

// Floats of scratch `chunked` needs for head size d (every table's).
int64_t delta_net_chunked_scratch_floats(int d);

// For the kernels: where `chunked` keeps its pieces in scratch, offsets in floats, each a
// multiple of 16 (c = kDeltaNetChunk): the state transposed [d][d], a chunk's keys then queries
// [2c][d], its keys transposed [d][c], their products with the state [2c][d], the updates
// [c][d], the key-key and query-key products [2c][c] and the triangular solve's inverse [c][c].
struct DeltaNetScratch {
  int64_t state_t, kq, k_t, kq_state, u, gram, inverse, total;
};
DeltaNetScratch delta_net_scratch_layout(int d);

// Causal depthwise convolution over time with SiLU, for n_tokens new rows of `channels`:
// history is [kernel - 1][channels] (the rows before x, oldest first), w is [channels][kernel]
// (channel c's taps w[c * kernel + i], i = 0 the oldest), and with window = the history rows then
// the x rows (token t at x + t * x_stride),
//   out_t[c] = silu(sum_{i < kernel} w[c * kernel + i] * window[t + i][c])
// at out + t * out_stride. Afterwards history holds the last kernel - 1 rows of the window (any
// n_tokens >= 0, fewer than kernel - 1 too). out overlaps neither x nor history. 1 <= kernel <=
// kMaxConvTaps (an inferd::Error otherwise).
inline constexpr int kMaxConvTaps = 16;
void causal_conv1d_silu(float* history, int kernel, int64_t channels, const float* x,
                        int64_t x_stride, int64_t n_tokens, const float* w, float* out,
                        int64_t out_stride, const KernelTable& table = active_kernels());

// Each of n_rows rows of d floats (row r at x + r * stride) becomes x / sqrt(sum(x^2) + eps)
// (llama.cpp's rms_norm with eps / d, then times 1 / sqrt(d): the same). Squares summed in double.
void l2_norm_rows(float* x, int64_t n_rows, int d, int64_t stride, float eps);

// One head of d values: x = x / sqrt(mean(x^2) + eps) * w * silu(z).
void gated_rms_norm(float* x, const float* z, const float* w, int d, float eps,
                    const KernelTable& table = active_kernels());

}  // namespace inferd::kernels
