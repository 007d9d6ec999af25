// The CUDA executor's kernels (kernels.cuh). Weight blocks are read in GGUF's own layouts
// (tensor/quant_blocks.h): Q4_K's 144-byte blocks, Q6_K's 210, Q8_0's 34. Every kernel works in
// units of 32 values, the activation quantization block: a Q4_K or Q6_K super-block is 8 units.
#include "cuda/kernels.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>
#include <utility>

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

// Programmatic dependent launch (sm_90; set_programmatic_launch): each kernel is launched
// allowed to start while the one before it in the stream is finishing. A kernel calls
// wait_for_previous_kernel() before it reads anything an earlier kernel wrote or writes anything
// an earlier kernel may still read; every kernel waits before it ends, so a kernel's end implies
// the end of all before it. It then lets the next kernel launch, whose start (and the matrix-
// vector kernels' first weight loads, issued before their wait: weights are written by no
// kernel) overlaps this one's work instead of following it. Launched without the attribute,
// both are no-ops.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Both, first thing in a kernel that has nothing to do before its inputs are ready.
__device__ __forceinline__ void begin_dependent_kernel() {
  wait_for_previous_kernel();
  let_next_kernel_launch();
}

bool g_programmatic_launch = true;  // set_programmatic_launch()

// kernel<<<grid, block, 0, stream>>>(args...), with programmatic dependent launch allowed when
// it is on.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = g_programmatic_launch ? 1 : 0;
  // An error stays the runtime's last error, which the callers check after their launches.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
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
  begin_dependent_kernel();
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
  begin_dependent_kernel();
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
  begin_dependent_kernel();
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

// N consecutive 4-byte words at p, which is only 2-byte aligned (Q6_K's 210-byte and Q8_0's
// 34-byte blocks): N + 1 aligned loads, each pair joined by a funnel shift. May read up to 3
// bytes past the run (kWeightPadding).
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

// The 8 int8 words of activation block b.
__device__ __forceinline__ void load_x_block(const int8_t* xq, int64_t b, int (&x8)[8]) {
  const int4* xv = reinterpret_cast<const int4*>(xq + b * kUnit);
  const int4 a = xv[0], c = xv[1];
  x8[0] = a.x, x8[1] = a.y, x8[2] = a.z, x8[3] = a.w;
  x8[4] = c.x, x8[5] = c.y, x8[6] = c.z, x8[7] = c.w;
}

// The matrix-vector products. A warp computes kRows rows together (a row and the same row of a
// second matrix, for the fused gate/up): each lane walks its pieces of the rows (a piece: the
// bytes one lane loads and multiplies at a time), loading every row's piece before multiplying
// any, and loading the activations of a piece once for all the rows. Then the warp sums each
// row's lanes.
//
// for_each_piece: lane `lane` takes pieces lane, lane + 32, ...; kUnroll pieces of each row a
// step when a warp has one row, so that a lane has as many loads in flight either way. The first
// step's weight loads are issued before the wait for the previous kernel (no kernel writes
// weights): they overlap its tail. (Software pipelining, the next step's loads issued before
// this one's products, measured no faster on an H200 and needs twice the registers.)
template <int kRows, typename Piece, typename Load, typename Dot>
__device__ __forceinline__ void for_each_piece(int64_t pieces, int lane, bool& waited, Load load,
                                               Dot dot) {
  constexpr int kUnroll = kRows == 1 ? 2 : 1;
  for (int64_t p0 = lane; p0 < pieces; p0 += 32 * kUnroll) {
    Piece w[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (p0 + 32 * u < pieces) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) w[u][r] = load(r, p0 + 32 * u);
      }
    }
    if (!waited) {
      begin_dependent_kernel();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (p0 + 32 * u < pieces) dot(w[u], p0 + 32 * u);
  }
}

// Q8_0: a piece is one 34-byte block (32 values).
struct Q8Piece {
  int q[8];
  uint16_t d;
};

