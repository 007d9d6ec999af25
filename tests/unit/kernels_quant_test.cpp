// Quantized-format kernels: the reference against plain float math, and every ISA table this
// CPU has against the reference, on random data of odd sizes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/ref/quant_ref.h"
#include "random_data.h"

namespace inferd::kernels {
namespace {

using testing::random_floats;

size_t row_size(DType type, int64_t n) {
  return static_cast<size_t>(*row_bytes(type, n));
}

double float_dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

struct Case {
  DType weight;
  const char* name;
};
const Case kWeightTypes[] = {{DType::Q4_0, "Q4_0"}, {DType::Q4_1, "Q4_1"}, {DType::Q8_0, "Q8_0"},
                             {DType::F16, "F16"},   {DType::BF16, "BF16"}, {DType::F32, "F32"}};

// Reference quantizer for building test weights of each type.
std::vector<uint8_t> make_weights(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_size(type, static_cast<int64_t>(x.size())));
  const int64_t n = static_cast<int64_t>(x.size());
  switch (type) {
    case DType::Q4_0:
      ref::quantize_row_q4_0(x.data(), out.data(), n);
      break;
    case DType::Q4_1:
      ref::quantize_row_q4_1(x.data(), out.data(), n);
      break;
    case DType::Q8_0:
      ref::quantize_row_q8_0(x.data(), out.data(), n);
      break;
    case DType::F16:
      ref::quantize_row_f16(x.data(), out.data(), n);
      break;
    case DType::BF16:
      ref::quantize_row_bf16(x.data(), out.data(), n);
      break;
    default:
      ref::quantize_row_f32(x.data(), out.data(), n);
      break;
  }
  return out;
}

// Relative error a format may add to a dot product of normal random vectors.
double tolerance(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
      return 0.15;
    case DType::Q8_0:
      return 0.02;
    case DType::BF16:
      return 0.02;
    case DType::F16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

TEST(KernelsRef, DequantizeRoundTripIsClose) {
  const auto& ref = reference_kernels();
  for (const Case& c : kWeightTypes) {
    const int64_t n = 32 * 7;
    auto x = random_floats(n, 3);
    auto w = make_weights(c.weight, x);
    std::vector<float> back(static_cast<size_t>(n));
    ref.for_weight(c.weight)->dequantize(w.data(), back.data(), n);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += std::pow(back[i] - x[i], 2);
      norm += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), tolerance(c.weight)) << c.name;
  }
}

TEST(KernelsRef, DotMatchesFloatMath) {
  const auto& ref = reference_kernels();
  for (const Case& c : kWeightTypes) {
    for (int64_t blocks : {1, 3, 17, 48}) {
      const int64_t n = 32 * blocks;
      auto w_f = random_floats(n, 11 + static_cast<uint32_t>(blocks));
      auto a_f = random_floats(n, 99 + static_cast<uint32_t>(blocks));
      auto w = make_weights(c.weight, w_f);
      const WeightKernels& k = *ref.for_weight(c.weight);
      std::vector<uint8_t> a(row_size(k.activation_type, n));
      k.quantize_activation(a_f.data(), a.data(), n);
      double expected = float_dot(w_f, a_f);
      double got = k.dot(n, w.data(), a.data());
      EXPECT_NEAR(got, expected, tolerance(c.weight) * std::sqrt(double(n)) + 1e-4)
          << c.name << " n=" << n;
    }
  }
}

TEST(KernelsRef, Q4_1FoldsTheMinimumThroughQ8_1Sum) {
  // A constant row: q = 0 everywhere, so the whole value comes from m * s.
  std::vector<float> w_f(32, 0.75f), a_f(32, 0.0f);
  for (int i = 0; i < 32; ++i) a_f[i] = float(i) / 31.0f;
  auto w = make_weights(DType::Q4_1, w_f);
  std::vector<uint8_t> a(row_size(DType::Q8_1, 32));
  ref::quantize_row_q8_1(a_f.data(), a.data(), 32);
  EXPECT_NEAR(ref::dot_q4_1_q8_1(32, w.data(), a.data()), 0.75 * 16.0, 0.02);
}

