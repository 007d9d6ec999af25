// The CUDA executor's kernels (kernels.cuh). Weight blocks are read in GGUF's own layouts
// (tensor/quant_blocks.h): Q4_K's 144-byte blocks, Q6_K's 210, Q8_0's 34. Every kernel works in
// units of 32 values, the activation quantization block: a Q4_K or Q6_K super-block is 8 units.
#include "cuda/kernels.cuh"

#include <cuda_fp16.h>

#include <cfloat>
#include <type_traits>

namespace inferd::cuda {
namespace {

constexpr int kUnit = 32;  // values per unit (and per activation block)

__device__ __forceinline__ float half_bits_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
// Four bytes at an address that is only 2-byte aligned (Q6_K and Q8_0 blocks).
__device__ __forceinline__ int load_i32_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes.
__device__ __forceinline__ void q4k_scale_min(const uint8_t* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// The 32 values of unit u of a row, as floats.
template <WeightType kType>
__device__ void decode_unit(const uint8_t* row, int64_t u, float* out) {
  if constexpr (kType == WeightType::F32) {
    const float* p = reinterpret_cast<const float*>(row) + u * kUnit;
    for (int i = 0; i < kUnit; ++i) out[i] = p[i];
  } else if constexpr (kType == WeightType::F16 || kType == WeightType::BF16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + u * kUnit;
    for (int i = 0; i < kUnit; ++i)
      out[i] = kType == WeightType::F16 ? half_bits_to_float(p[i]) : bf16_bits_to_float(p[i]);
  } else if constexpr (kType == WeightType::Q8_0) {
    const uint8_t* b = row + u * 34;
    const float d = half_bits_to_float(load_u16(b));
    for (int i = 0; i < kUnit; ++i) out[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
  } else if constexpr (kType == WeightType::Q4_K) {
    const uint8_t* b = row + (u / 8) * 144;
    const int s = static_cast<int>(u % 8);
    const float d = half_bits_to_float(load_u16(b)), dmin = half_bits_to_float(load_u16(b + 2));
    int sc, m;
    q4k_scale_min(b + 4, s, sc, m);
    const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(m);
    const uint8_t* qs = b + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int i = 0; i < kUnit; ++i) out[i] = scale * static_cast<float>((qs[i] >> shift) & 0xF) - min;
  } else {  // Q6_K
    const uint8_t* b = row + (u / 8) * 210;
    const int s = static_cast<int>(u % 8), h = s / 4, k = s % 4;
    const uint8_t* ql = b + 64 * h + 32 * (k & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * k;
    const float d = half_bits_to_float(load_u16(b + 208));
    const int nshift = 4 * (k >> 1), hshift = 2 * k;
    for (int i = 0; i < kUnit; ++i) {
      const int q = (((ql[i] >> nshift) & 0xF) | (((qh[i] >> hshift) & 3) << 4)) - 32;
      out[i] = d * static_cast<float>(sc[i / 16]) * static_cast<float>(q);
    }
  }
}

template <WeightType kType>
__global__ void embed_rows_kernel(const uint8_t* table, size_t row_bytes, int64_t cols,
                                  const int32_t* tokens, float scale, float* out) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + static_cast<size_t>(tokens[t]) * row_bytes;
  float values[kUnit];
  for (int64_t u = threadIdx.x; u < cols / kUnit; u += blockDim.x) {
    decode_unit<kType>(row, u, values);
    for (int i = 0; i < kUnit; ++i) out[t * cols + u * kUnit + i] = values[i] * scale;
  }
}

template <WeightType kType>
__global__ void dequantize_f16_kernel(const uint8_t* data, size_t row_bytes, int64_t cols,
                                      int64_t row_begin, int64_t units, __half* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= units) return;
  const int64_t units_per_row = cols / kUnit;
  const int64_t r = i / units_per_row, u = i % units_per_row;
  float values[kUnit];
  decode_unit<kType>(data + static_cast<size_t>(row_begin + r) * row_bytes, u, values);
  __align__(16) __half h[kUnit];
  for (int j = 0; j < kUnit; ++j) h[j] = __float2half_rn(values[j]);
  uint4* dst = reinterpret_cast<uint4*>(out + r * cols + u * kUnit);
  const uint4* src = reinterpret_cast<const uint4*>(h);
  for (int j = 0; j < kUnit * 2 / 16; ++j) dst[j] = src[j];
}

// One warp per 32-value block: amax, d = amax / 127, q = round(x / d), and d * sum(q).
__global__ void quantize_kernel(const float* x, int64_t blocks, int8_t* values, float2* scales) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (b >= blocks) return;
  const int lane = threadIdx.x % 32;
  const float v = x[b * kUnit + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
  values[b * kUnit + lane] = static_cast<int8_t>(q);
  const float sum = warp_sum(static_cast<float>(q));
  if (lane == 0) scales[b] = make_float2(d, d * sum);
}

// Q8_0's int8 dot of weight block u with activation block u: its contribution to the row's dot.
__device__ __forceinline__ float q8_0_block_dot(const uint8_t* row, int64_t u, const int* xq,
                                                float2 xs) {
  const uint8_t* b = row + u * 34;
  int dot = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) dot = __dp4a(load_i32_a2(b + 2 + 4 * i), xq[i], dot);
  return half_bits_to_float(load_u16(b)) * xs.x * static_cast<float>(dot);
}

constexpr int kGemvWarps = 4;  // rows per thread block, a warp each
// Blocks an SM must hold at once in a one-token product: caps registers at 64 a thread (the
// type switch and the two pieces in flight would take ~80, leaving 40% of the warps an SM could
// keep waiting on memory). Products of more tokens get 128 (fewer would spill).
constexpr int kGemvMinBlocks = 8;

// A Q8_0 row times kTokens activations: each lane takes every `lanes`-th block of the row, two
// blocks at a time so that both blocks' loads are in flight together.
template <int kTokens>
__device__ __forceinline__ void row_dot_q8_0(const uint8_t* wr, int64_t cols, const int8_t* xq,
                                             const float2* xs, int lane, int lanes,
                                             float (&acc)[kTokens]) {
  const int64_t units = cols / kUnit;
  const auto unit = [&](int64_t u) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const int4* xv = reinterpret_cast<const int4*>(xq + t * cols + u * kUnit);
      const int4 a = xv[0], b = xv[1];
      const int x8[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      acc[t] += q8_0_block_dot(wr, u, x8, xs[t * units + u]);
    }
  };
  int64_t u = lane;
  for (; u + lanes < units; u += 2 * lanes) {
    unit(u);
    unit(u + lanes);
  }
  if (u < units) unit(u);
}

