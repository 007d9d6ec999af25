// The Gated DeltaNet kernels (delta_net.h) written once over a vector type: x86_avx2/ and
// x86_avx512/ each instantiate them with their own primitives. Include only from files compiled
// with SIMD flags; everything here has internal linkage, so no instantiation leaks into generic
// code or into another ISA's file.
//
// V provides: Vec, Mask, kLanes; kRows (state rows per pass of `recurrent`: 4 or 8);
// kTileRows x kTileVecs (the GEMM register tile); mask(n) (the first n lanes, 1 <= n <= kLanes);
// zero, set1, load, store, load(p, mask) (lanes outside read as 0), store(p, v, mask), add, mul,
// div, fma(a, b, c) = a * b + c, exp; hsum (one vector's sum), hsum8 (eight vectors' sums) and
// transpose8 (an 8 x 8 block of floats).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/delta_net.h"

namespace inferd::kernels {
namespace {
namespace delta_net_simd {

template <class V>
float dot(const float* a, const float* b, int n) {
  typename V::Vec acc = V::zero();
  int i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) acc = V::fma(V::load(a + i), V::load(b + i), acc);
  if (i < n) {
    const typename V::Mask m = V::mask(n - i);
    acc = V::fma(V::load(a + i, m), V::load(b + i, m), acc);
  }
  return V::hsum(acc);
}

// y[i] = y[i] * s for i < n.
template <class V>
void scale_row(float* y, float s, int n) {
  const typename V::Vec sv = V::set1(s);
  int i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(y + i, V::mul(V::load(y + i), sv));
  if (i < n) {
    const typename V::Mask m = V::mask(n - i);
    V::store(y + i, V::mul(V::load(y + i, m), sv), m);
  }
}

// y[i] = a * x[i] + y[i] for i < n.
template <class V>
void axpy(float* y, float a, const float* x, int n) {
  const typename V::Vec av = V::set1(a);
  int i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes)
    V::store(y + i, V::fma(av, V::load(x + i), V::load(y + i)));
  if (i < n) {
    const typename V::Mask m = V::mask(n - i);
    V::store(y + i, V::fma(av, V::load(x + i, m), V::load(y + i, m)), m);
  }
}

// r[i] = beta * (v[i] - decay * r[i]) for i < n.
template <class V>
void residual(float* r, const float* v, float decay, float beta, int n) {
  const typename V::Vec minus_decay = V::set1(-decay), b = V::set1(beta);
  int i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes)
    V::store(r + i, V::mul(b, V::fma(minus_decay, V::load(r + i), V::load(v + i))));
  if (i < n) {
    const typename V::Mask m = V::mask(n - i);
    V::store(r + i, V::mul(b, V::fma(minus_decay, V::load(r + i, m), V::load(v + i, m))), m);
  }
}

template <class V>
void silu(float* x, int64_t n) {
  const typename V::Vec one = V::set1(1.0f), zero = V::zero();
  for (int64_t i = 0; i < n; i += V::kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(V::kLanes, n - i));
    const typename V::Mask m = V::mask(lanes);
    const typename V::Vec v = V::load(x + i, m);
    // x / (1 + exp(-x)); exp gives 0 for -x below -87, where the true value is below 1e-38.
    V::store(x + i, V::div(v, V::add(one, V::exp(V::sub(zero, v)))), m);
  }
}

// --- recurrent --------------------------------------------------------------------------------

// R consecutive rows of the state for one token, in two passes over each row: the first takes
// the rows' dots with k and q (their horizontal sums together), the second writes
// row = decay * row + delta * k. With the old row's dots a = row.k and b = row.q:
//   delta = (v - decay * a) * beta,  out = scale * (decay * b + delta * (k.q)),
// which is the updated row's dot with q. The rows (R * d floats) are still in L1 for the second
// pass.
struct TokenArgs {
  const float* q;
  const float* k;
  const float* v;
  float decay, beta, kq, scale;
  float* out;
};