// Every other ISA against the reference, bit-for-bit on integer block sums up to float
// rounding; float formats within a few ulps of a long sum.
TEST(KernelsIsa, EveryTableMatchesReference) {
  const auto& ref = reference_kernels();
  for (const KernelTable* table : available_kernels()) {
    for (const Case& c : kWeightTypes) {
      const WeightKernels* k = table->for_weight(c.weight);
      ASSERT_NE(k, nullptr) << table->isa << " " << c.name;
      const WeightKernels& r = *ref.for_weight(c.weight);
      ASSERT_EQ(k->activation_type, r.activation_type);
      for (int64_t n : {32, 96, 544, 1536, 2080}) {
        auto w = make_weights(c.weight, random_floats(n, 5 + static_cast<uint32_t>(n)));
        auto a_f = random_floats(n, 7 + static_cast<uint32_t>(n), 3.0f);
        std::vector<uint8_t> a(row_size(k->activation_type, n)), a_ref(a.size());
        k->quantize_activation(a_f.data(), a.data(), n);
        r.quantize_activation(a_f.data(), a_ref.data(), n);
        EXPECT_EQ(a, a_ref) << table->isa << " " << c.name << " activation n=" << n;
        float got = k->dot(n, w.data(), a_ref.data());
        float want = r.dot(n, w.data(), a_ref.data());
        EXPECT_NEAR(got, want, 1e-4 * (std::fabs(want) + std::sqrt(double(n))))
            << table->isa << " " << c.name << " dot n=" << n;
        std::vector<float> out(static_cast<size_t>(n)), out_ref(out.size());
        k->dequantize(w.data(), out.data(), n);
        r.dequantize(w.data(), out_ref.data(), n);
        EXPECT_EQ(out, out_ref) << table->isa << " " << c.name << " dequantize n=" << n;
      }
    }
  }
}

// bf16 rounding, bit for bit: ties to even both ways, values that round up into the next
// exponent or to inf, denormals (kept, not flushed), NaN (kept quiet), signed zero, and lengths
// that leave a partial vector.
TEST(KernelsIsa, Bf16ConversionMatchesReferenceOnEdgeValues) {
  const float edges[] = {1.0f + 1.0f / 256,                  // a tie: rounds down to even
                         1.0f + 3.0f / 256,                  // a tie: rounds up to even
                         std::bit_cast<float>(0x3F7FFFFFu),  // rounds up to 1.0
                         std::numeric_limits<float>::max(),  // rounds to inf
                         std::numeric_limits<float>::denorm_min(),
                         std::bit_cast<float>(0x0000C000u),  // a denormal that rounds up
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(),
                         std::bit_cast<float>(0x7F800001u),  // a signalling NaN
                         -0.0f,
                         -3.5e-39f};
  const auto& ref = reference_kernels().bf16;
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 12, 17, 40}) {
      auto x = random_floats(n, 90 + static_cast<uint32_t>(n), 1e3f);
      for (int64_t i = 0; i < n && i < 12; ++i) x[static_cast<size_t>(i)] = edges[i];
      std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xABCD), want(got);
      table->bf16.quantize_activation(x.data(), got.data(), n);
      ref.quantize_activation(x.data(), want.data(), n);
      EXPECT_EQ(got, want) << table->isa << " n=" << n;  // the extra last value untouched
    }
  }
}

// The first index of the largest value, ties included, at every length around the vector width.
TEST(KernelsIsa, ArgmaxMatchesReference) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 49152}) {
      auto x = random_floats(n, 40 + static_cast<uint32_t>(n), 5.0f);
      ASSERT_EQ(table->argmax(x.data(), n), reference_kernels().argmax(x.data(), n))
          << table->isa << " n=" << n;
      // The largest value twice, then everywhere: the first one wins.
      const float top = 100.0f;
      x[static_cast<size_t>(n - 1)] = top;
      x[static_cast<size_t>(n / 2)] = top;
      EXPECT_EQ(table->argmax(x.data(), n), n / 2) << table->isa << " n=" << n;
      std::fill(x.begin(), x.end(), -3.0f);
      EXPECT_EQ(table->argmax(x.data(), n), 0) << table->isa << " n=" << n;
    }
  }
}