template <WeightType kType, int kTokens>
__device__ __forceinline__ void row_dot_float(const uint8_t* wr, int64_t cols, const float* x,
                                              int lane, int lanes, float (&acc)[kTokens]) {
  // Each lane takes 8 consecutive values (16 bytes of F16/BF16) at a time.
  for (int64_t c = lane * 8; c < cols; c += lanes * 8) {
    float wv[8];
    if constexpr (kType == WeightType::F32) {
      const float4* p = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(wr) + c);
      const float4 a = p[0], b = p[1];
      wv[0] = a.x, wv[1] = a.y, wv[2] = a.z, wv[3] = a.w;
      wv[4] = b.x, wv[5] = b.y, wv[6] = b.z, wv[7] = b.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(wr) + c);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const auto lo = static_cast<uint16_t>(words[i] & 0xFFFF);
        const auto hi = static_cast<uint16_t>(words[i] >> 16);
        wv[2 * i] = kType == WeightType::F16 ? half_bits_to_float(lo) : bf16_bits_to_float(lo);
        wv[2 * i + 1] = kType == WeightType::F16 ? half_bits_to_float(hi) : bf16_bits_to_float(hi);
      }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float4* xv = reinterpret_cast<const float4*>(x + t * cols + c);
      const float4 a = xv[0], b = xv[1];
      acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x +
                wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
    }
  }
}

// This thread's share (lane `lane` of `lanes` on the row) of row `row` times the tokens, summed
// over its warp (the caller sums the warps of a row).
// N consecutive 4-byte words at p, which is only 2-byte aligned (Q6_K's 210-byte blocks): N + 1
// aligned loads, each pair joined by a funnel shift.
template <int N>
__device__ __forceinline__ void load_words_a2(const uint8_t* p, int (&out)[N]) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const unsigned*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
  unsigned words[N + 1];
#pragma unroll
  for (int i = 0; i <= N; ++i) words[i] = shift == 0 && i == N ? 0u : w[i];
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = static_cast<int>(__funnelshift_r(words[i], words[i + 1], shift));
}

// The 8 int8 words of activation block b of token t, and its scales.
__device__ __forceinline__ void load_x_block(const int8_t* xq, int64_t b, int (&x8)[8]) {
  const int4* xv = reinterpret_cast<const int4*>(xq + b * kUnit);
  const int4 a = xv[0], c = xv[1];
  x8[0] = a.x, x8[1] = a.y, x8[2] = a.z, x8[3] = a.w;
  x8[4] = c.x, x8[5] = c.y, x8[6] = c.z, x8[7] = c.w;
}

// Byte j (0..11) of Q4_K's scales, held in the words y, z, w of the block's first 16 bytes
// (selects, not an indexed array, so that nothing goes to local memory).
__device__ __forceinline__ int q4k_scale_byte(const int4& head, int j) {
  const unsigned w = static_cast<unsigned>(j < 4 ? head.y : (j < 8 ? head.z : head.w));
  return static_cast<int>((w >> (8 * (j & 3))) & 0xFF);
}

__device__ __forceinline__ void q4k_scale_min_words(const int4& head, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q4k_scale_byte(head, j) & 63;
    m = q4k_scale_byte(head, j + 4) & 63;
  } else {
    sc = (q4k_scale_byte(head, j + 4) & 0xF) | ((q4k_scale_byte(head, j - 4) >> 6) << 4);
    m = (q4k_scale_byte(head, j + 4) >> 4) | ((q4k_scale_byte(head, j) >> 6) << 4);
  }
}

// Q4_K, a pair of sub-blocks (64 values: both nibbles of 32 bytes of qs) a lane at a time: the
// block's header (d, dmin, 12 scale bytes: 16 bytes) and the pair's qs in three 16-byte loads.
struct Q4kPair {
  int4 head, q0, q1;
};

__device__ __forceinline__ Q4kPair load_q4k_pair(const uint8_t* wr, int64_t pr) {
  const uint8_t* b = wr + (pr / 4) * 144;
  const int4* qv = reinterpret_cast<const int4*>(b + 16 + 32 * (pr % 4));
  return {*reinterpret_cast<const int4*>(b), qv[0], qv[1]};
}

