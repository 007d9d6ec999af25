// Gated DeltaNet: every table's recurrent and chunked kernels against the recurrence computed in
// double precision, the state carried across calls, and the convolution and norms around them
// against double references.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/delta_net.h"
#include "kernels/kernels.h"
#include "random_data.h"

namespace inferd::kernels {
namespace {

using testing::random_floats;

constexpr double kUnit = 0x1p-24;  // float's unit roundoff

// The inputs of one head over n tokens, laid out with strides as a model's buffers are: q and k
// rows of qk_stride (several heads side by side), v rows of v_stride, g and beta every gb_stride.
// q and k are unit vectors (the model's l2 norm), v normal, g uniform in [min_g, 0], beta in
// (0, 1), and the starting state normal with deviation 0.5.
struct HeadInputs {
  int d = 0;
  int64_t n = 0, qk_stride = 0, v_stride = 0, gb_stride = 3, out_stride = 0;
  float scale = 0;
  std::vector<float> q, k, v, g, beta, state;

  HeadInputs(int d_, int64_t n_, float min_g, uint32_t seed) : d(d_), n(n_) {
    qk_stride = 2 * d + 5;
    v_stride = d + 3;
    out_stride = d + 7;
    scale = 1.0f / std::sqrt(float(d));
    q = random_floats(n * qk_stride, seed);
    k = random_floats(n * qk_stride, seed + 1);
    v = random_floats(n * v_stride, seed + 2);
    for (int64_t t = 0; t < n; ++t) {
      for (std::vector<float>* x : {&q, &k}) {
        float* row = x->data() + t * qk_stride;
        double sum = 0;
        for (int i = 0; i < d; ++i) sum += double(row[i]) * row[i];
        for (int i = 0; i < d; ++i) row[i] = float(row[i] / std::sqrt(sum));
      }
    }
    std::mt19937 rng(seed + 3);
    std::uniform_real_distribution<float> decay(min_g, 0.0f), gate(1e-3f, 1.0f);
    g.resize(static_cast<size_t>(n * gb_stride));
    beta.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = decay(rng);
      beta[i] = gate(rng);
    }
    state = random_floats(int64_t{d} * d, seed + 4, 0.5f);
  }
};

// The recurrence of delta_net.h in double, and beside it the error a float computation is
// expected to have, from the rounding of each step (first order, the roundings independent, so
// their root sum of squares; u = 2^-24). For row j and token t with decay e, delta, the row r
// before the token and m = e |r| + |delta| (a bound on every value the token's row operations
// see), the token adds to the row an error of norm about
//   u e |r| (the decay), u sqrt(d) e |r| beta (the dot with k, through delta times the unit k),
//   2 u |delta| (delta's subtraction and product), u m (the update's product and sum),
// while the error the row already had is multiplied by e and by I - beta k k^T (norm <= 1). The
// output's error adds the dot with q, u sqrt(d) m, and its scaling, u |out|. The chunked form
// rounds other sums (over the chunk's tokens, of the same magnitudes), so the tests allow a
// multiple of these estimates.
double root_sum_squares(std::initializer_list<double> x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return std::sqrt(sum);
}

struct Expected {
  std::vector<double> state, out, out_error;  // out, out_error: [n][d]
  std::vector<double> row_error;              // [d] the state rows' error norms
};

void reference(const HeadInputs& in, int64_t t0, int64_t t1, Expected& e) {
  const int d = in.d;
  const double sqrt_d = std::sqrt(double(d));
  for (int64_t t = t0; t < t1; ++t) {
    const float* q = in.q.data() + t * in.qk_stride;
    const float* k = in.k.data() + t * in.qk_stride;
    const float* v = in.v.data() + t * in.v_stride;
    const double decay = std::exp(double(in.g[t * in.gb_stride])), b = in.beta[t * in.gb_stride];
    for (int j = 0; j < d; ++j) {
      double* row = e.state.data() + int64_t{j} * d;
      double sk = 0, norm = 0;
      for (int i = 0; i < d; ++i) {
        norm += row[i] * row[i];
        sk += (row[i] *= decay) * k[i];
      }
      const double delta = (v[j] - sk) * b, before = decay * std::sqrt(norm);
      double sq = 0;
      for (int i = 0; i < d; ++i) sq += (row[i] += delta * k[i]) * q[i];
      const double m = before + std::fabs(delta);
      const double added = kUnit * root_sum_squares({before, sqrt_d * before * b, 2 * delta, m});
      double& err = e.row_error[j];
      err = root_sum_squares({decay * err, added});
      e.out[t * d + j] = in.scale * sq;
      e.out_error[t * d + j] = root_sum_squares(
          {in.scale * err, kUnit * in.scale * sqrt_d * m, kUnit * e.out[t * d + j]});
    }
  }
}

Expected reference(const HeadInputs& in) {
  Expected e;
  e.state.assign(in.state.begin(), in.state.end());
  e.out.resize(static_cast<size_t>(in.n * in.d));
  e.out_error.resize(e.out.size());
  e.row_error.assign(static_cast<size_t>(in.d), 0.0);
  reference(in, 0, in.n, e);
  return e;
}

struct Result {
  std::vector<float> state, out;
};

enum class Form { kRecurrent, kChunked };

const char* name(Form form) {
  return form == Form::kRecurrent ? "recurrent" : "chunked";
}

// Runs one table's kernel over the tokens in calls of the given sizes, the state carried.
Result run(const KernelTable& table, Form form, const HeadInputs& in,
           std::initializer_list<int64_t> calls) {
  Result r{in.state, std::vector<float>(static_cast<size_t>(in.n * in.out_stride), NAN)};
  std::vector<float> scratch(static_cast<size_t>(delta_net_chunked_scratch_floats(in.d)), NAN);
  int64_t t0 = 0;
  for (int64_t n : calls) {
    const float* q = in.q.data() + t0 * in.qk_stride;
    const float* k = in.k.data() + t0 * in.qk_stride;
    const float* v = in.v.data() + t0 * in.v_stride;
    const float* g = in.g.data() + t0 * in.gb_stride;
    const float* beta = in.beta.data() + t0 * in.gb_stride;
    float* out = r.out.data() + t0 * in.out_stride;
    if (form == Form::kRecurrent) {
      table.delta_net.recurrent(r.state.data(), in.d, n, q, k, in.qk_stride, v, in.v_stride, g,
                                beta, in.gb_stride, in.scale, out, in.out_stride);
    } else {
      table.delta_net.chunked(r.state.data(), in.d, n, q, k, in.qk_stride, v, in.v_stride, g, beta,
                              in.gb_stride, in.scale, out, in.out_stride, scratch.data());
    }
    t0 += n;
  }
  return r;
}

// Multiples of the estimates of Expected that a result may be off by. Measured on these inputs,
// the largest error / estimate is 0.77 for the recurrent kernels (every table) and 1.77 for the
// chunked ones (the reference's; 0.86 for the SIMD tables), whose sums over the chunk's tokens
// the estimate does not model; a little over twice those.
double allowance(Form form) {
  return form == Form::kRecurrent ? 2.0 : 4.0;
}

// Every output within allowance x its estimated error, and every state row's error norm within
// allowance x its estimate. The padding between output rows untouched.
void expect_close(const Result& got, const Expected& want, const HeadInputs& in, Form form,
                  const std::string& where) {
  const int d = in.d;
  for (int64_t t = 0; t < in.n; ++t) {
    for (int j = 0; j < d; ++j) {
      const double err = std::fabs(got.out[t * in.out_stride + j] - want.out[t * d + j]);
      ASSERT_LE(err, allowance(form) * want.out_error[t * d + j])
          << where << " out t=" << t << " j=" << j << " got " << got.out[t * in.out_stride + j]
          << " want " << want.out[t * d + j];
    }
    for (int64_t i = d; i < in.out_stride; ++i)
      ASSERT_TRUE(std::isnan(got.out[t * in.out_stride + i]));
  }
  for (int j = 0; j < d; ++j) {
    double err = 0;
    for (int i = 0; i < d; ++i) {
      const double e = got.state[int64_t{j} * d + i] - want.state[int64_t{j} * d + i];
      err += e * e;
    }
    err = std::sqrt(err);
    ASSERT_LE(err, allowance(form) * want.row_error[j]) << where << " state row " << j;
  }
}

std::string describe(const KernelTable& table, Form form, int d, int64_t n, float min_g) {
  return std::string(table.isa) + " " + name(form) + " d=" + std::to_string(d) +
         " n=" + std::to_string(n) + " g>=" + std::to_string(min_g);
}

// Fast decays (g in [-2, 0]: the state forgets within a few tokens) and slow ones (g in
// [-0.05, 0]: rounding errors accumulate over the whole sequence), head sizes with and without a
// masked tail, token counts around the chunk size.
TEST(DeltaNet, MatchesDoublePrecision) {
  for (const KernelTable* table : available_kernels()) {
    for (Form form : {Form::kRecurrent, Form::kChunked}) {
      for (float min_g : {-2.0f, -0.05f}) {
        for (int d : {16, 40, 64, 72, 128}) {
          for (int64_t n : {1, 2, 63, 64, 65, 130}) {
            const HeadInputs in(d, n, min_g, static_cast<uint32_t>(d * 1000 + n));
            ASSERT_NO_FATAL_FAILURE(expect_close(run(*table, form, in, {n}), reference(in), in,
                                                 form, describe(*table, form, d, n, min_g)));
          }
        }
      }
    }
  }
}

// 50 tokens then 80, the state carried, against one call of 130: the recurrent kernels give the
// same bits (nothing depends on where a call starts), the chunked ones (whose chunks then start
// elsewhere) agree with the double recurrence as closely as one call does.
TEST(DeltaNet, StateCarriesAcrossCalls) {
  for (const KernelTable* table : available_kernels()) {
    for (int d : {16, 72, 128}) {
      const HeadInputs in(d, 130, -0.05f, static_cast<uint32_t>(d));
      const Expected want = reference(in);
      const Result one = run(*table, Form::kRecurrent, in, {130});
      const Result two = run(*table, Form::kRecurrent, in, {50, 80});
      ASSERT_EQ(one.state, two.state) << table->isa << " d=" << d;
      for (size_t i = 0; i < one.out.size(); ++i) {
        if (!std::isnan(one.out[i])) {
          ASSERT_EQ(one.out[i], two.out[i]) << table->isa << " i=" << i;
        }
      }
      ASSERT_NO_FATAL_FAILURE(
          expect_close(run(*table, Form::kChunked, in, {50, 80}), want, in, Form::kChunked,
                       std::string(table->isa) + " chunked 50+80 d=" + std::to_string(d)));
    }
  }
}

// n_tokens 0 leaves everything as it is.
TEST(DeltaNet, NoTokensDoNothing) {
  const HeadInputs in(16, 1, -1.0f, 5);
  for (const KernelTable* table : available_kernels()) {
    for (Form form : {Form::kRecurrent, Form::kChunked}) {
      const Result r = run(*table, form, in, {0});
      EXPECT_EQ(r.state, in.state) << table->isa << " " << name(form);
      EXPECT_TRUE(std::isnan(r.out[0]));
    }
  }
}

double silu(double x) {
  return x / (1 + std::exp(-x));
}

// Kernel 4 over 1, 2 and 7 tokens per call, the history carried: every output against the
// convolution of the whole sequence in double, and the history after each call against the
// sequence's last 3 rows. Rows and outputs with strides wider than the channels.
TEST(DeltaNet, CausalConvMatchesDoublePrecision) {
  const int kernel = 4;
  const int64_t channels = 37, x_stride = 41, out_stride = 43, total = 1 + 2 + 7;
  const auto x = random_floats(total * x_stride, 11);
  const auto w = random_floats(channels * kernel, 12, 0.5f);
  const auto start = random_floats((kernel - 1) * channels, 13);
  // The whole window: the starting history, then x.
  std::vector<double> window(static_cast<size_t>((kernel - 1 + total) * channels));
  for (int64_t r = 0; r < kernel - 1; ++r)
    for (int64_t c = 0; c < channels; ++c) window[r * channels + c] = start[r * channels + c];
  for (int64_t t = 0; t < total; ++t)
    for (int64_t c = 0; c < channels; ++c)
      window[(kernel - 1 + t) * channels + c] = x[t * x_stride + c];
  for (const KernelTable* table : available_kernels()) {
    std::vector<float> history = start, out(static_cast<size_t>(total * out_stride));
    int64_t t0 = 0;
    for (int64_t n : {1, 2, 7}) {
      causal_conv1d_silu(history.data(), kernel, channels, x.data() + t0 * x_stride, x_stride, n,
                         w.data(), out.data() + t0 * out_stride, out_stride, *table);
      t0 += n;
      for (int64_t r = 0; r < kernel - 1; ++r) {
        for (int64_t c = 0; c < channels; ++c) {
          ASSERT_EQ(history[r * channels + c], float(window[(t0 + r) * channels + c]))
              << table->isa << " after " << t0 << " tokens, row " << r << " c=" << c;
        }
      }
    }
    for (int64_t t = 0; t < total; ++t) {
      for (int64_t c = 0; c < channels; ++c) {
        double sum = 0, magnitude = 0;
        for (int i = 0; i < kernel; ++i) {
          const double term = w[c * kernel + i] * window[(t + i) * channels + c];
          sum += term;
          magnitude += std::fabs(term);
        }
        // The float sum is within kernel * u * magnitude of the exact one (first order), and
        // silu's slope is below 1.1; silu itself adds a few u relative (exp's 2e-7, the add and
        // the division). Twice those bounds.
        const double want = silu(sum);
        const double tol = kUnit * (2 * 1.1 * kernel * magnitude + 2 * 6 * std::fabs(want));
        ASSERT_NEAR(out[t * out_stride + c], want, tol) << table->isa << " t=" << t << " c=" << c;
      }
    }
  }
}

// Fewer new tokens than history rows: the history shifts by one row.
TEST(DeltaNet, CausalConvShortCallKeepsOlderHistory) {
  const int kernel = 4;
  const int64_t channels = 5;
  std::vector<float> history = random_floats((kernel - 1) * channels, 21);
  const std::vector<float> before = history;
  const auto x = random_floats(channels, 22);
  const auto w = random_floats(channels * kernel, 23);
  std::vector<float> out(static_cast<size_t>(channels));
  causal_conv1d_silu(history.data(), kernel, channels, x.data(), channels, 1, w.data(), out.data(),
                     channels);
  for (int64_t c = 0; c < channels; ++c) {
    EXPECT_EQ(history[c], before[channels + c]);
    EXPECT_EQ(history[channels + c], before[2 * channels + c]);
    EXPECT_EQ(history[2 * channels + c], x[c]);
  }
}

// Rows of odd lengths with a stride: each within 8 u (relative) of x / sqrt(sum(x^2) + eps) in
// double (the double sum, its rounding to float, the add, sqrt, the division and the product are
// one rounding each: 6 u at first order); the padding between rows untouched.
TEST(DeltaNet, L2NormRowsMatchesDoublePrecision) {
  for (int d : {1, 7, 64, 128, 129}) {
    const int64_t rows = 5, stride = d + 3;
    const float eps = 1e-6f;
    auto x = random_floats(rows * stride, static_cast<uint32_t>(d));
    const auto before = x;
    l2_norm_rows(x.data(), rows, d, stride, eps);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int i = 0; i < d; ++i) sum += double(before[r * stride + i]) * before[r * stride + i];
      for (int i = 0; i < d; ++i) {
        const double want = before[r * stride + i] / std::sqrt(sum + eps);
        ASSERT_NEAR(x[r * stride + i], want, 8 * kUnit * std::fabs(want)) << "d=" << d;
      }
      for (int64_t i = d; i < stride; ++i) ASSERT_EQ(x[r * stride + i], before[r * stride + i]);
    }
  }
}

// Against x / sqrt(mean(x^2) + eps) * w * silu(z) in double: the norm's scale is within 6 u as
// above, three products add 3 u and silu 6 u; twice that, relative.
TEST(DeltaNet, GatedRmsNormMatchesDoublePrecision) {
  for (const KernelTable* table : available_kernels()) {
    for (int d : {1, 16, 40, 128, 300}) {
      auto x = random_floats(d, static_cast<uint32_t>(d) + 1);
      const auto before = x;
      const auto z = random_floats(d, static_cast<uint32_t>(d) + 2, 3.0f);
      const auto w = random_floats(d, static_cast<uint32_t>(d) + 3);
      const float eps = 1e-6f;
      gated_rms_norm(x.data(), z.data(), w.data(), d, eps, *table);
      double sum = 0;
      for (float v : before) sum += double(v) * v;
      const double inv = 1 / std::sqrt(sum / d + eps);
      for (int i = 0; i < d; ++i) {
        const double want = before[i] * inv * w[i] * silu(z[i]);
        ASSERT_NEAR(x[i], want, 2 * 15 * kUnit * std::fabs(want))
            << table->isa << " d=" << d << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace inferd::kernels