template <int kTokens, int kRows>
__device__ __forceinline__ void rows_dot_q8_0(const uint8_t* const (&wr)[kRows], int64_t cols,
                                              const int8_t* xq, const float2* xs, int lane,
                                              float (&acc)[kRows][kTokens], bool& waited) {
  const int64_t units = cols / kUnit;
  const auto load = [&](int r, int64_t u) {
    Q8Piece w;
    const uint8_t* b = wr[r] + u * 34;
    load_words_a2(b + 2, w.q);
    w.d = load_u16(b);
    return w;
  };
  const auto dot = [&](const Q8Piece (&w)[kRows], int64_t u) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      int x8[8];
      load_x_block(xq + t * cols, u, x8);
      const float sx = xs[t * units + u].x;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        int d = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = __dp4a(w[r].q[i], x8[i], d);
        acc[r][t] += half_bits_to_float(w[r].d) * sx * static_cast<float>(d);
      }
    }
  };
  for_each_piece<kRows, Q8Piece>(units, lane, waited, load, dot);
}

// F32, F16, BF16: a piece is 8 consecutive values (16 bytes of F16/BF16, 32 of F32).
struct FloatPiece {
  float v[8];
};

template <WeightType kType, int kTokens, int kRows>
__device__ __forceinline__ void rows_dot_float(const uint8_t* const (&wr)[kRows], int64_t cols,
                                               const float* x, int lane,
                                               float (&acc)[kRows][kTokens], bool& waited) {
  const auto load = [&](int r, int64_t c8) {
    FloatPiece w;
    if constexpr (kType == WeightType::F32) {
      const float4* p = reinterpret_cast<const float4*>(wr[r]) + 2 * c8;
      const float4 a = p[0], b = p[1];
      w.v[0] = a.x, w.v[1] = a.y, w.v[2] = a.z, w.v[3] = a.w;
      w.v[4] = b.x, w.v[5] = b.y, w.v[6] = b.z, w.v[7] = b.w;
    } else {
      const uint4 raw = reinterpret_cast<const uint4*>(wr[r])[c8];
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const auto lo = static_cast<uint16_t>(words[i] & 0xFFFF);
        const auto hi = static_cast<uint16_t>(words[i] >> 16);
        w.v[2 * i] = kType == WeightType::F16 ? half_bits_to_float(lo) : bf16_bits_to_float(lo);
        w.v[2 * i + 1] = kType == WeightType::F16 ? half_bits_to_float(hi) : bf16_bits_to_float(hi);
      }
    }
    return w;
  };
  const auto dot = [&](const FloatPiece (&w)[kRows], int64_t c8) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float4* xv = reinterpret_cast<const float4*>(x + t * cols + 8 * c8);
      const float4 a = xv[0], b = xv[1];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float* v = w[r].v;
        acc[r][t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x +
                     v[5] * b.y + v[6] * b.z + v[7] * b.w;
      }
    }
  };
  for_each_piece<kRows, FloatPiece>(cols / 8, lane, waited, load, dot);
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

// Q4_K: a piece is a pair of sub-blocks (64 values: both nibbles of 32 bytes of qs) with its
// block's header (d, dmin, 12 scale bytes: 16 bytes), in three 16-byte loads.
struct Q4kPair {
  int4 head, q0, q1;
};

template <int kTokens, int kRows>
__device__ __forceinline__ void rows_dot_q4k(const uint8_t* const (&wr)[kRows], int64_t cols,
                                             const int8_t* xq, const float2* xs, int lane,
                                             float (&acc)[kRows][kTokens], bool& waited) {
  const int64_t units = cols / kUnit;
  const auto load = [&](int r, int64_t pr) {
    const uint8_t* b = wr[r] + (pr / 4) * 144;
    const int4* qv = reinterpret_cast<const int4*>(b + 16 + 32 * (pr % 4));
    return Q4kPair{*reinterpret_cast<const int4*>(b), qv[0], qv[1]};
  };
  const auto dot = [&](const Q4kPair (&w)[kRows], int64_t pr) {
    const int pair = static_cast<int>(pr % 4);
    // Each row's scale and min of the two sub-blocks, times d and dmin.
    float a0[kRows], a1[kRows], b0[kRows], b1[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float d = half_bits_to_float(static_cast<uint16_t>(w[r].head.x & 0xFFFF));
      const float dmin =
          half_bits_to_float(static_cast<uint16_t>(static_cast<unsigned>(w[r].head.x) >> 16));
      int sc0, m0, sc1, m1;
      q4k_scale_min_words(w[r].head, 2 * pair, sc0, m0);
      q4k_scale_min_words(w[r].head, 2 * pair + 1, sc1, m1);
      a0[r] = d * static_cast<float>(sc0), a1[r] = d * static_cast<float>(sc1);
      b0[r] = dmin * static_cast<float>(m0), b1[r] = dmin * static_cast<float>(m1);
    }
    const int64_t u0 = pr * 2;  // the activation blocks of the two sub-blocks
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      int x0[8], x1[8];
      load_x_block(xq + t * cols, u0, x0);
      load_x_block(xq + t * cols, u0 + 1, x1);
      const float2 s0 = xs[t * units + u0], s1 = xs[t * units + u0 + 1];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int qs[8] = {w[r].q0.x, w[r].q0.y, w[r].q0.z, w[r].q0.w,
                           w[r].q1.x, w[r].q1.y, w[r].q1.z, w[r].q1.w};
        int dot0 = 0, dot1 = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          dot0 = __dp4a(qs[i] & 0x0F0F0F0F, x0[i], dot0);
          dot1 = __dp4a((qs[i] >> 4) & 0x0F0F0F0F, x1[i], dot1);
        }
        acc[r][t] += a0[r] * s0.x * static_cast<float>(dot0) +
                     a1[r] * s1.x * static_cast<float>(dot1) - (b0[r] * s0.y + b1[r] * s1.y);
      }
    }
  };
  for_each_piece<kRows, Q4kPair>(cols / 64, lane, waited, load, dot);
}