template <int kTokens>
__device__ __forceinline__ void q4k_pair_dot(const Q4kPair& w, int64_t pr, int64_t cols,
                                             const int8_t* xq, const float2* xs,
                                             float (&acc)[kTokens]) {
  const int64_t units = cols / kUnit;
  const int pair = static_cast<int>(pr % 4);
  const int qs[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
  const float d = half_bits_to_float(static_cast<uint16_t>(w.head.x & 0xFFFF));
  const float dmin = half_bits_to_float(static_cast<uint16_t>(static_cast<unsigned>(w.head.x) >> 16));
  int sc0, m0, sc1, m1;
  q4k_scale_min_words(w.head, 2 * pair, sc0, m0);
  q4k_scale_min_words(w.head, 2 * pair + 1, sc1, m1);
  const int64_t u0 = pr * 2;  // the activation blocks of the two sub-blocks
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    int x0[8], x1[8];
    load_x_block(xq + t * cols, u0, x0);
    load_x_block(xq + t * cols, u0 + 1, x1);
    int dot0 = 0, dot1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      dot0 = __dp4a(qs[i] & 0x0F0F0F0F, x0[i], dot0);
      dot1 = __dp4a((qs[i] >> 4) & 0x0F0F0F0F, x1[i], dot1);
    }
    const float2 s0 = xs[t * units + u0], s1 = xs[t * units + u0 + 1];
    acc[t] += d * (static_cast<float>(sc0) * s0.x * static_cast<float>(dot0) +
                   static_cast<float>(sc1) * s1.x * static_cast<float>(dot1)) -
              dmin * (static_cast<float>(m0) * s0.y + static_cast<float>(m1) * s1.y);
  }
}

// Two pairs an iteration, both loaded before either is used: two rows' worth of loads in flight.
template <int kTokens>
__device__ __forceinline__ void row_dot_q4k(const uint8_t* wr, int64_t cols, const int8_t* xq,
                                            const float2* xs, int lane, int lanes,
                                            float (&acc)[kTokens]) {
  const int64_t pairs = cols / 64;
  int64_t pr = lane;
  for (; pr + lanes < pairs; pr += 2 * lanes) {
    const Q4kPair a = load_q4k_pair(wr, pr), b = load_q4k_pair(wr, pr + lanes);
    q4k_pair_dot<kTokens>(a, pr, cols, xq, xs, acc);
    q4k_pair_dot<kTokens>(b, pr + lanes, cols, xq, xs, acc);
  }
  if (pr < pairs) q4k_pair_dot<kTokens>(load_q4k_pair(wr, pr), pr, cols, xq, xs, acc);
}

// Q6_K, a half super-block (128 values: 64 bytes of ql, 32 of qh, 8 scales) a lane at a time:
// its four sub-blocks of 32 share those bytes (other nibbles, other bit pairs of qh).
struct Q6kHalf {
  int ql[16], qh[8], sc[2];
  uint16_t d;
};

__device__ __forceinline__ Q6kHalf load_q6k_half(const uint8_t* wr, int64_t hv) {
  const uint8_t* b = wr + (hv / 2) * 210;
  const int h = static_cast<int>(hv % 2);
  Q6kHalf w;
  load_words_a2(b + 64 * h, w.ql);
  load_words_a2(b + 128 + 32 * h, w.qh);
  load_words_a2(b + 192 + 8 * h, w.sc);
  w.d = load_u16(b + 208);
  return w;
}

template <int kTokens>
__device__ __forceinline__ void q6k_half_dot(const Q6kHalf& w, int64_t hv, int64_t cols,
                                             const int8_t* xq, const float2* xs,
                                             float (&acc)[kTokens]) {
  const int64_t units = cols / kUnit;
  // Scale j of the half: byte j % 4 of word j / 4, as int8.
  const auto sc = [&](int j) {
    return static_cast<float>(static_cast<int8_t>(w.sc[j / 4] >> (8 * (j % 4))));
  };
  const float d = half_bits_to_float(w.d);
  const int64_t u0 = hv * 4;
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    float sum = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int x8[8];
      load_x_block(xq + t * cols, u0 + k, x8);
      int dot[2] = {0, 0};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int lo = (w.ql[(k & 1) * 8 + i] >> (4 * (k >> 1))) & 0x0F0F0F0F;
        const int hi = ((w.qh[i] >> (2 * k)) & 0x03030303) << 4;
        // q in [0, 63] is a positive signed byte: sum (q - 32) x = sum q x - 32 sum x, with no
        // per-byte subtraction.
        dot[i / 4] = __dp4a(lo | hi, x8[i], dot[i / 4]);
      }
      int xsum[2] = {0, 0};  // sum x over each 16 values (a scale's share)
#pragma unroll
      for (int i = 0; i < 8; ++i) xsum[i / 4] = __dp4a(0x01010101, x8[i], xsum[i / 4]);
      sum += xs[t * units + u0 + k].x *
             (sc(2 * k) * static_cast<float>(dot[0] - 32 * xsum[0]) +
              sc(2 * k + 1) * static_cast<float>(dot[1] - 32 * xsum[1]));
    }
    acc[t] += d * sum;
  }
}