// Inlined early, before GCC decides which arrays can live in registers: an array of
// accumulators that a lambda captures stays in memory unless the lambda is inlined by then.
#define INFERD_INLINE __attribute__((always_inline))

// f(std::integral_constant<int, r>) for r = 0 .. R-1, unrolled at compile time: an array indexed
// so stays in registers (GCC keeps one indexed by a loop variable in memory).
template <class F, int... r>
INFERD_INLINE inline void for_each_index(F& f, std::integer_sequence<int, r...>) {
  (f(std::integral_constant<int, r>{}), ...);
}

template <int R, class F>
INFERD_INLINE inline void for_each_row(F&& f) {
  for_each_index(f, std::make_integer_sequence<int, R>{});
}

template <class V, int R>
void update_rows(float* rows, int d, int j0, const TokenArgs& a) {
  using Vec = typename V::Vec;
  using Mask = typename V::Mask;
  Vec acc[2 * R] = {};  // [0, R): with k, [R, 2R): with q
  const auto dots = [&](int i, auto load) INFERD_INLINE {
    const Vec kv = load(a.k + i), qv = load(a.q + i);
    for_each_row<R>([&](auto r) INFERD_INLINE {
      Vec x = load(rows + r * d + i);
      // One load for both products: GCC would otherwise fold the load into each of them.
      asm("" : "+v"(x));
      acc[r] = V::fma(x, kv, acc[r]);
      acc[R + r] = V::fma(x, qv, acc[R + r]);
    });
  };
  const auto full = [](const float* p) INFERD_INLINE { return V::load(p); };
  const int tail = d % V::kLanes, body = d - tail;
  const Mask m = V::mask(tail == 0 ? V::kLanes : tail);
  const auto part = [m](const float* p) INFERD_INLINE { return V::load(p, m); };
  for (int i = 0; i < body; i += V::kLanes) dots(i, full);
  if (tail > 0) dots(body, part);

  float sums[2 * R];
  if constexpr (2 * R % 8 == 0) {
    for_each_row<2 * R / 8>([&](auto b) INFERD_INLINE { V::hsum8(acc + 8 * b, sums + 8 * b); });
  } else {
    for_each_row<2 * R>([&](auto r) INFERD_INLINE { sums[r] = V::hsum(acc[r]); });
  }
  Vec delta[R];
  for_each_row<R>([&](auto r) INFERD_INLINE {
    const float dl = (a.v[j0 + r] - a.decay * sums[r]) * a.beta;
    a.out[j0 + r] = a.scale * (a.decay * sums[R + r] + dl * a.kq);
    delta[r] = V::set1(dl);
  });
  const Vec decay = V::set1(a.decay);
  const auto update = [&](int i, auto load, auto store) INFERD_INLINE {
    const Vec kv = load(a.k + i);
    for_each_row<R>([&](auto r) INFERD_INLINE {
      float* p = rows + r * d + i;
      store(p, V::fma(delta[r], kv, V::mul(load(p), decay)));
    });
  };
  for (int i = 0; i < body; i += V::kLanes)
    update(i, full, [](float* p, Vec v) INFERD_INLINE { V::store(p, v); });
  if (tail > 0) update(body, part, [m](float* p, Vec v) INFERD_INLINE { V::store(p, v, m); });
}

template <class V>
void recurrent(float* state, int d, int64_t n_tokens, const float* q, const float* k,
               int64_t qk_stride, const float* v, int64_t v_stride, const float* g,
               const float* beta, int64_t gb_stride, float scale, float* out, int64_t out_stride) {
  constexpr int R = V::kRows;
  for (int64_t t = 0; t < n_tokens; ++t) {
    TokenArgs a{};
    a.q = q + t * qk_stride;
    a.k = k + t * qk_stride;
    a.v = v + t * v_stride;
    a.decay = std::exp(g[t * gb_stride]);
    a.beta = beta[t * gb_stride];
    a.kq = dot<V>(a.k, a.q, d);
    a.scale = scale;
    a.out = out + t * out_stride;
    int j = 0;
    for (; j + R <= d; j += R) update_rows<V, R>(state + int64_t{j} * d, d, j, a);
    for (; j < d; ++j) update_rows<V, 1>(state + int64_t{j} * d, d, j, a);
  }
}

