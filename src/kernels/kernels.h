// KernelTable: the function pointers every compute path goes through, one table per ISA,
// chosen once at start-up from cpuid (INFERD_ISA=ref|avx2|avx512|amx forces one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/delta_net.h"
#include "kernels/iq_tiles.h"
#include "kernels/packed.h"
#include "tensor/dtype.h"

namespace inferd::kernels {

// Converts one row of n floats into an activation format (Q8_0, Q8_1, F16, BF16, F32).
using QuantizeRowFn = void (*)(const float* x, void* out, int64_t n);
// Dot product of one weight row (its own format) with one activation row (its paired format).
using DotFn = float (*)(int64_t n, const void* weight_row, const void* activation_row);
// Expands one weight row to floats.
using DequantizeRowFn = void (*)(const void* row, float* out, int64_t n);

// How one weight type is multiplied: activations are first converted to `activation_type`.
struct WeightKernels {
  DType activation_type = DType::F32;
  QuantizeRowFn quantize_activation = nullptr;
  DotFn dot = nullptr;
  DequantizeRowFn dequantize = nullptr;
};

// Attention primitives over one KV block (kernels/attention.cpp drives them). Keys are stored
// transposed, [head_dim, block_size], so scores of one query for a whole block are one vector
// of fused multiply-adds per dimension; values are [n_keys, head_dim].
struct AttentionKernels {
  // s[r * s_stride + j] = q[r, :] . k[:, j] for n_rows queries [n_rows, head_dim] and all
  // block_size keys.
  void (*scores)(const uint16_t* keys_t, int block_size, int head_dim, const float* q, int n_rows,
                 float* s, int s_stride) = nullptr;
  // acc[r, :] += sum_j p[r * p_stride + j] * v[j, :] over the first n_keys values.
  void (*accumulate)(const uint16_t* values, int n_keys, int head_dim, const float* p, int p_stride,
                     int n_rows, float* acc) = nullptr;
  // x[i] = exp(x[i] - max) for i < n (an x of -inf gives 0); returns the sum.
  float (*exp_sum)(float* x, int n, float max) = nullptr;
  // x[i] *= scale for i < n; returns the largest of `max` and the scaled values.
  float (*scale_max)(float* x, int n, float scale, float max) = nullptr;
  // x[i] = the nearest fp16 value (ties to even, overflow to inf), as a float, for i < n:
  // queries are rounded like the keys they meet.
  void (*round_to_fp16)(float* x, int n) = nullptr;
  // `scores` for Q8_0 keys (kv/kv_cache.h): int8 keys_t [head_dim, block_size] and a scale per
  // 32 dimensions of each key, scales [head_dim / 32, block_size].
  void (*scores_q8)(const int8_t* keys_t, const float* scales, int block_size, int head_dim,
                    const float* q, int n_rows, float* s, int s_stride) = nullptr;
  // `accumulate` for Q8_0 values: int8 values [n_keys, head_dim], scales [n_keys, head_dim / 32].
  void (*accumulate_q8)(const int8_t* values, const float* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, int n_rows, float* acc) = nullptr;
  // `scores` for Q4_0 keys (kv/kv_cache.h): nibbles of two dimensions per byte, keys_t
  // [head_dim / 2, block_size] (dimension 2i in the low nibble of row i, 2i + 1 in the high), each
  // standing for d * (nibble - 8), and the fp16 d per 32 dimensions of each key, scales
  // [head_dim / 32, block_size].
  void (*scores_q4)(const uint8_t* keys_t, const uint16_t* scales, int block_size, int head_dim,
                    const float* q, int n_rows, float* s, int s_stride) = nullptr;
  // `accumulate` for Q4_0 values: per value, each 32 dimensions as the 16 bytes of a Q4_0 block
  // (dimension i in the low nibble of byte i, i + 16 in the high), values [n_keys, head_dim / 2],
  // and their fp16 d, scales [n_keys, head_dim / 32].
  void (*accumulate_q4)(const uint8_t* values, const uint16_t* scales, int n_keys, int head_dim,
                        const float* p, int p_stride, int n_rows, float* acc) = nullptr;
  // `accumulate` over the values of several blocks, in key order: blocks[i] holds values
  // i * block_size on ([block_size, head_dim]), the last block possibly part full (n_keys in
  // all); p[r * p_stride + j] weighs value j of them all. The same bits as `accumulate` called
  // block by block. The AVX-512 kernel keeps each row's accumulators in registers across the
  // blocks: loading and storing them per block of 16 keys cost about a quarter of its time.
  void (*accumulate_blocks)(const uint16_t* const* blocks, int block_size, int n_keys, int head_dim,
                            const float* p, int p_stride, int n_rows, float* acc) = nullptr;
};

// The packed path (kernels/packed.h): activations become ActQ8 blocks once per row, then one
// call multiplies a 16-row group by every token. The blocks lie in panels of act_stride tokens
// (packed.h, act_block_index): within a panel block b of token t is act[b * act_stride + t], so
// the tokens of one block lie side by side (AMX loads 16 of them with one stride, and their
// scales sit at fixed offsets). A table's act_panel_tokens sets the panel; with 0 there is one
// panel, and `act` stays readable for kActPaddingTokens tokens past the last one (their results
// are not written).
// QuantizeActFn converts one token's row of n floats: its block b goes to out[b * out_stride].
using QuantizeActFn = void (*)(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride);
using GroupGemmFn = void (*)(const uint8_t* group, int64_t blocks, const ActQ8Block* act,
                             int64_t act_stride, int64_t n_tokens, float* y, int64_t y_stride);
// F16 groups multiply the float activations as they are.
using GroupGemmF32Fn = void (*)(const uint8_t* group, int64_t blocks, const float* x,
                                int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
// The bf16 route, for the rows a caller marks (the tokens of long prompts, model/batch.h): the
// float activations rounded once to bf16 and each group's weights dequantized to bf16. The
// activations are tiled as bf16_tile_offset (packed.h) says, x_stride = cols, with
// kActPaddingTokens tokens of padding. A call covers `n_groups` (1 or 2) adjacent groups: the
// second's blocks follow the first's, its 16 rows go to y + 16.
using GroupGemmBf16Fn = void (*)(const uint8_t* group, int64_t n_groups, int64_t blocks,
                                 const uint16_t* x, int64_t x_stride, int64_t n_tokens, float* y,
                                 int64_t y_stride);
struct PackedKernels {
  QuantizeActFn quantize_act = nullptr;  // one scale per 32 values (Q8_0-like)
  GroupGemmFn q4_0 = nullptr;
  GroupGemmFn q4_1 = nullptr;
  GroupGemmFn q8_0 = nullptr;
  GroupGemmF32Fn f16 = nullptr;
  // Q4_K super-blocks (PackedQ4KBlock): `blocks` counts super-blocks; the activations are the
  // same 32-wide blocks, 8 per super-block, from quantize_act_k: the SIMD tiles apply the first
  // block's d to the whole super-block (the reference reads each block's).
  GroupGemmFn q4_k = nullptr;
  GroupGemmFn q5_k = nullptr;    // PackedQ5KBlock, as q4_k
  GroupGemmFn q6_k = nullptr;    // PackedQ6KBlock, as q4_k
  GroupGemmFn iq4_xs = nullptr;  // PackedIQ4XSBlock, as q4_k
  GroupGemmFn q3_k = nullptr;    // PackedQ3KBlock, as q4_k
  GroupGemmFn q2_k = nullptr;    // PackedQ2KBlock, as q4_k
  // One scale per 256 values (Q8_K), for the layouts of uses_q8k_activations; n a multiple of
  // 256. The 8 blocks of each 256 values share d.
  QuantizeActFn quantize_act_k = nullptr;
  // PackedQ5_1Block: Q4_1's arithmetic (the offset m times the activation's s) on 5-bit q.
  GroupGemmFn q5_1 = nullptr;
  // PackedMXFP4Block: table values of the nibbles times 32-wide activations (quantize_act, as
  // llama.cpp pairs MXFP4 with Q8_0), each block's sum scaled by the row's E8M0 scale times d.
  GroupGemmFn mxfp4 = nullptr;
  // Whether the rows a matmul's caller marks for it (model/batch.h) take the bf16 route; the
  // reference table has the route's kernels but leaves it off (tests turn it on in a copy).
  bool bf16_route = false;
  // bf16_act converts the activations of those rows.
  QuantizeRowFn bf16_act = nullptr;
  GroupGemmBf16Fn q4_bf16 = nullptr;  // Q4_0 and Q4_1 (packed alike)
  GroupGemmBf16Fn q8_0_bf16 = nullptr;
  // The 256-column layouts (`blocks` counts super-blocks), dequantized 32 columns at a time.
  GroupGemmBf16Fn q4_k_bf16 = nullptr;
  GroupGemmBf16Fn q5_k_bf16 = nullptr;
  GroupGemmBf16Fn q6_k_bf16 = nullptr;
  GroupGemmBf16Fn iq4_xs_bf16 = nullptr;
  GroupGemmBf16Fn q3_k_bf16 = nullptr;
  GroupGemmBf16Fn q2_k_bf16 = nullptr;
  // Tokens per activation panel: a multiple of every tile's token count, so that a tile reads
  // its activations in short runs close together rather than 512 bytes every 32 KiB (one
  // block-major panel of 512 tokens). On the AMD EPYC (Zen 4), `inferd bench -p 512` of the
  // 1B-shaped files, alternating runs: AVX-512 with panels of 8, Q6_K 218-236 -> 257-276 tok/s,
  // IQ4_XS +8%, Q5_K_M +6%, Q4_K_M and Q8_0 within noise; AVX2 with panels of 24, Q6_K and
  // Q4_K_M +4-10%. 0: one panel for all the tokens, with padding (AMX and the reference).
  int act_panel_tokens = 0;
};

struct KernelTable {
  std::string_view isa;
  WeightKernels q4_0, q4_1, q8_0, f16, bf16, f32;
  // The formats of downloaded files: Q5_0/IQ4_NL/MXFP4 take Q8_0 activations, Q5_1 Q8_1, the
  // 256-wide k-quants and IQ4_XS Q8_K.
  WeightKernels q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, mxfp4;
  // The i-quants of 1-3 bits (codebook points, tensor/iq_grids.h), with Q8_K activations: row
  // dots for a token or a few, and for prompts `iq_tile` on blocks decoded once
  // (kernels/iq_tiles.h).
  WeightKernels iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m;
  IqTileFn iq_tile = nullptr;
  AttentionKernels attention;
  // a[i] = silu(a[i]) * b[i] (SwiGLU's gate times up).
  void (*silu_mul)(float* a, const float* b, int64_t n) = nullptr;
  // LoRA's up projection for n rows: y[t][o] += sum_j low[t * rank + j] * bt[j * ldb + o] for o
  // < out, low [n, rank] (the rows' A x), bt B by column (row j of `ldb` values: a slice of
  // B's outputs when ldb > out), y[t] a row of `out` values. Each value is summed over j in
  // order with fused multiply-adds, so it does not depend on n, the other rows or the slice.
  void (*lora_up)(int64_t n, int64_t rank, int64_t out, int64_t ldb, const float* low,
                  const float* bt, float* const* y) = nullptr;
  // a[i] = gelu_tanh(a[i]) * b[i] (GeGLU's gate times up: Gemma). 0.5 (1 + tanh(u)) is
  // sigmoid(2u), so every table computes a / (1 + exp(-2u)), u = sqrt(2/pi) (a + 0.044715 a^3):
  // the same function as the tanh form, without its cancellation for negative a.
  void (*gelu_mul)(float* a, const float* b, int64_t n) = nullptr;
  // gpt-oss's expert activation: x = min(g[i], limit), y = clamp(u[i], -limit, limit),
  // g[i] = x / (1 + exp(-alpha x)) * (y + 1). NaN stays NaN.
  void (*swiglu_oai)(float* g, const float* u, int64_t n, float alpha, float limit) = nullptr;
  // x[i] = cap * tanh(x[i] * in_scale): Gemma's soft-capping of attention scores and logits.
  // NaN stays NaN.
  void (*softcap)(float* x, int64_t n, float in_scale, float cap) = nullptr;
  // The index of the largest of x[0..n), n >= 1; the first one where several are equal (NaN
  // values are not expected: logits).
  int64_t (*argmax)(const float* x, int64_t n) = nullptr;
  // Constrained decoding: x[i] = -inf for every i < n whose bit in `allowed` is clear (bit i % 32
  // of word i / 32); other values are left as they are.
  void (*mask_logits)(const uint32_t* allowed, float* x, int64_t n) = nullptr;
  // Streams [p, p + bytes) through the ISA's widest loads and returns the sum of its 64-bit words
  // (kernels/read_stream.h): the inner loop of the memory-bandwidth probe.
  uint64_t (*read_stream)(const uint8_t* p, size_t bytes) = nullptr;
  PackedKernels packed;
  // Gated DeltaNet's recurrence (kernels/delta_net.h).
  DeltaNetKernels delta_net;

  // Kernels for a weight type; nullptr when the type has no matmul support yet.
  const WeightKernels* for_weight(DType type) const;
};

// The reference table: plain scalar C++, the definition of correct for every other ISA.
const KernelTable& reference_kernels();
// Every table this CPU can run, reference first.
std::vector<const KernelTable*> available_kernels();
// The table in use: the best available, or the one INFERD_ISA names (an unknown or
// unsupported name is an inferd::Error listing the choices).
const KernelTable& active_kernels();

}  // namespace inferd::kernels