template <int kTokens>
__device__ __forceinline__ void row_dot_q6k(const uint8_t* wr, int64_t cols, const int8_t* xq,
                                            const float2* xs, int lane, int lanes,
                                            float (&acc)[kTokens]) {
  const int64_t halves = cols / 128;
  int64_t hv = lane;
  for (; hv + lanes < halves; hv += 2 * lanes) {
    const Q6kHalf a = load_q6k_half(wr, hv), b = load_q6k_half(wr, hv + lanes);
    q6k_half_dot<kTokens>(a, hv, cols, xq, xs, acc);
    q6k_half_dot<kTokens>(b, hv + lanes, cols, xq, xs, acc);
  }
  if (hv < halves) q6k_half_dot<kTokens>(load_q6k_half(wr, hv), hv, cols, xq, xs, acc);
}

template <int kTokens>
__device__ __forceinline__ void row_dot(const GemvMatrix& m, int64_t row, const float* x,
                                        const int8_t* xq, const float2* xs, int lane, int lanes,
                                        float (&acc)[kTokens]) {
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = 0.0f;
  const uint8_t* wr = m.data + static_cast<size_t>(row) * m.row_bytes;
  switch (m.type) {
    case WeightType::F32: row_dot_float<WeightType::F32, kTokens>(wr, m.cols, x, lane, lanes, acc); break;
    case WeightType::F16: row_dot_float<WeightType::F16, kTokens>(wr, m.cols, x, lane, lanes, acc); break;
    case WeightType::BF16: row_dot_float<WeightType::BF16, kTokens>(wr, m.cols, x, lane, lanes, acc); break;
    case WeightType::Q8_0: row_dot_q8_0<kTokens>(wr, m.cols, xq, xs, lane, lanes, acc); break;
    case WeightType::Q4_K: row_dot_q4k<kTokens>(wr, m.cols, xq, xs, lane, lanes, acc); break;
    case WeightType::Q6_K: row_dot_q6k<kTokens>(wr, m.cols, xq, xs, lane, lanes, acc); break;
  }
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = warp_sum(acc[t]);
}

__device__ __forceinline__ float gated(float g, float u, bool gelu) {
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * u;
  }
  return g / (1.0f + expf(-g)) * u;
}

// One launch for every matrix of `p` (their blocks of rows one after another); with p.glu, one
// row's threads compute row r of matrix 0 (gate) and of matrix 1 (up) and write act(gate) * up.
// kSplit warps share a row (1: a warp a row, kGemvWarps rows a block; kGemvWarps: the whole
// block on one row, summed through shared memory): more loads in flight per row.
template <int kTokens, int kSplit>
__global__ void __launch_bounds__(kGemvWarps * 32, kTokens == 1 ? kGemvMinBlocks : 4)
    gemv_kernel(const __grid_constant__ GemvParams p, const float* x, const int8_t* xq,
                const float2* xs) {
  constexpr int kRowsPerBlock = kGemvWarps / kSplit;
  int k = 0;
  while (k + 1 < p.count && blockIdx.x >= p.first_block[k + 1]) ++k;
  const int warp = threadIdx.x / 32;
  const int64_t row =
      (blockIdx.x - p.first_block[k]) * static_cast<int64_t>(kRowsPerBlock) + warp / kSplit;
  const GemvMatrix& m = p.m[k];
  const bool active = row < m.rows;
  const int lane = (warp % kSplit) * 32 + static_cast<int>(threadIdx.x % 32);
  float acc[kTokens], up[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = up[t] = 0.0f;
  if (active) {
    row_dot<kTokens>(m, row, x, xq, xs, lane, kSplit * 32, acc);
    if (p.glu) row_dot<kTokens>(p.m[1], row, x, xq, xs, lane, kSplit * 32, up);
  }
  if constexpr (kSplit > 1) {  // the row's warps' sums, added by its first warp
    __shared__ float acc_s[kGemvWarps][kTokens], up_s[kGemvWarps][kTokens];
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) acc_s[warp][t] = acc[t], up_s[warp][t] = up[t];
    }
    __syncthreads();
    if (warp % kSplit != 0) return;
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float a = 0, u = 0;
      for (int w = 0; w < kSplit; ++w) a += acc_s[warp + w][t], u += up_s[warp + w][t];
      acc[t] = a;
      up[t] = u;
    }
  }
  if (!active || threadIdx.x % 32 != 0) return;
#pragma unroll
  for (int t = 0; t < kTokens; ++t)
    m.y[t * m.ldy + row] = p.glu ? gated(acc[t], up[t], p.gelu) : acc[t];
}

template <int kSplit>
void launch_gemv_split(const GemvParams& p, int64_t n, const float* x, const int8_t* xq,
                       const float2* xs, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(p.first_block[p.count]);
  constexpr int kThreads = kGemvWarps * 32;
  switch (n) {
    case 1: gemv_kernel<1, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 2: gemv_kernel<2, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 3: gemv_kernel<3, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 4: gemv_kernel<4, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 5: gemv_kernel<5, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 6: gemv_kernel<6, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    case 7: gemv_kernel<7, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
    default: gemv_kernel<8, kSplit><<<blocks, kThreads, 0, stream>>>(p, x, xq, xs); break;
  }
}

int g_gemv_split = 1;  // set_gemv_split()