// Q6_K: a piece is a quarter of a super-block: in one of its halves h, positions l of
// [16e, 16e + 16) of its four sub-blocks of 32 (64 values). Those are two runs of 16 bytes of ql
// (low and high nibbles: sub-blocks 0 and 2, then 1 and 3), 16 bytes of qh (bit pairs 0-3), the
// scales 2k + e of the half (k the sub-block) and d. Smaller than a half super-block, so that a
// warp's rows fit in registers.
struct Q6kQuarter {
  int ql[2][4], qh[4], sc[2];
  uint16_t d;
};

template <int kTokens, int kRows>
__device__ __forceinline__ void rows_dot_q6k(const uint8_t* const (&wr)[kRows], int64_t cols,
                                             const int8_t* xq, const float2* xs, int lane,
                                             float (&acc)[kRows][kTokens], bool& waited) {
  const int64_t units = cols / kUnit;
  const auto load = [&](int r, int64_t qv) {
    const uint8_t* b = wr[r] + (qv / 4) * 210;
    const int h = static_cast<int>(qv / 2 % 2), e = static_cast<int>(qv % 2);
    Q6kQuarter w;
    load_words_a2(b + 64 * h + 16 * e, w.ql[0]);
    load_words_a2(b + 64 * h + 32 + 16 * e, w.ql[1]);
    load_words_a2(b + 128 + 32 * h + 16 * e, w.qh);
    load_words_a2(b + 192 + 8 * h, w.sc);
    w.d = load_u16(b + 208);
    return w;
  };
  const auto dot = [&](const Q6kQuarter (&w)[kRows], int64_t qv) {
    const int e = static_cast<int>(qv % 2);
    const int64_t u0 = (qv / 4) * 8 + (qv / 2 % 2) * 4;  // the activation block of sub-block 0
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float sum[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) sum[r] = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        // Values [16e, 16e + 16) of activation block u0 + k: one 16-byte load.
        const int4 xv = *reinterpret_cast<const int4*>(xq + t * cols + (u0 + k) * kUnit + 16 * e);
        const int x4[4] = {xv.x, xv.y, xv.z, xv.w};
        int xsum = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) xsum = __dp4a(0x01010101, x4[i], xsum);
        const float sx = xs[t * units + u0 + k].x;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          int d = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int lo = (w[r].ql[k & 1][i] >> (4 * (k >> 1))) & 0x0F0F0F0F;
            const int hi = ((w[r].qh[i] >> (2 * k)) & 0x03030303) << 4;
            // q in [0, 63] is a positive signed byte: sum (q - 32) x = sum q x - 32 sum x,
            // with no per-byte subtraction.
            d = __dp4a(lo | hi, x4[i], d);
          }
          // Scale 2k + e of the half: byte (2k + e) % 4 of word k / 2, as int8.
          const auto scale = static_cast<int8_t>(w[r].sc[k / 2] >> (8 * (2 * (k % 2) + e)));
          sum[r] += sx * static_cast<float>(scale) * static_cast<float>(d - 32 * xsum);
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][t] += half_bits_to_float(w[r].d) * sum[r];
    }
  };
  for_each_piece<kRows, Q6kQuarter>(cols / 64, lane, waited, load, dot);
}