// Constrained decoding's mask: every forbidden lane -inf, every allowed one untouched, at
// lengths around the word and vector widths and a 262K vocabulary.
TEST(KernelsIsa, MaskLogitsMatchesReference) {
  std::mt19937 rng(17);
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 31, 32, 33, 47, 64, 100, 262144 + 5}) {
      std::vector<uint32_t> allowed(static_cast<size_t>((n + 31) / 32));
      for (size_t w = 0; w < allowed.size(); ++w) {
        // Whole words allowed or forbidden (the kernels' shortcuts) between random ones.
        allowed[w] = w % 5 == 0 ? ~0u : w % 5 == 1 ? 0u : static_cast<uint32_t>(rng());
      }
      const auto x = random_floats(n, 60 + static_cast<uint32_t>(n), 5.0f);
      auto want = x, got = x;
      reference_kernels().mask_logits(allowed.data(), want.data(), n);
      table->mask_logits(allowed.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = ((allowed[static_cast<size_t>(i / 32)] >> (i % 32)) & 1u) != 0;
        ASSERT_EQ(want[static_cast<size_t>(i)],
                  keep ? x[static_cast<size_t>(i)] : -std::numeric_limits<float>::infinity())
            << "reference, n=" << n << " i=" << i;
        ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
            << table->isa << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(KernelsIsa, SiluMulMatchesReference) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 8, 29, 1536}) {
      auto a = random_floats(n, 21 + static_cast<uint32_t>(n), 6.0f);
      a[0] = -120.0f;  // far below where exp(-x) overflows in the formula's denominator
      const auto b = random_floats(n, 22 + static_cast<uint32_t>(n));
      std::vector<float> got = a, want = a;
      table->silu_mul(got.data(), b.data(), n);
      reference_kernels().silu_mul(want.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6 * (std::fabs(want[i]) + 1e-6))
            << table->isa << " i=" << i;
    }
  }
}

// LoRA's up projection (KernelTable::lora_up): every table gives the reference's bits (the same
// fused multiply-adds in the same order) for odd sizes, rows that are not contiguous, more rows
// than a register block holds and B's rows longer than the outputs (a slice); the reference is
// the definition within float rounding.
TEST(KernelsIsa, LoraUpMatchesReferenceBitForBit) {
  for (const int64_t n : {1, 3, 8, 11}) {
    for (const int64_t rank : {1, 5, 8, 64}) {
      for (const int64_t out : {1, 7, 16, 33, 100}) {
        const auto seed = static_cast<uint32_t>(n * 10007 + rank * 101 + out);
        const int64_t ldb = out + (seed % 2 == 0 ? 0 : 5);
        const auto low = random_floats(n * rank, seed);
        const auto bt = random_floats(rank * ldb, seed + 1);
        const auto start = random_floats(n * (out + 3), seed + 2);  // rows 3 values apart
        const auto rows_of = [&](std::vector<float>& y) {
          std::vector<float*> rows;
          for (int64_t t = 0; t < n; ++t) rows.push_back(y.data() + t * (out + 3));
          return rows;
        };
        std::vector<float> want = start;
        reference_kernels().lora_up(n, rank, out, ldb, low.data(), bt.data(), rows_of(want).data());
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t o = 0; o < out; ++o) {
            double exact = start[static_cast<size_t>(t * (out + 3) + o)];
            double size = std::fabs(exact);
            for (int64_t j = 0; j < rank; ++j) {
              const double term = double(low[static_cast<size_t>(t * rank + j)]) *
                                  double(bt[static_cast<size_t>(j * ldb + o)]);
              exact += term;
              size += std::fabs(term);
            }
            ASSERT_NEAR(want[static_cast<size_t>(t * (out + 3) + o)], exact, 1e-6 * size)
                << "reference n=" << n << " rank=" << rank << " out=" << out;
          }
          // The gap between rows is left alone.
          for (int64_t g = out; g < out + 3; ++g)
            ASSERT_EQ(want[static_cast<size_t>(t * (out + 3) + g)],
                      start[static_cast<size_t>(t * (out + 3) + g)]);
        }
        for (const KernelTable* table : available_kernels()) {
          std::vector<float> got = start;
          table->lora_up(n, rank, out, ldb, low.data(), bt.data(), rows_of(got).data());
          ASSERT_EQ(got, want) << table->isa << " n=" << n << " rank=" << rank << " out=" << out;
        }
      }
    }
  }
}