void launch_gemv(const GemvParams& p, int64_t n, const float* x, const int8_t* xq,
                 const float2* xs, cudaStream_t stream) {
  if (g_gemv_split == 1) {
    launch_gemv_split<1>(p, n, x, xq, xs, stream);
  } else {
    launch_gemv_split<kGemvWarps>(p, n, x, xq, xs, stream);
  }
}

template <WeightType kType>
using TypeTag = std::integral_constant<WeightType, kType>;

// Calls fn(TypeTag<type>{}): the type as a compile-time constant (decltype(tag)::value).
template <typename Fn>
void with_type(WeightType type, Fn&& fn) {
  switch (type) {
    case WeightType::F32: return fn(TypeTag<WeightType::F32>{});
    case WeightType::F16: return fn(TypeTag<WeightType::F16>{});
    case WeightType::BF16: return fn(TypeTag<WeightType::BF16>{});
    case WeightType::Q8_0: return fn(TypeTag<WeightType::Q8_0>{});
    case WeightType::Q4_K: return fn(TypeTag<WeightType::Q4_K>{});
    case WeightType::Q6_K: return fn(TypeTag<WeightType::Q6_K>{});
  }
}

// Sum of a value over the thread block (blockDim.x a multiple of 32, at most 1024).
__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += shared[i];
  return total;
}

// One block a row, each thread holding its values (i = thread + k * blockDim) in registers from
// the load to the store: a single pass over memory with all loads in flight at once (a loop that
// reloaded x for the scaling and the quantization made three latency-bound passes). Within each
// k, a warp's 32 values are one quantization block.
constexpr int kNormMaxPerThread = 16;

// Sum of a float over the thread block. Float, not double: the norm of a decode step is one
// block, on the critical path of every layer, and each thread adds only a few values (ggml's
// CUDA norm accumulates in float too).
__device__ float block_sum_float(float v, float* shared) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += shared[i];
  return total;
}

__global__ void add_rms_norm_kernel(float* x, const float* add, const float* weight, float* out,
                                    int64_t n, float eps, int8_t* q_values, float2* q_scales) {
  __shared__ float partial[32];
  float* xr = x + blockIdx.x * n;
  float* outr = out + blockIdx.x * n;
  const int stride = static_cast<int>(blockDim.x);
  float v[kNormMaxPerThread];
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    v[k] = 0.0f;
    if (i < n) {
      v[k] = xr[i];
      if (add != nullptr) v[k] += add[blockIdx.x * n + i];
    }
  }
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    if (i < n) {
      if (add != nullptr) xr[i] = v[k];
      sum += v[k] * v[k];
    }
  }
  const float total = block_sum_float(sum, partial);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    if (k * stride >= n) break;  // the same for the whole block
    const float y = i < n ? v[k] * scale * weight[i] : 0.0f;
    if (i < n) outr[i] = y;
    if (q_values == nullptr) continue;
    // The warp's 32 values of this k are quantization block i / 32 (n and blockDim are
    // multiples of 32).
    const float amax = warp_max(fabsf(y));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(y / d);
    const float qsum = warp_sum(static_cast<float>(q));
    if (i < n) {
      q_values[blockIdx.x * n + i] = static_cast<int8_t>(q);
      if (lane == 0) q_scales[blockIdx.x * (n / kUnit) + i / kUnit] = make_float2(d, d * qsum);
    }
  }
}

__global__ void gather_add_rms_norm_kernel(const float* x, const float* add, const int32_t* rows,
                                           const float* weight, float* out, int64_t n, float eps) {
  __shared__ double partial[32];
  const int64_t src = rows[blockIdx.x];
  float* outr = out + blockIdx.x * n;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[src * n + i] + add[src * n + i];
    outr[i] = v;
    sum += static_cast<double>(v) * v;
  }
  const double total = block_sum(sum, partial);
  const float scale = 1.0f / sqrtf(static_cast<float>(total / static_cast<double>(n)) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) outr[i] = outr[i] * scale * weight[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t total, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) x[i] += bias[i % n];
}

__global__ void gated_kernel(float* a, const float* b, int64_t n, bool gelu) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = a[i];
  float g;
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
    g = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoef * x * x)));
  } else {
    g = x / (1.0f + expf(-x));
  }
  a[i] = g * b[i];
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void to_f16_kernel(const float* x, int64_t n, __half* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(x[i]);
}

__device__ __forceinline__ int64_t kv_index(const KvLayout& kv, int64_t slot, int head) {
  const int64_t block = slot / kv.block_size, offset = slot % kv.block_size;
  return ((block * kv.n_kv_heads + head) * kv.block_size + offset) * kv.head_dim;
}