// The rows wr (all of `type`, `cols` values) times the tokens: this lane's share of each dot.
template <int kTokens, int kRows>
__device__ __forceinline__ void rows_dot(WeightType type, const uint8_t* const (&wr)[kRows],
                                         int64_t cols, const float* x, const int8_t* xq,
                                         const float2* xs, int lane, float (&acc)[kRows][kTokens],
                                         bool& waited) {
  switch (type) {
    case WeightType::F32: rows_dot_float<WeightType::F32, kTokens, kRows>(wr, cols, x, lane, acc, waited); break;
    case WeightType::F16: rows_dot_float<WeightType::F16, kTokens, kRows>(wr, cols, x, lane, acc, waited); break;
    case WeightType::BF16: rows_dot_float<WeightType::BF16, kTokens, kRows>(wr, cols, x, lane, acc, waited); break;
    case WeightType::Q8_0: rows_dot_q8_0<kTokens, kRows>(wr, cols, xq, xs, lane, acc, waited); break;
    case WeightType::Q4_K: rows_dot_q4k<kTokens, kRows>(wr, cols, xq, xs, lane, acc, waited); break;
    case WeightType::Q6_K: rows_dot_q6k<kTokens, kRows>(wr, cols, xq, xs, lane, acc, waited); break;
  }
}

__device__ __forceinline__ float gated(float g, float u, bool gelu) {
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * u;
  }
  return g / (1.0f + expf(-g)) * u;
}

constexpr int kGemvWarps = 4;  // warps per thread block

// Blocks an SM must hold at once, which caps the registers a thread: a one-token product of a
// row a warp 64 (8 blocks: the occupancy that keeps enough loads in flight), of two rows 102 (5:
// the most that do not spill, ptxas -v), anything larger 128.
constexpr int gemv_min_blocks(int tokens, int rows) {
  return tokens == 1 && rows == 1 ? 8 : (tokens == 1 && rows == 2 ? 5 : 4);
}

// One launch for every matrix of `p` (their blocks of rows one after another). A warp computes
// kRows rows of its matrix; with p.glu (kRows even), kRows / 2 rows r of matrix 0 (gate), each
// beside row r of matrix 1 (up), and writes act(gate) * up.
template <int kTokens, int kRows>
__global__ void __launch_bounds__(kGemvWarps * 32, gemv_min_blocks(kTokens, kRows))
    gemv_kernel(const __grid_constant__ GemvParams p, const float* x, const int8_t* xq,
                const float2* xs) {
  int k = 0;
  while (k + 1 < p.count && blockIdx.x >= p.first_block[k + 1]) ++k;
  const GemvMatrix& m = p.m[k];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int outputs = p.glu ? kRows / 2 : kRows;  // rows of y a warp writes
  const int64_t row0 = (blockIdx.x - p.first_block[k]) * static_cast<int64_t>(kGemvWarps * outputs) +
                       warp * outputs;
  // Item i: row row0 + i of m, or with glu row row0 + i / 2 of gate (i even) or up (i odd). A row
  // past the end reads row 0 and is not stored.
  const uint8_t* wr[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const GemvMatrix& mi = p.glu ? p.m[i % 2] : m;
    const int64_t r = p.glu ? row0 + i / 2 : row0 + i;
    wr[i] = mi.data + static_cast<size_t>(r < mi.rows ? r : 0) * mi.row_bytes;
  }
  float acc[kRows][kTokens];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[i][t] = 0.0f;
  bool waited = false;
  if (!p.glu || p.m[0].type == p.m[1].type) {
    rows_dot<kTokens, kRows>(m.type, wr, m.cols, x, xq, xs, lane, acc, waited);
  } else {  // a gate and an up of different types: one row at a time
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const uint8_t* const one[1] = {wr[i]};
      float part[1][kTokens];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) part[0][t] = 0.0f;
      rows_dot<kTokens, 1>(p.m[i % 2].type, one, m.cols, x, xq, xs, lane, part, waited);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) acc[i][t] = part[0][t];
    }
  }
  if (!waited) begin_dependent_kernel();  // a lane with no pieces (short rows)
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[i][t] = warp_sum(acc[i][t]);
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (p.glu && i % 2 == 1) continue;
    const int64_t r = p.glu ? row0 + i / 2 : row0 + i;
    if (r >= m.rows) continue;
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
      m.y[t * m.ldy + r] = p.glu ? gated(acc[i][t], acc[(i + 1) % kRows][t], p.gelu) : acc[i][t];
  }
}