// GELU's tanh form in double: the definition every table's sigmoid form must meet.
double gelu_tanh_exact(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

TEST(KernelsIsa, GeluMulMatchesReferenceAndDefinition) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 8, 15, 17, 29, 1536}) {
      auto a = random_floats(n, 31 + static_cast<uint32_t>(n), 6.0f);
      a[0] = -120.0f;                         // exp(-2u) far past float's range: the product is -0
      if (n > 2) a[1] = 45.0f, a[2] = -9.5f;  // the identity side; a tail of 1e-30
      const auto b = random_floats(n, 32 + static_cast<uint32_t>(n));
      std::vector<float> got = a, want = a;
      table->gelu_mul(got.data(), b.data(), n);
      reference_kernels().gelu_mul(want.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const double exact = gelu_tanh_exact(a[k]) * b[k];
        // Far left exp(-2u) magnifies u's rounding (|2u| ulps): relative error grows with
        // |a|^3 there, while the value falls faster; so a small part of |a b| bounds it too.
        const double slack = 1e-9 * std::fabs(double(a[k]) * b[k]);
        ASSERT_NEAR(want[k], exact, 4e-6 * std::fabs(exact) + slack) << "ref a=" << a[k];
        ASSERT_NEAR(got[k], want[k], 8e-6 * std::fabs(want[k]) + slack)
            << table->isa << " n=" << n << " a=" << a[k];
      }
    }
  }
}

TEST(KernelsIsa, SwigluOaiMatchesReference) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // gpt-oss's
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 8, 15, 17, 29, 2880}) {
      auto g = random_floats(n, 51 + static_cast<uint32_t>(n), 6.0f);
      auto u = random_floats(n, 52 + static_cast<uint32_t>(n), 6.0f);
      g[0] = -80.0f;  // exp(-alpha x) past float's range: the product is -0
      if (n > 3) g[1] = 9.0f, u[2] = -12.0f, u[3] = 7.5f;  // both clamps
      if (n > 4) g[4] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> got = g, want = g;
      table->swiglu_oai(got.data(), u.data(), n, kAlpha, kLimit);
      reference_kernels().swiglu_oai(want.data(), u.data(), n, kAlpha, kLimit);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        if (std::isnan(g[k])) {
          ASSERT_TRUE(std::isnan(want[k]) && std::isnan(got[k])) << table->isa;
          continue;
        }
        // Against the definition in double, and against the reference.
        const double x = std::min<double>(g[k], kLimit);
        const double y = std::clamp<double>(u[k], -kLimit, kLimit);
        const double exact = x / (1.0 + std::exp(-double(kAlpha) * x)) * (y + 1.0);
        const double slack = 1e-9 * std::fabs(x * (y + 1.0));
        ASSERT_NEAR(want[k], exact, 2e-6 * std::fabs(exact) + slack) << "ref g=" << g[k];
        ASSERT_NEAR(got[k], want[k], 4e-6 * std::fabs(want[k]) + slack)
            << table->isa << " n=" << n << " g=" << g[k] << " u=" << u[k];
      }
    }
  }
}

TEST(KernelsIsa, SoftcapMatchesReference) {
  for (const KernelTable* table : available_kernels()) {
    for (int64_t n : {1, 7, 8, 15, 17, 29, 1536}) {
      auto x = random_floats(n, 41 + static_cast<uint32_t>(n), 120.0f);
      x[0] = 1e-3f;  // tanh's small-argument side, both sides of its 1/4 switch
      if (n > 4)
        x[1] = -7.4f, x[2] = 7.6f, x[3] = 2000.0f, x[4] = -std::numeric_limits<float>::infinity();
      if (n > 5) x[5] = std::numeric_limits<float>::quiet_NaN();
      const float cap = 30.0f;
      std::vector<float> got = x, want = x;
      table->softcap(got.data(), n, 1.0f / cap, cap);
      reference_kernels().softcap(want.data(), n, 1.0f / cap, cap);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        if (std::isnan(x[k])) {
          ASSERT_TRUE(std::isnan(got[k])) << table->isa;
          continue;
        }
        ASSERT_LE(std::fabs(got[k]), cap) << table->isa << " x=" << x[k];
        ASSERT_NEAR(got[k], want[k], 1e-6 * std::fabs(want[k]) + 1e-37)
            << table->isa << " n=" << n << " x=" << x[k];
      }
    }
  }
}

TEST(KernelsIsa, ForcedIsaMustExist) {
  EXPECT_EQ(reference_kernels().isa, "ref");
  EXPECT_EQ(available_kernels().front()->isa, "ref");
  EXPECT_EQ(reference_kernels().for_weight(DType::TQ1_0), nullptr);
}

}  // namespace
}  // namespace inferd::kernels