// One thread block per (token, head): blockIdx.y < n_heads rotates query head blockIdx.y; the
// others rotate key head blockIdx.y - n_heads and store it and its value head in the caches.
__global__ void rope_store_kv_kernel(float* q, float* k, const float* v, const int32_t* positions,
                                     const int64_t* slots, int n_heads, KvLayout kv, int rot_dims,
                                     bool neox, const float* cos_table, const float* sin_table,
                                     __half* k_cache, __half* v_cache) {
  const int64_t t = blockIdx.x;
  const int D = kv.head_dim, half = rot_dims / 2;
  const bool is_k = static_cast<int>(blockIdx.y) >= n_heads;
  const int h = is_k ? static_cast<int>(blockIdx.y) - n_heads : static_cast<int>(blockIdx.y);
  const float* c = cos_table + static_cast<int64_t>(positions[t]) * half;
  const float* s = sin_table + static_cast<int64_t>(positions[t]) * half;
  float* head = is_k ? k + (t * kv.n_kv_heads + h) * D : q + (t * n_heads + h) * D;
  const int64_t base = is_k ? kv_index(kv, slots[t], h) : 0;
  for (int p = threadIdx.x; p < half; p += blockDim.x) {
    const int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
    const float x0 = head[i0], x1 = head[i1];
    const float r0 = x0 * c[p] - x1 * s[p], r1 = x0 * s[p] + x1 * c[p];
    head[i0] = r0;
    head[i1] = r1;
    if (is_k) {
      k_cache[base + i0] = __float2half_rn(r0);
      k_cache[base + i1] = __float2half_rn(r1);
    }
  }
  if (!is_k) return;
  // The dimensions RoPE leaves alone, and the value head.
  const float* vt = v + (t * kv.n_kv_heads + h) * D;
  for (int d = rot_dims + threadIdx.x; d < D; d += blockDim.x) k_cache[base + d] = __float2half_rn(head[d]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) v_cache[base + d] = __float2half_rn(vt[d]);
}

constexpr int kAttentionThreads = 128;
constexpr int kMaxGroupHeads = 16;   // query heads per kv head
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ void keys_seen(const AttentionToken& tok, const AttentionParams& p,
                                          int& first, int& n_chunks) {
  first = p.window > 0 ? max(0, tok.position - p.window + 1) : 0;
  n_chunks = (tok.position + 1 - first + p.keys_per_block - 1) / p.keys_per_block;
}

// One thread block: query token blockIdx.x, kv head blockIdx.y, chunk blockIdx.z of its keys.
// Writes for each of the kv head's query heads the chunk's max score m, sum of exp(s - m) l,
// and sum of exp(s - m) v (unnormalised): [D values, m, l].
__global__ void __launch_bounds__(kAttentionThreads)
    attention_chunk_kernel(const float* q, const AttentionToken* tokens, const int32_t* tables,
                           AttentionParams params, KvLayout kv, const __half* k_cache,
                           const __half* v_cache, int max_chunks, float* partial,
                           float* direct_out) {
  const int t = blockIdx.x, kvh = blockIdx.y, chunk = blockIdx.z;
  const AttentionToken tok = tokens[t];
  int first, n_chunks;
  keys_seen(tok, params, first, n_chunks);
  if (chunk >= n_chunks) return;
  const int D = kv.head_dim, G = params.n_heads / kv.n_kv_heads;
  const int p0 = first + chunk * params.keys_per_block;
  const int n = min(params.keys_per_block, tok.position + 1 - p0);

  __shared__ float q_s[kMaxGroupHeads * kMaxHeadDim];
  __shared__ float s_s[kMaxGroupHeads * kAttentionChunk];
  __shared__ int64_t row_s[kAttentionChunk];  // each key's record in the caches
  __shared__ float m_s[kMaxGroupHeads], l_s[kMaxGroupHeads];

  const float* qt = q + (static_cast<int64_t>(t) * params.n_heads + kvh * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) q_s[i] = qt[i];
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int p = p0 + j;
    const int32_t block = tables[tok.table_offset + p / kv.block_size];
    const int64_t slot = static_cast<int64_t>(block) * kv.block_size + p % kv.block_size;
    row_s[j] = kv_index(kv, slot, kvh);
  }
  __syncthreads();

  // Scores: a thread a key, its G dots over D from q in shared memory (the warp reads the same
  // address: a broadcast) and the key's row in 16-byte loads (head_dim % 8 == 0).
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const __half* kr = k_cache + row_s[j];
    float dots[kMaxGroupHeads];
#pragma unroll
    for (int g = 0; g < kMaxGroupHeads; ++g) dots[g] = 0.0f;
    // 64 dimensions at a time: their eight 16-byte loads issued before any is used.
    for (int d64 = 0; d64 < D; d64 += 64) {
      uint4 raw[8];
#pragma unroll
      for (int c = 0; c < 8; ++c)
        if (d64 + 8 * c < D) raw[c] = *reinterpret_cast<const uint4*>(kr + d64 + 8 * c);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int d0 = d64 + 8 * c;
        if (d0 >= D) break;
        const uint32_t words[4] = {raw[c].x, raw[c].y, raw[c].z, raw[c].w};
        float kf[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          kf[2 * i] = half_bits_to_float(static_cast<uint16_t>(words[i] & 0xFFFF));
          kf[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(words[i] >> 16));
        }
#pragma unroll
        for (int g = 0; g < kMaxGroupHeads; ++g) {
          if (g < G) {
#pragma unroll
            for (int i = 0; i < 8; ++i) dots[g] += q_s[g * D + d0 + i] * kf[i];
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroupHeads; ++g) {
      if (g < G) {
        float score = dots[g] * params.scale;
        if (params.softcap > 0) score = params.softcap * tanhf(score / params.softcap);
        s_s[g * kAttentionChunk + j] = score;
      }
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kWarps = kAttentionThreads / 32;
  __syncthreads();
  for (int g = warp; g < G; g += kWarps) {
    float m = -FLT_MAX;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, s_s[g * kAttentionChunk + j]);
    m = warp_max(m);
    float l = 0;
    for (int j = lane; j < n; j += 32) {
      const float e = expf(s_s[g * kAttentionChunk + j] - m);
      s_s[g * kAttentionChunk + j] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      m_s[g] = m;
      l_s[g] = l;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    // Eight partial sums: the loads of eight keys' values in flight together.
    float acc8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= n; j += 8) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        acc8[i] += s_s[g * kAttentionChunk + j + i] * __half2float(v_cache[row_s[j + i] + d]);
    }
    for (; j < n; ++j) acc8[0] += s_s[g * kAttentionChunk + j] * __half2float(v_cache[row_s[j] + d]);
    const float acc = ((acc8[0] + acc8[1]) + (acc8[2] + acc8[3])) +
                      ((acc8[4] + acc8[5]) + (acc8[6] + acc8[7]));
    const int h = kvh * G + g;
    if (direct_out != nullptr) {  // the only chunk: the result itself
      direct_out[(static_cast<int64_t>(t) * params.n_heads + h) * D + d] = acc / l_s[g];
      continue;
    }
    float* out = partial + ((static_cast<int64_t>(t) * params.n_heads + h) * max_chunks + chunk) * (D + 2);
    out[d] = acc;
    if (d == 0) {
      out[D] = m_s[g];
      out[D + 1] = l_s[g];
    }
  }
}