// --- chunked ----------------------------------------------------------------------------------

// C[m][n] = c_scale * C[m][n] + sum_p A(m, p) B[p][n] for m < rows, n < cols: register tiles of
// kTileRows rows x kTileVecs vectors, A broadcast one value at a time, B and C rows contiguous.
struct Gemm {
  const float* a;
  int64_t a_row, a_col;  // A(m, p) = a[m * a_row + p * a_col]
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int rows, cols, depth;
  float c_scale = 0.0f;  // 0: C is written, not read
  bool a_lower = false;  // A(m, p) = 0 for p > m: a tile's sum stops after its last row
  bool c_lower = false;  // only C[m][n] with n <= m is wanted: vectors wholly above are skipped
};

template <class V, int MR, int NV, bool kMasked>
void gemm_tile(const Gemm& g, int m0, int n0, int p_end, typename V::Mask last) {
  using Vec = typename V::Vec;
  constexpr int W = V::kLanes;
  const auto load_b = [&](const float* p, int vec) {
    return kMasked && vec == NV - 1 ? V::load(p, last) : V::load(p);
  };
  Vec acc[MR][NV];
  for (int m = 0; m < MR; ++m) {
    for (int v = 0; v < NV; ++v) {
      acc[m][v] = g.c_scale == 0.0f
                      ? V::zero()
                      : V::mul(V::set1(g.c_scale), load_b(g.c + (m0 + m) * g.ldc + n0 + v * W, v));
    }
  }
  const float* a = g.a + m0 * g.a_row;
  for (int p = 0; p < p_end; ++p) {
    Vec b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load_b(g.b + p * g.ldb + n0 + v * W, v);
    for (int m = 0; m < MR; ++m) {
      const Vec av = V::set1(a[m * g.a_row + p * g.a_col]);
      for (int v = 0; v < NV; ++v) acc[m][v] = V::fma(av, b[v], acc[m][v]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    float* c = g.c + (m0 + m) * g.ldc + n0;
    for (int v = 0; v < NV; ++v) {
      if (kMasked && v == NV - 1) {
        V::store(c + v * W, acc[m][v], last);
      } else {
        V::store(c + v * W, acc[m][v]);
      }
    }
  }
}

template <class V>
using GemmTileFn = void (*)(const Gemm&, int, int, int, typename V::Mask);

// Every tile shape, at ((rows - 1) * kTileVecs + vecs - 1) * 2 + masked.
template <class V, size_t... I>
constexpr std::array<GemmTileFn<V>, sizeof...(I)> gemm_tiles(std::index_sequence<I...>) {
  return {&gemm_tile<V, static_cast<int>(I / (2 * V::kTileVecs)) + 1,
                     static_cast<int>(I / 2 % V::kTileVecs) + 1, I % 2 == 1>...};
}

template <class V>
void gemm(const Gemm& g) {
  constexpr int W = V::kLanes, MR = V::kTileRows, NV = V::kTileVecs;
  static constexpr auto tiles = gemm_tiles<V>(std::make_index_sequence<MR * NV * 2>());
  for (int n0 = 0; n0 < g.cols; n0 += NV * W) {  // a panel of B, reused by every row tile
    const int cols = std::min(NV * W, g.cols - n0);
    const int vecs = (cols + W - 1) / W, last_lanes = cols - (vecs - 1) * W;
    const typename V::Mask last = V::mask(last_lanes);
    for (int m0 = 0; m0 < g.rows; m0 += MR) {
      const int rows = std::min(MR, g.rows - m0);
      const int p_end = g.a_lower ? std::min(g.depth, m0 + rows) : g.depth;
      if (!g.c_lower || n0 + cols <= m0 + rows) {
        tiles[static_cast<size_t>(((rows - 1) * NV + vecs - 1) * 2 + (last_lanes < W))](
            g, m0, n0, p_end, last);
      } else if (n0 < m0 + rows) {  // the vectors up to the tile's last row's column
        const int v = (m0 + rows - n0 + W - 1) / W;
        const bool masked = v == vecs && last_lanes < W;
        tiles[static_cast<size_t>(((rows - 1) * NV + v - 1) * 2 + masked)](g, m0, n0, p_end, last);
      }
    }
  }
}

// dst[i * ldd + j] = src[j * lds + i] for j < rows, i < cols: 8 x 8 blocks in registers, the
// edges one value at a time.
template <class V>
void transpose(const float* src, int64_t lds, int rows, int cols, float* dst, int64_t ldd) {
  const int rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int j = 0; j < rows8; j += 8) {
    for (int i = 0; i < cols8; i += 8)
      V::transpose8(src + j * lds + i, lds, dst + i * ldd + j, ldd);
  }
  for (int j = 0; j < rows; ++j) {
    for (int i = j < rows8 ? cols8 : 0; i < cols; ++i) dst[i * ldd + j] = src[j * lds + i];
  }
}

// Per chunk of c tokens (S0 the state at its start, G_t the sum of the chunk's g up to token t,
// K, Q the chunk's keys and queries as rows):
//   A[t][s] = beta_t exp(G_t - G_s) (k_t . k_s) for s < t, and T = (I + A)^-1 (unit lower);
//   U = T R with R_t = beta_t (v_t - exp(G_t) S0^T k_t): the tokens' deltas;
//   out_t = scale (exp(G_t) S0^T q_t + sum_{s <= t} exp(G_t - G_s) (q_t . k_s) u_s);
//   S = exp(G_last) S0 + sum_s exp(G_last - G_s) k_s u_s^T.
// The state is kept transposed for the whole call (st[i][j] = S[i][j], a row per key dimension)
// so that every product is C += broadcast(A) * rows of B.
struct ChunkArgs {
  const float* q;
  const float* k;
  int64_t qk_stride;
  const float* v;
  int64_t v_stride;
  const float* g;
  const float* beta;
  int64_t gb_stride;
  float scale;
  float* out;
  int64_t out_stride;
};

// gram rows [0, c): A, rows [c, 2c) (at gram + C * C): P[t][s] = scale exp(G_t - G_s) (q_t . k_s)
// for s <= t; both zero above their diagonals. Then inverse = (I + A)^-1.
template <class V>
void decay_and_solve(const double* cum, const float* beta, int64_t gb_stride, float scale, int c,
                     float* gram, float* inverse) {
  constexpr int C = kDeltaNetChunk;
  float* a = gram;
  float* p = gram + C * C;
  for (int t = 0; t < c; ++t) {
    float decay[C];  // exp(G_t - G_s), s <= t
    for (int s = 0; s <= t; ++s) decay[s] = static_cast<float>(cum[t] - cum[s]);
    for (int s = 0; s <= t; s += V::kLanes) {
      const typename V::Mask m = V::mask(std::min(V::kLanes, t + 1 - s));
      V::store(decay + s, V::exp(V::load(decay + s, m)), m);
    }
    const float b = beta[t * gb_stride];
    for (int s = 0; s < t; ++s) a[t * C + s] *= b * decay[s];
    for (int s = 0; s <= t; ++s) p[t * C + s] *= scale * decay[s];
    for (int s = t; s < c; ++s) a[t * C + s] = 0.0f;
    for (int s = t + 1; s < c; ++s) p[t * C + s] = 0.0f;
  }
  // Row t of the inverse: e_t - sum_{s < t} A[t][s] (row s), rows s nonzero in [0, s] only.
  for (int t = 0; t < c; ++t) {
    float* row = inverse + t * C;
    for (int s = 0; s < c; ++s) row[s] = s == t ? 1.0f : 0.0f;
    for (int s = 0; s < t; ++s) axpy<V>(row, -a[t * C + s], inverse + s * C, s + 1);
  }
}

template <class V>
void chunk(float* st, int d, int64_t t0, int c, const ChunkArgs& x, const DeltaNetScratch& at,
           float* scratch) {
  constexpr int C = kDeltaNetChunk;
  float* kq = scratch + at.kq;              // [2c][d] keys, then queries
  float* kt = scratch + at.k_t;             // [d][C] keys transposed
  float* kq_state = scratch + at.kq_state;  // [2c][d] K S0, then Q S0
  float* u = scratch + at.u;                // [c][d]
  float* gram = scratch + at.gram;          // [2][C][C]
  float* inverse = scratch + at.inverse;    // [C][C]
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  for (int t = 0; t < c; ++t) {
    std::memcpy(kq + int64_t{t} * d, x.k + (t0 + t) * x.qk_stride, row_bytes);
    std::memcpy(kq + int64_t{c + t} * d, x.q + (t0 + t) * x.qk_stride, row_bytes);
  }
  transpose<V>(kq, d, c, d, kt, C);
  double cum[C];  // in double: exp(G_t - G_s) must keep the digits of a small difference
  double sum = 0;
  for (int t = 0; t < c; ++t) cum[t] = sum += x.g[(t0 + t) * x.gb_stride];

  gemm<V>({kq, d, 1, kt, C, gram, C, c, c, d, 0.0f, false, true});
  gemm<V>({kq + int64_t{c} * d, d, 1, kt, C, gram + C * C, C, c, c, d, 0.0f, false, true});
  decay_and_solve<V>(cum, x.beta + t0 * x.gb_stride, x.gb_stride, x.scale, c, gram, inverse);

  gemm<V>({kq, d, 1, st, d, kq_state, d, 2 * c, d, d, 0.0f, false, false});
  for (int t = 0; t < c; ++t) {  // R_t = beta_t (v_t - exp(G_t) S0^T k_t), over K S0
    residual<V>(kq_state + int64_t{t} * d, x.v + (t0 + t) * x.v_stride,
                std::exp(static_cast<float>(cum[t])), x.beta[(t0 + t) * x.gb_stride], d);
  }
  gemm<V>({inverse, C, 1, kq_state, d, u, d, c, d, c, 0.0f, true, false});

  float* out = x.out + t0 * x.out_stride;
  for (int t = 0; t < c; ++t) {
    float* o = out + t * x.out_stride;
    std::memcpy(o, kq_state + int64_t{c + t} * d, row_bytes);
    scale_row<V>(o, x.scale * std::exp(static_cast<float>(cum[t])), d);
  }
  gemm<V>({gram + C * C, C, 1, u, d, out, x.out_stride, c, d, c, 1.0f, true, false});

  float to_end[C];  // exp(G_last - G_s)
  for (int s = 0; s < c; ++s) to_end[s] = std::exp(static_cast<float>(cum[c - 1] - cum[s]));
  for (int i = 0; i < d; ++i) {
    for (int s = 0; s < c; ++s) kt[i * C + s] *= to_end[s];
  }
  const float last = std::exp(static_cast<float>(cum[c - 1]));
  gemm<V>({kt, C, 1, u, d, st, d, d, d, c, last, false, false});
}

template <class V>
void chunked(float* state, int d, int64_t n_tokens, const float* q, const float* k,
             int64_t qk_stride, const float* v, int64_t v_stride, const float* g, const float* beta,
             int64_t gb_stride, float scale, float* out, int64_t out_stride, float* scratch) {
  if (n_tokens <= 0) return;
  const DeltaNetScratch at = delta_net_scratch_layout(d);
  float* st = scratch + at.state_t;
  transpose<V>(state, d, d, d, st, d);
  const ChunkArgs x{q, k, qk_stride, v, v_stride, g, beta, gb_stride, scale, out, out_stride};
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kDeltaNetChunk) {
    const int c = static_cast<int>(std::min<int64_t>(kDeltaNetChunk, n_tokens - t0));
    chunk<V>(st, d, t0, c, x, at, scratch);
  }
  transpose<V>(st, d, d, d, state, d);
}

}  // namespace delta_net_simd
}  // namespace
}  // namespace inferd::kernels

#undef INFERD_INLINE