// Rows a warp takes in a one-token product (set_gemv_rows): 1, 2 or 4, or 0: chosen by type.
int g_gemv_rows = 0;
constexpr int64_t kManyRows = 65536;

// The rows a warp takes for n tokens: more rows share more activation loads, but each row's
// accumulators cost registers for every token. By default two for the int8 types and one for
// the float types, whose pieces are light to compute (the fastest of each on an H200,
// tests/cuda's DecodeKernelSpeed).
int gemv_rows(int64_t n, bool glu, bool float_types, int64_t most_rows) {
  int one_token = g_gemv_rows > 0 ? g_gemv_rows : (float_types ? 1 : 2);
  // The output projection's many rows (a vocabulary): four a warp, 9% faster there.
  if (g_gemv_rows == 0 && !float_types && most_rows >= kManyRows) one_token = 4;
  const int rows = n == 1 ? one_token : (n <= 2 ? 2 : 1);
  return glu ? (rows < 2 ? 2 : rows) : rows;
}

template <int kRows>
void launch_gemv_rows(const GemvParams& p, int64_t n, const float* x, const int8_t* xq,
                      const float2* xs, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.first_block[p.count])), block(kGemvWarps * 32);
  if constexpr (kRows == 4) {  // one token only
    launch(gemv_kernel<1, 4>, grid, block, stream, p, x, xq, xs);
  } else {
    switch (n) {
      case 1: launch(gemv_kernel<1, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 2: launch(gemv_kernel<2, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 3: launch(gemv_kernel<3, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 4: launch(gemv_kernel<4, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 5: launch(gemv_kernel<5, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 6: launch(gemv_kernel<6, kRows>, grid, block, stream, p, x, xq, xs); break;
      case 7: launch(gemv_kernel<7, kRows>, grid, block, stream, p, x, xq, xs); break;
      default: launch(gemv_kernel<8, kRows>, grid, block, stream, p, x, xq, xs); break;
    }
  }
}

void launch_gemv(const GemvParams& p, int64_t n, int rows, const float* x, const int8_t* xq,
                 const float2* xs, cudaStream_t stream) {
  switch (rows) {
    case 1: launch_gemv_rows<1>(p, n, x, xq, xs, stream); break;
    case 2: launch_gemv_rows<2>(p, n, x, xq, xs, stream); break;
    default: launch_gemv_rows<4>(p, n, x, xq, xs, stream); break;
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
int g_norm_max_threads = 1024;  // set_norm_max_threads()

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

// kPerThread: the most values a thread holds; 4 lets a block have 1024 threads (a row of 4096
// in 4 quantization blocks a warp instead of 8), 16 caps it at 512.
template <int kPerThread>
__global__ void __launch_bounds__(kPerThread <= 4 ? 1024 : 512)
    add_rms_norm_kernel(float* x, const float* add, const float* weight, float* out, int64_t n,
                        float eps, int8_t* q_values, float2* q_scales) {
  __shared__ float partial[32];
  float* xr = x + blockIdx.x * n;
  float* outr = out + blockIdx.x * n;
  const int stride = static_cast<int>(blockDim.x);
  // The weights load before the wait for the previous kernel (no kernel writes them), x after:
  // this kernel is one block per row, latency-bound in decode, and a load of the weights after
  // the sum would add a round trip to memory on its critical path.
  float v[kPerThread], w[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    w[k] = i < n ? weight[i] : 0.0f;
  }
  begin_dependent_kernel();
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    v[k] = 0.0f;
    if (i < n) {
      v[k] = xr[i];
      if (add != nullptr) v[k] += add[blockIdx.x * n + i];
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
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
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * stride;
    if (k * stride >= n) break;  // the same for the whole block
    const float y = i < n ? v[k] * scale * w[k] : 0.0f;
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
  begin_dependent_kernel();
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
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total) x[i] += bias[i % n];
}

__global__ void gated_kernel(float* a, const float* b, int64_t n, bool gelu) {
  begin_dependent_kernel();
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
  begin_dependent_kernel();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void to_f16_kernel(const float* x, int64_t n, __half* out) {
  begin_dependent_kernel();
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
  begin_dependent_kernel();
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
constexpr int kThreadsPerKey = 4;  // threads that share a key's score
constexpr int kKeyChunksPerThread = kMaxHeadDim / 8 / kThreadsPerKey;
constexpr int kKeyLanes = 8;       // threads that share a chunk of the values' dimensions
constexpr int kKeysInFlight = 4;   // value loads a thread issues before using them

// The 8 halves of a 16-byte load, as floats.
__device__ __forceinline__ void halves_to_floats(const uint4& raw, float (&out)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = half_bits_to_float(static_cast<uint16_t>(words[i] & 0xFFFF));
    out[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(words[i] >> 16));
  }
}

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
  begin_dependent_kernel();
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

  // Scores: kThreadsPerKey adjacent lanes a key, each taking every kThreadsPerKey-th chunk of 8
  // dimensions of it (16-byte loads, all issued before any is used; head_dim % 8 == 0) against q
  // from shared memory, their partial dots summed by shuffles. A thread a key left a decode
  // step's few keys to a quarter of the threads, each with a long chain of loads.
  const int n_dim_chunks = D / 8;
  {
    const int part = threadIdx.x % kThreadsPerKey;
    for (int j0 = 0; j0 < n; j0 += kAttentionThreads / kThreadsPerKey) {
      const int j = j0 + static_cast<int>(threadIdx.x) / kThreadsPerKey;
      const bool live = j < n;  // the others load key 0 again and store nothing
      const __half* kr = k_cache + row_s[live ? j : 0];
      uint4 raw[kKeyChunksPerThread];
#pragma unroll
      for (int c = 0; c < kKeyChunksPerThread; ++c) {
        const int chunk8 = part + c * kThreadsPerKey;
        raw[c] = chunk8 < n_dim_chunks ? *reinterpret_cast<const uint4*>(kr + 8 * chunk8)
                                       : make_uint4(0, 0, 0, 0);
      }
      float dots[kMaxGroupHeads];
#pragma unroll
      for (int g = 0; g < kMaxGroupHeads; ++g) dots[g] = 0.0f;
#pragma unroll
      for (int c = 0; c < kKeyChunksPerThread; ++c) {
        const int chunk8 = part + c * kThreadsPerKey;
        if (chunk8 >= n_dim_chunks) break;
        float kf[8];
        halves_to_floats(raw[c], kf);
#pragma unroll
        for (int g = 0; g < kMaxGroupHeads; ++g) {
          if (g < G) {
#pragma unroll
            for (int i = 0; i < 8; ++i) dots[g] += q_s[g * D + 8 * chunk8 + i] * kf[i];
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroupHeads; ++g) {
        if (g >= G) break;  // the same for the whole block
#pragma unroll
        for (int o = 1; o < kThreadsPerKey; o <<= 1) dots[g] += __shfl_xor_sync(0xffffffffu, dots[g], o);
        if (live && part == 0) {
          float score = dots[g] * params.scale;
          if (params.softcap > 0) score = params.softcap * tanhf(score / params.softcap);
          s_s[g * kAttentionChunk + j] = score;
        }
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
  // Values: a thread takes a chunk of 8 dimensions (a 16-byte load a key) of every
  // kKeyLanes-th key, kKeysInFlight keys' loads at a time; the kKeyLanes threads of a chunk are
  // adjacent lanes, summed by shuffles. Query heads four at a time, their sums in registers.
  // (A thread per output dimension made a chain of dependent 2-byte loads per key.)
  {
    const int key_lane = lane % kKeyLanes;
    for (int c0 = 0; c0 < n_dim_chunks; c0 += kAttentionThreads / kKeyLanes) {
      const int c = c0 + static_cast<int>(threadIdx.x) / kKeyLanes;
      const bool live = c < n_dim_chunks;  // the others load chunk 0 and store nothing
      const int d0 = 8 * (live ? c : 0);
      for (int g0 = 0; g0 < G; g0 += 4) {
        float acc[4][8];
#pragma unroll
        for (int gi = 0; gi < 4; ++gi)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[gi][i] = 0.0f;
        for (int j = key_lane; j < n; j += kKeyLanes * kKeysInFlight) {
          uint4 raw[kKeysInFlight];
#pragma unroll
          for (int u = 0; u < kKeysInFlight; ++u) {
            const int jj = j + u * kKeyLanes;
            raw[u] = jj < n ? *reinterpret_cast<const uint4*>(v_cache + row_s[jj] + d0)
                            : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int u = 0; u < kKeysInFlight; ++u) {
            const int jj = j + u * kKeyLanes;
            if (jj >= n) break;
            float vf[8];
            halves_to_floats(raw[u], vf);
#pragma unroll
            for (int gi = 0; gi < 4; ++gi) {
              if (g0 + gi < G) {
                const float pj = s_s[(g0 + gi) * kAttentionChunk + jj];
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[gi][i] += pj * vf[i];
              }
            }
          }
        }
#pragma unroll
        for (int gi = 0; gi < 4; ++gi)
#pragma unroll
          for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int o = 1; o < kKeyLanes; o <<= 1)
              acc[gi][i] += __shfl_xor_sync(0xffffffffu, acc[gi][i], o);
        if (!live || key_lane != 0) continue;
#pragma unroll
        for (int gi = 0; gi < 4; ++gi) {
          const int g = g0 + gi;
          if (g >= G) break;
          const int h = kvh * G + g;
          if (direct_out != nullptr) {  // the only chunk: the result itself
            float* out = direct_out + (static_cast<int64_t>(t) * params.n_heads + h) * D + d0;
#pragma unroll
            for (int i = 0; i < 8; ++i) out[i] = acc[gi][i] / l_s[g];
            continue;
          }
          float* out = partial + ((static_cast<int64_t>(t) * params.n_heads + h) * max_chunks + chunk) * (D + 2);
#pragma unroll
          for (int i = 0; i < 8; ++i) out[d0 + i] = acc[gi][i];
          if (c == 0) {
            out[D] = m_s[g];
            out[D + 1] = l_s[g];
          }
        }
      }
    }
  }
}

// out[t, h] = the chunks' results combined: sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
__global__ void attention_combine_kernel(const AttentionToken* tokens, AttentionParams params,
                                         int D, int max_chunks, const float* partial, float* out) {
  begin_dependent_kernel();
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
  begin_dependent_kernel();
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
    launch(embed_rows_kernel<kType>, static_cast<unsigned>(n_tokens), 128, stream,
        table.data, table.row_bytes, table.cols, tokens, scale, out);
  });
}

void dequantize_f16(const DeviceMatrix& w, int64_t row_begin, int64_t rows, void* out,
                    cudaStream_t stream) {
  const int64_t units = rows * (w.cols / kUnit);
  if (units == 0) return;
  with_type(w.type, [&](auto tag) {
    constexpr WeightType kType = decltype(tag)::value;
    launch(dequantize_f16_kernel<kType>, grid_for(units, 256), 256, stream,
        w.data, w.row_bytes, w.cols, row_begin, units, static_cast<__half*>(out));
  });
}

void quantize_activations(const float* x, int64_t n_tokens, int64_t cols, QuantizedActivations q,
                          cudaStream_t stream) {
  const int64_t blocks = n_tokens * cols / kUnit;
  if (blocks == 0) return;
  launch(quantize_kernel, grid_for(blocks, 8), 256, stream, x, blocks, q.values, q.scales);
}

void gemv_many(const GemvTarget* targets, int count, const float* x, QuantizedActivations qx,
               int64_t n_tokens, bool glu, bool gelu, cudaStream_t stream) {
  if (n_tokens == 0 || count == 0) return;
  const int64_t cols = targets[0].w.cols;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemvMaxTokens) {
    const int64_t n = n_tokens - t0 < kGemvMaxTokens ? n_tokens - t0 : kGemvMaxTokens;
    bool float_types = true;
    int64_t most_rows = 0;
    for (int k = 0; k < count; ++k) {
      float_types = float_types && block_values(targets[k].w.type) == 1;
      most_rows = std::max(most_rows, targets[k].w.rows);
    }
    const int rows = gemv_rows(n, glu, float_types, most_rows);
    GemvParams p{};
    p.count = count;
    p.glu = glu;
    p.gelu = gelu;
    for (int k = 0; k < count; ++k) {
      const DeviceMatrix& w = targets[k].w;
      p.m[k] = {w.type, w.rows, w.cols, w.row_bytes, w.data, targets[k].y + t0 * targets[k].ldy,
                targets[k].ldy};
      // With glu only matrix 0's rows are walked (matrix 1's ride along).
      const int64_t rows_per_block = kGemvWarps * (glu ? rows / 2 : rows);
      const int64_t blocks = glu && k > 0 ? 0 : (w.rows + rows_per_block - 1) / rows_per_block;
      p.first_block[k + 1] = p.first_block[k] + blocks;
    }
    launch_gemv(p, n, rows, x + t0 * cols, qx.values ? qx.values + t0 * cols : nullptr,
                qx.scales ? qx.scales + t0 * (cols / kUnit) : nullptr, stream);
  }
}

void set_gemv_rows(int rows) { g_gemv_rows = rows <= 0 ? 0 : (rows == 1 ? 1 : (rows == 2 ? 2 : 4)); }

void set_programmatic_launch(bool on) { g_programmatic_launch = on; }

void set_norm_max_threads(int threads) { g_norm_max_threads = threads >= 1024 ? 1024 : 512; }

void gemv(const DeviceMatrix& w, const float* x, QuantizedActivations qx, int64_t n_tokens,
          float* y, int64_t ldy, cudaStream_t stream) {
  const GemvTarget target{w, y, ldy};
  gemv_many(&target, 1, x, qx, n_tokens, false, false, stream);
}

void to_f16(const float* x, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return;
  launch(to_f16_kernel, grid_for(n, 256), 256, stream, x, n, static_cast<__half*>(out));
}

void add_rms_norm(float* x, const float* add, const float* weight, float* out, int64_t rows,
                  int64_t n, float eps, cudaStream_t stream, QuantizedActivations q) {
  if (rows == 0) return;
  // Threads: a multiple of 32, each holding at most kNormMaxPerThread values.
  // 4 values a thread where the thread limit allows it: rows of up to 4096 in up to 1024 threads
  // of 4 (a decode step's norm of 4096: 3.6 us in a chain of graph nodes on an H200, against
  // 4.8 us in 512 threads of 8), longer rows in 512 threads of up to 16 (108 registers a thread).
  int threads = 32;
  while (threads < g_norm_max_threads && int64_t{threads} * 4 < n) threads *= 2;
  const bool four = threads > 512 && int64_t{threads} * 4 >= n;
  if (!four) threads = std::min(threads, 512);  // the 16-value kernel's bound
  const auto kernel = four ? add_rms_norm_kernel<4> : add_rms_norm_kernel<kNormMaxPerThread>;
  launch(kernel, static_cast<unsigned>(rows), threads, stream,
      x, add, weight, out, n, eps, q.values, q.scales);
}

void gather_add_rms_norm(const float* x, const float* add, const int32_t* rows, int64_t n_rows,
                         const float* weight, float* out, int64_t n, float eps,
                         cudaStream_t stream) {
  if (n_rows == 0) return;
  launch(gather_add_rms_norm_kernel, static_cast<unsigned>(n_rows), 256, stream,
      x, add, rows, weight, out, n, eps);
}

void add_bias(float* x, const float* bias, int64_t n_tokens, int64_t n, cudaStream_t stream) {
  const int64_t total = n_tokens * n;
  if (total == 0) return;
  launch(add_bias_kernel, grid_for(total, 256), 256, stream, x, bias, total, n);
}

void gated_activation(float* a, const float* b, int64_t n, bool gelu, cudaStream_t stream) {
  if (n == 0) return;
  launch(gated_kernel, grid_for(n, 256), 256, stream, a, b, n, gelu);
}

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return;
  launch(softcap_kernel, grid_for(n, 256), 256, stream, x, n, cap);
}

void rope_store_kv(float* q, float* k, const float* v, const int32_t* positions,
                   const int64_t* slots, int64_t n_tokens, int n_heads, const KvLayout& kv,
                   int rot_dims, bool neox, const float* cos_table, const float* sin_table,
                   uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  if (n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_heads + kv.n_kv_heads));
  launch(rope_store_kv_kernel, grid, 64, stream,
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
  launch(attention_chunk_kernel, grid, kAttentionThreads, stream,
      q, tokens, tables, params, kv, reinterpret_cast<const __half*>(k_cache),
      reinterpret_cast<const __half*>(v_cache), max_chunks, scratch,
      max_chunks == 1 ? out : nullptr);
  if (max_chunks == 1) return;
  const dim3 combine(static_cast<unsigned>(n_tokens), static_cast<unsigned>(params.n_heads));
  launch(attention_combine_kernel, combine, kv.head_dim >= 128 ? 128 : 64, stream,
      tokens, params, kv.head_dim, max_chunks, scratch, out);
}

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
  if (rows == 0) return;
  launch(argmax_kernel, static_cast<unsigned>(rows), 1024, stream, x, n, ids);
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