// out[t, h] = the chunks' results combined: sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
__global__ void attention_combine_kernel(const AttentionToken* tokens, AttentionParams params,
                                         int D, int max_chunks, const float* partial, float* out) {
  const int t = blockIdx.x, h = blockIdx.y;
  int first, n_chunks;
  keys_seen(tokens[t], params, first, n_chunks);
  const float* part = partial + (static_cast<int64_t>(t) * params.n_heads + h) * max_chunks * (D + 2);
  float m = -FLT_MAX;
  for (int c = 0; c < n_chunks; ++c) m = fmaxf(m, part[c * (D + 2) + D]);
  float l = 0;
  for (int c = 0; c < n_chunks; ++c) l += expf(part[c * (D + 2) + D] - m) * part[c * (D + 2) + D + 1];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int c = 0; c < n_chunks; ++c) acc += expf(part[c * (D + 2) + D] - m) * part[c * (D + 2) + d];
    out[(static_cast<int64_t>(t) * params.n_heads + h) * D + d] = acc / l;
  }
}

__global__ void argmax_kernel(const float* x, int64_t n, int32_t* ids) {
  __shared__ float best_s[32];
  __shared__ int64_t index_s[32];
  const float* row = x + blockIdx.x * n;
  float best = -FLT_MAX;
  int64_t index = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (row[i] > best || index < 0) {
      best = row[i];
      index = i;
    }
  }
  // Larger value wins; on a tie the smaller index.
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (oi >= 0 && (index < 0 || ob > best || (ob == best && oi < index))) {
      best = ob;
      index = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    best_s[warp] = best;
    index_s[warp] = index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      if (index_s[w] >= 0 &&
          (index < 0 || best_s[w] > best || (best_s[w] == best && index_s[w] < index))) {
        best = best_s[w];
        index = index_s[w];
      }
    }
    ids[blockIdx.x] = static_cast<int32_t>(index);
  }
}

unsigned grid_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

int block_values(WeightType type) {
  switch (type) {
    case WeightType::Q4_K:
    case WeightType::Q6_K: return 256;
    case WeightType::Q8_0: return 32;
    default: return 1;
  }
}

int block_bytes(WeightType type) {
  switch (type) {
    case WeightType::F32: return 4;
    case WeightType::F16:
    case WeightType::BF16: return 2;
    case WeightType::Q8_0: return 34;
    case WeightType::Q4_K: return 144;
    case WeightType::Q6_K: return 210;
  }
  return 0;
}

void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t n_tokens, float scale,
                float* out, cudaStream_t stream) {
  if (n_tokens == 0) return;
  with_type(table.type, [&](auto tag) {
    constexpr WeightType kType = decltype(tag)::value;
    embed_rows_kernel<kType><<<static_cast<unsigned>(n_tokens), 128, 0, stream>>>(
        table.data, table.row_bytes, table.cols, tokens, scale, out);
  });
}

void dequantize_f16(const DeviceMatrix& w, int64_t row_begin, int64_t rows, void* out,
                    cudaStream_t stream) {
  const int64_t units = rows * (w.cols / kUnit);
  if (units == 0) return;
  with_type(w.type, [&](auto tag) {
    constexpr WeightType kType = decltype(tag)::value;
    dequantize_f16_kernel<kType><<<grid_for(units, 256), 256, 0, stream>>>(
        w.data, w.row_bytes, w.cols, row_begin, units, static_cast<__half*>(out));
  });
}

void quantize_activations(const float* x, int64_t n_tokens, int64_t cols, QuantizedActivations q,
                          cudaStream_t stream) {
  const int64_t blocks = n_tokens * cols / kUnit;
  if (blocks == 0) return;
  quantize_kernel<<<grid_for(blocks, 8), 256, 0, stream>>>(x, blocks, q.values, q.scales);
}

void gemv_many(const GemvTarget* targets, int count, const float* x, QuantizedActivations qx,
               int64_t n_tokens, bool glu, bool gelu, cudaStream_t stream) {
  if (n_tokens == 0 || count == 0) return;
  const int64_t cols = targets[0].w.cols;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemvMaxTokens) {
    const int64_t n = n_tokens - t0 < kGemvMaxTokens ? n_tokens - t0 : kGemvMaxTokens;
    GemvParams p{};
    p.count = count;
    p.glu = glu;
    p.gelu = gelu;
    for (int k = 0; k < count; ++k) {
      const DeviceMatrix& w = targets[k].w;
      p.m[k] = {w.type, w.rows, w.cols, w.row_bytes, w.data, targets[k].y + t0 * targets[k].ldy,
                targets[k].ldy};
      // With glu only matrix 0's rows are walked (matrix 1 rides along).
      const int64_t rows_per_block = kGemvWarps / g_gemv_split;
      const int64_t blocks = glu && k > 0 ? 0 : (w.rows + rows_per_block - 1) / rows_per_block;
      p.first_block[k + 1] = p.first_block[k] + blocks;
    }
    launch_gemv(p, n, x + t0 * cols, qx.values ? qx.values + t0 * cols : nullptr,
                qx.scales ? qx.scales + t0 * (cols / kUnit) : nullptr, stream);
  }
}

void set_gemv_split(int warps_per_row) {
  g_gemv_split = warps_per_row == 1 ? 1 : kGemvWarps;
}

void gemv(const DeviceMatrix& w, const float* x, QuantizedActivations qx, int64_t n_tokens,
          float* y, int64_t ldy, cudaStream_t stream) {
  const GemvTarget target{w, y, ldy};
  gemv_many(&target, 1, x, qx, n_tokens, false, false, stream);
}

void to_f16(const float* x, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return;
  to_f16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, static_cast<__half*>(out));
}

void add_rms_norm(float* x, const float* add, const float* weight, float* out, int64_t rows,
                  int64_t n, float eps, cudaStream_t stream, QuantizedActivations q) {
  if (rows == 0) return;
  // Threads: a multiple of 32, each holding at most kNormMaxPerThread values.
  // 4 values a thread where 512 threads allow it (the kernel takes 80 registers a thread).
  int threads = 32;
  while (threads < 512 && int64_t{threads} * 4 < n) threads *= 2;
  add_rms_norm_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      x, add, weight, out, n, eps, q.values, q.scales);
}

void gather_add_rms_norm(const float* x, const float* add, const int32_t* rows, int64_t n_rows,
                         const float* weight, float* out, int64_t n, float eps,
                         cudaStream_t stream) {
  if (n_rows == 0) return;
  gather_add_rms_norm_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(
      x, add, rows, weight, out, n, eps);
}

void add_bias(float* x, const float* bias, int64_t n_tokens, int64_t n, cudaStream_t stream) {
  const int64_t total = n_tokens * n;
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, bias, total, n);
}

void gated_activation(float* a, const float* b, int64_t n, bool gelu, cudaStream_t stream) {
  if (n == 0) return;
  gated_kernel<<<grid_for(n, 256), 256, 0, stream>>>(a, b, n, gelu);
}

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  softcap_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, cap);
}

void rope_store_kv(float* q, float* k, const float* v, const int32_t* positions,
                   const int64_t* slots, int64_t n_tokens, int n_heads, const KvLayout& kv,
                   int rot_dims, bool neox, const float* cos_table, const float* sin_table,
                   uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  if (n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads + kv.n_kv_heads));
  rope_store_kv_kernel<<<grid, 64, 0, stream>>>(
      q, k, v, positions, slots, n_heads, kv, rot_dims, neox, cos_table, sin_table,
      reinterpret_cast<__half*>(k_cache), reinterpret_cast<__half*>(v_cache));
}

size_t attention_scratch_floats(int64_t n_tokens, int n_heads, int head_dim, int max_chunks) {
  return static_cast<size_t>(n_tokens) * n_heads * max_chunks * (head_dim + 2);
}

void paged_attention(const float* q, const AttentionToken* tokens, const int32_t* tables,
                     int64_t n_tokens, const AttentionParams& params, const KvLayout& kv,
                     const uint16_t* k_cache, const uint16_t* v_cache, int max_chunks,
                     float* scratch, float* out, cudaStream_t stream) {
  if (n_tokens == 0 || max_chunks <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(max_chunks));
  attention_chunk_kernel<<<grid, kAttentionThreads, 0, stream>>>(
      q, tokens, tables, params, kv, reinterpret_cast<const __half*>(k_cache),
      reinterpret_cast<const __half*>(v_cache), max_chunks, scratch,
      max_chunks == 1 ? out : nullptr);
  if (max_chunks == 1) return;
  const dim3 combine(static_cast<unsigned>(n_tokens), static_cast<unsigned>(params.n_heads));
  attention_combine_kernel<<<combine, kv.head_dim >= 128 ? 128 : 64, 0, stream>>>(
      tokens, params, kv.head_dim, max_chunks, scratch, out);
}

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), 1024, 0, stream>>>(x, n, ids);
}

void copy_kv_block(uint16_t* k_cache, uint16_t* v_cache, const KvLayout& kv, int32_t from,
                   int32_t to, cudaStream_t stream) {
  const size_t record = static_cast<size_t>(kv.n_kv_heads) * kv.block_size * kv.head_dim;
  for (uint16_t* cache : {k_cache, v_cache}) {
    cudaMemcpyAsync(cache + to * record, cache + from * record, record * sizeof(uint16_t),
                    cudaMemcpyDeviceToDevice, stream);
  }
}

}  // namespace inferd::cuda
