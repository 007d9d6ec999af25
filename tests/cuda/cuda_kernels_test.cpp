// The CUDA kernels (src/cuda/kernels.cuh) against the CPU's reference on random data and odd
// sizes. Needs a CUDA device: without one the binary exits 77 and CTest counts it skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device_memory.h"
#include "cuda/kernels.cuh"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "tensor/half.h"

namespace inferd::cuda {
namespace {

std::mt19937& rng() {
  static std::mt19937 g(12345);
  return g;
}

std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

// With kWeightPadding zero bytes after the data, as the decoder uploads weights.
template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T) + kWeightPadding);
  check(cudaMemset(b.get(), 0, b.bytes()), "clear");
  check(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return b;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  check(cudaDeviceSynchronize(), "kernel");
  check(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return v;
}

// A buffer filled with NaN bytes, so an element a kernel fails to write shows.
DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer b(bytes);
  check(cudaMemset(b.get(), 0xFF, bytes), "poison");
  return b;
}

DType host_type(WeightType t) {
  switch (t) {
    case WeightType::F32: return DType::F32;
    case WeightType::F16: return DType::F16;
    case WeightType::BF16: return DType::BF16;
    case WeightType::Q8_0: return DType::Q8_0;
    case WeightType::Q4_K: return DType::Q4_K;
    case WeightType::Q6_K: return DType::Q6_K;
  }
  return DType::F32;
}

const char* type_name(WeightType t) {
  switch (t) {
    case WeightType::F32: return "F32";
    case WeightType::F16: return "F16";
    case WeightType::BF16: return "BF16";
    case WeightType::Q8_0: return "Q8_0";
    case WeightType::Q4_K: return "Q4_K";
    case WeightType::Q6_K: return "Q6_K";
  }
  return "?";
}

// A random matrix in `type`: random bytes with finite, small fp16 scales for the block types,
// normal values for the float types.
struct HostMatrix {
  WeightType type;
  int64_t rows, cols;
  size_t row_bytes;
  std::vector<uint8_t> bytes;

  kernels::WeightMatrix cpu() const {
    return {host_type(type), rows, cols, row_bytes, bytes.data(), nullptr};
  }
  // Row r as floats, by the CPU's dequantization (the reference).
  std::vector<float> row(int64_t r) const {
    std::vector<float> out(static_cast<size_t>(cols));
    kernels::dequantize_row(cpu(), r, out.data());
    return out;
  }
};

HostMatrix random_matrix(WeightType type, int64_t rows, int64_t cols) {
  HostMatrix m{type, rows, cols, 0, {}};
  m.row_bytes = static_cast<size_t>(cols / block_values(type) * block_bytes(type));
  m.bytes.resize(m.row_bytes * static_cast<size_t>(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const auto put_half = [&](size_t at, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(&m.bytes[at], &h, 2);
  };
  if (type == WeightType::F32 || type == WeightType::F16 || type == WeightType::BF16) {
    const std::vector<float> v = random_floats(static_cast<size_t>(rows * cols), 0.5f);
    for (size_t i = 0; i < v.size(); ++i) {
      if (type == WeightType::F32) {
        std::memcpy(&m.bytes[4 * i], &v[i], 4);
      } else {
        uint16_t h = type == WeightType::F16 ? fp32_to_fp16(v[i])
                                             : static_cast<uint16_t>(std::bit_cast<uint32_t>(v[i]) >> 16);
        std::memcpy(&m.bytes[2 * i], &h, 2);
      }
    }
    return m;
  }
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng()));
  const size_t bb = static_cast<size_t>(block_bytes(type));
  for (size_t at = 0; at < m.bytes.size(); at += bb) {
    if (type == WeightType::Q8_0) put_half(at, scale(rng()));
    if (type == WeightType::Q4_K) {
      put_half(at, scale(rng()) * 0.1f);
      put_half(at + 2, scale(rng()) * 0.1f);
    }
    if (type == WeightType::Q6_K) put_half(at + 208, scale(rng()) * 0.1f);
  }
  return m;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (const float x : v) m = std::max(m, std::fabs(x));
  return m;
}

DeviceMatrix to_device(const HostMatrix& m, const DeviceBuffer& b) {
  return {m.type, m.rows, m.cols, m.row_bytes, b.get<uint8_t>()};
}

constexpr WeightType kAllTypes[] = {WeightType::F32,  WeightType::F16,  WeightType::BF16,
                                    WeightType::Q8_0, WeightType::Q4_K, WeightType::Q6_K};

int64_t cols_for(WeightType t, int blocks) {
  return block_values(t) == 256 ? 256 * blocks : 32 * (8 * blocks + 1);
}

TEST(CudaKernels, DequantizeToF16MatchesTheCpu) {
  for (const WeightType type : kAllTypes) {
    SCOPED_TRACE(type_name(type));
    const HostMatrix m = random_matrix(type, 37, cols_for(type, 3));
    const DeviceBuffer w = upload(m.bytes);
    // Rows 5..36 of it, as the decoder's slices do.
    const int64_t begin = 5, rows = 32;
    const DeviceBuffer out = poisoned(size_t(rows * m.cols) * 2);
    dequantize_f16(to_device(m, w), begin, rows, out.get(), nullptr);
    check(cudaGetLastError(), "dequantize_f16");
    const std::vector<uint16_t> got = download<uint16_t>(out, size_t(rows * m.cols));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> ref = m.row(begin + r);
      // The device may fuse scale * q - min into one operation: the float result can differ in
      // its last bit, and the f16 rounding of it by one f16 step.
      const float row_max = max_abs(ref);
      for (int64_t c = 0; c < m.cols; ++c) {
        const float want = ref[size_t(c)];
        ASSERT_NEAR(fp16_to_fp32(got[size_t(r * m.cols + c)]), want,
                    1e-3f * std::fabs(want) + 1e-6f * row_max)
            << "row " << r << " col " << c;
      }
    }
  }
}

TEST(CudaKernels, EmbeddingRowsMatchTheCpu) {
  for (const WeightType type : kAllTypes) {
    SCOPED_TRACE(type_name(type));
    const HostMatrix m = random_matrix(type, 50, cols_for(type, 2));
    const DeviceBuffer w = upload(m.bytes);
    const std::vector<int32_t> tokens = {49, 0, 17, 17, 3};
    const DeviceBuffer t = upload(tokens);
    const DeviceBuffer out = poisoned(tokens.size() * size_t(m.cols) * 4);
    embed_rows(to_device(m, w), t.get<int32_t>(), int64_t(tokens.size()), 0.5f, out.get<float>(),
               nullptr);
    check(cudaGetLastError(), "embed_rows");
    const std::vector<float> got = download<float>(out, tokens.size() * size_t(m.cols));
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::vector<float> ref = m.row(tokens[i]);
      const float row_max = max_abs(ref);
      for (int64_t c = 0; c < m.cols; ++c)
        ASSERT_NEAR(got[i * size_t(m.cols) + size_t(c)], ref[size_t(c)] * 0.5f,
                    1e-6f * row_max);
    }
  }
}

TEST(CudaKernels, ActivationQuantizationMatchesItsDefinition) {
  const int64_t n = 3, cols = 32 * 7;
  std::vector<float> x = random_floats(size_t(n * cols), 2.0f);
  std::fill_n(x.begin() + 32, 32, 0.0f);  // an all-zero block
  const DeviceBuffer dx = upload(x);
  const DeviceBuffer values = poisoned(size_t(n * cols));
  const DeviceBuffer scales = poisoned(size_t(n * cols / 32) * sizeof(float2));
  quantize_activations(dx.get<float>(), n, cols, {values.get<int8_t>(), scales.get<float2>()},
                       nullptr);
  check(cudaGetLastError(), "quantize");
  const std::vector<int8_t> q = download<int8_t>(values, size_t(n * cols));
  const std::vector<float2> s = download<float2>(scales, size_t(n * cols / 32));
  for (size_t b = 0; b < s.size(); ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + size_t(i)]));
    const float d = amax / 127.0f;
    ASSERT_FLOAT_EQ(s[b].x, d);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int want = amax == 0 ? 0 : static_cast<int>(std::nearbyint(x[b * 32 + size_t(i)] / d));
      ASSERT_NEAR(q[b * 32 + size_t(i)], want, 1) << "block " << b;  // rounding of x / d
      sum += q[b * 32 + size_t(i)];
    }
    ASSERT_NEAR(s[b].y, d * float(sum), 1e-5f * std::fabs(d * float(sum)) + 1e-30f);
  }
}

// gemv against a double-precision product of the CPU's dequantized rows. The int8 types round
// each activation to its block's scale d_x (error at most d_x / 2), so their bound is
// sum over blocks of d_x / 2 * sum |w| in the block, plus float rounding.
TEST(CudaKernels, MatrixVectorProductsMatchTheCpu) {
  for (const int rows : {1, 2, 4}) {
  set_gemv_rows(rows);
  SCOPED_TRACE(std::to_string(rows) + " rows a warp");
  for (const WeightType type : kAllTypes) {
    for (const int64_t n : {1, 3, 8, 11}) {
      SCOPED_TRACE(std::string(type_name(type)) + " tokens " + std::to_string(n));
      const HostMatrix m = random_matrix(type, 77, cols_for(type, 3));
      const DeviceBuffer w = upload(m.bytes);
      const std::vector<float> x = random_floats(size_t(n * m.cols));
      const DeviceBuffer dx = upload(x);
      const DeviceBuffer values(size_t(n * m.cols));
      const DeviceBuffer scales(size_t(n * m.cols / 32) * sizeof(float2));
      const QuantizedActivations q{values.get<int8_t>(), scales.get<float2>()};
      quantize_activations(dx.get<float>(), n, m.cols, q, nullptr);
      const DeviceBuffer y = poisoned(size_t(n * m.rows) * 4);
      gemv(to_device(m, w), dx.get<float>(), q, n, y.get<float>(), m.rows, nullptr);
      check(cudaGetLastError(), "gemv");
      const std::vector<float> got = download<float>(y, size_t(n * m.rows));
      const bool int8 = block_values(type) > 1;
      for (int64_t r = 0; r < m.rows; ++r) {
        const std::vector<float> wr = m.row(r);
        for (int64_t t = 0; t < n; ++t) {
          const float* xt = &x[size_t(t * m.cols)];
          double ref = 0, magnitude = 0, bound = 0;
          for (int64_t b = 0; b < m.cols / 32; ++b) {
            float amax = 0;
            double wsum = 0;
            for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
              ref += double(wr[size_t(i)]) * xt[i];
              magnitude += std::fabs(double(wr[size_t(i)]) * xt[i]);
              amax = std::max(amax, std::fabs(xt[i]));
              wsum += std::fabs(wr[size_t(i)]);
            }
            if (int8) bound += amax / 127.0 / 2.0 * wsum;
          }
          const double tolerance = bound * 1.01 + 1e-5 * magnitude + 1e-6;
          ASSERT_NEAR(got[size_t(t * m.rows + r)], ref, tolerance) << "row " << r << " token " << t;
        }
      }
    }
  }
  }
  set_gemv_rows(0);
}

// Several matrices in one launch give what each gives alone, and the fused gate/up (glu) gives
// act(gate x) * (up x).
TEST(CudaKernels, ManyMatricesAndGluInOneLaunch) {
  for (const int rows : {1, 2, 4}) {
  set_gemv_rows(rows);
  for (const int64_t n : {1, 2, 5, 9}) {
    SCOPED_TRACE("tokens " + std::to_string(n) + ", " + std::to_string(rows) + " rows a warp");
    const int64_t cols = 512;
    const HostMatrix a = random_matrix(WeightType::Q4_K, 96, cols),
                     b = random_matrix(WeightType::Q6_K, 33, cols),
                     c = random_matrix(WeightType::Q8_0, 64, cols);
    const DeviceBuffer da = upload(a.bytes), db = upload(b.bytes), dc = upload(c.bytes);
    const std::vector<float> x = random_floats(size_t(n * cols));
    const DeviceBuffer dx = upload(x);
    const DeviceBuffer values(size_t(n * cols)), scales(size_t(n * cols / 32) * sizeof(float2));
    const QuantizedActivations q{values.get<int8_t>(), scales.get<float2>()};
    quantize_activations(dx.get<float>(), n, cols, q, nullptr);
    const HostMatrix* ms[] = {&a, &b, &c};
    const DeviceBuffer* ds[] = {&da, &db, &dc};
    std::vector<DeviceBuffer> together, alone;
    GemvTarget targets[3];
    for (int i = 0; i < 3; ++i) {
      together.push_back(poisoned(size_t(n * ms[i]->rows) * 4));
      alone.push_back(poisoned(size_t(n * ms[i]->rows) * 4));
      targets[i] = {to_device(*ms[i], *ds[i]), together.back().get<float>(), ms[i]->rows};
      gemv(to_device(*ms[i], *ds[i]), dx.get<float>(), q, n, alone.back().get<float>(),
           ms[i]->rows, nullptr);
    }
    gemv_many(targets, 3, dx.get<float>(), q, n, false, false, nullptr);
    check(cudaGetLastError(), "gemv_many");
    for (int i = 0; i < 3; ++i) {
      const size_t count = size_t(n * ms[i]->rows);
      EXPECT_EQ(download<float>(together[size_t(i)], count), download<float>(alone[size_t(i)], count))
          << "matrix " << i;
    }
    // Gate a (Q4_K) and up of the same shape: of the same type (a warp's rows share their
    // loads of x) and of another (a row at a time).
    for (const WeightType up_type : {WeightType::Q4_K, WeightType::Q6_K}) {
    SCOPED_TRACE(std::string("up ") + type_name(up_type));
    const HostMatrix up = random_matrix(up_type, 96, cols);
    const DeviceBuffer dup = upload(up.bytes);
    const DeviceBuffer up_alone(size_t(n * 96) * 4);
    gemv(to_device(up, dup), dx.get<float>(), q, n, up_alone.get<float>(), 96, nullptr);
    const std::vector<float> g = download<float>(alone[0], size_t(n * 96)),
                             u = download<float>(up_alone, size_t(n * 96));
    for (const bool gelu : {false, true}) {
      const DeviceBuffer out = poisoned(size_t(n * 96) * 4);
      const GemvTarget glu[2] = {{to_device(a, da), out.get<float>(), 96},
                                 {to_device(up, dup), nullptr, 96}};
      gemv_many(glu, 2, dx.get<float>(), q, n, true, gelu, nullptr);
      check(cudaGetLastError(), "gemv_many glu");
      const std::vector<float> got = download<float>(out, size_t(n * 96));
      for (size_t i = 0; i < got.size(); ++i) {
        float want = g[i];
        if (gelu) {
          kernels::gelu_mul(&want, &u[i], 1);
        } else {
          want = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        }
        ASSERT_NEAR(got[i], want, 1e-5f * std::fabs(want) + 1e-6f) << i;
      }
    }
    }
  }
  }
  set_gemv_rows(0);
}

// The norm's fused quantization equals quantize_activations of its output.
TEST(CudaKernels, NormWithQuantizedOutput) {
  // In 1024 threads of 4 values (4096) and in fewer threads of more (576, 8192).
  for (const int64_t n : {576, 4096, 8192}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const int64_t rows = 3;
    const std::vector<float> x = random_floats(size_t(rows * n), 2.0f), w = random_floats(size_t(n));
    const DeviceBuffer dx = upload(x), dw = upload(w), out(size_t(rows * n) * 4);
    const DeviceBuffer v1 = poisoned(size_t(rows * n)), s1 = poisoned(size_t(rows * n / 32) * 8);
    const DeviceBuffer v2(size_t(rows * n)), s2(size_t(rows * n / 32) * 8);
    add_rms_norm(dx.get<float>(), nullptr, dw.get<float>(), out.get<float>(), rows, n, 1e-5f,
                 nullptr, {v1.get<int8_t>(), s1.get<float2>()});
    quantize_activations(out.get<float>(), rows, n, {v2.get<int8_t>(), s2.get<float2>()}, nullptr);
    check(cudaGetLastError(), "norm + quantize");
    EXPECT_EQ(download<int8_t>(v1, size_t(rows * n)), download<int8_t>(v2, size_t(rows * n)));
    const std::vector<float2> a = download<float2>(s1, size_t(rows * n / 32)),
                              b = download<float2>(s2, size_t(rows * n / 32));
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].x, b[i].x);
      EXPECT_EQ(a[i].y, b[i].y);
    }
  }
}

TEST(CudaKernels, AddRmsNormMatchesTheCpu) {
  // Rows in 1024 threads of up to 4 values (3000, 4096) and in up to 512 of up to 16.
  for (const int64_t n : {64, 576, 3000, 4096, 8192}) {
    const int64_t rows = 5;
    std::vector<float> x = random_floats(size_t(rows * n), 3.0f);
    const std::vector<float> add = random_floats(size_t(rows * n));
    const std::vector<float> weight = random_floats(size_t(n));
    const DeviceBuffer dx = upload(x), da = upload(add), dw = upload(weight);
    const DeviceBuffer out = poisoned(size_t(rows * n) * 4);
    add_rms_norm(dx.get<float>(), da.get<float>(), dw.get<float>(), out.get<float>(), rows, n,
                 1e-6f, nullptr);
    check(cudaGetLastError(), "add_rms_norm");
    const std::vector<float> got = download<float>(out, size_t(rows * n));
    const std::vector<float> got_x = download<float>(dx, size_t(rows * n));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> sum(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) sum[size_t(i)] = x[size_t(r * n + i)] + add[size_t(r * n + i)];
      kernels::rms_norm(sum.data(), weight.data(), ref.data(), n, 1e-6f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got_x[size_t(r * n + i)], sum[size_t(i)]);
        ASSERT_NEAR(got[size_t(r * n + i)], ref[size_t(i)], 1e-5f * std::fabs(ref[size_t(i)]) + 1e-7f);
      }
    }
  }
}

TEST(CudaKernels, GatedActivationsAndSoftcapMatchTheCpu) {
  for (const bool gelu : {false, true}) {
    const size_t n = 1000 + 37;
    const std::vector<float> a = random_floats(n, 3.0f), b = random_floats(n);
    const DeviceBuffer da = upload(a), db = upload(b);
    gated_activation(da.get<float>(), db.get<float>(), int64_t(n), gelu, nullptr);
    check(cudaGetLastError(), "gated");
    const std::vector<float> got = download<float>(da, n);
    std::vector<float> ref = a;
    if (gelu) {
      kernels::gelu_mul(ref.data(), b.data(), int64_t(n));
    } else {
      for (size_t i = 0; i < n; ++i) ref[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-5f * std::fabs(ref[i]) + 1e-6f);
  }
  const std::vector<float> x = random_floats(333, 40.0f);
  const DeviceBuffer dx = upload(x);
  softcap(dx.get<float>(), 333, 30.0f, nullptr);
  const std::vector<float> got = download<float>(dx, 333);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(got[i], 30.0f * std::tanh(x[i] / 30.0f), 1e-5f * 30.0f);
}

// RoPE on q and k of three tokens, and the K/V they leave in the cache.
TEST(CudaKernels, RopeAndKvStoreMatchTheCpu) {
  for (const bool neox : {false, true}) {
    for (const int rot_dims : {64, 32}) {
      SCOPED_TRACE(std::string(neox ? "neox" : "normal") + " rot " + std::to_string(rot_dims));
      const int n_heads = 4, n_kv = 2, D = 64, bs = 16, n_blocks = 4;
      const kernels::RopeTable table(300, rot_dims, 10000.0f, 1.0f);
      const std::vector<int32_t> positions = {0, 17, 255};
      const std::vector<int64_t> slots = {3 * bs + 0, 1 * bs + 1, 0 * bs + 15};
      const int64_t T = 3;
      const std::vector<float> q = random_floats(size_t(T * n_heads * D)),
                               k = random_floats(size_t(T * n_kv * D)),
                               v = random_floats(size_t(T * n_kv * D));
      const DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v), dp = upload(positions),
                         ds = upload(slots);
      const DeviceBuffer cos = upload(std::vector<float>(table.cos_values().begin(), table.cos_values().end()));
      const DeviceBuffer sin = upload(std::vector<float>(table.sin_values().begin(), table.sin_values().end()));
      const size_t cache_halves = size_t(n_blocks) * n_kv * bs * D;
      const DeviceBuffer kc(cache_halves * 2), vc(cache_halves * 2);
      check(cudaMemset(kc.get(), 0, kc.bytes()), "clear");
      check(cudaMemset(vc.get(), 0, vc.bytes()), "clear");
      const KvLayout kv{n_kv, D, bs, 0};
      rope_store_kv(dq.get<float>(), dk.get<float>(), dv.get<float>(), dp.get<int32_t>(),
                    ds.get<int64_t>(), T, n_heads, kv, rot_dims, neox, cos.get<float>(),
                    sin.get<float>(), kc.get<uint16_t>(), vc.get<uint16_t>(), nullptr);
      check(cudaGetLastError(), "rope_store_kv");
      const std::vector<float> got_q = download<float>(dq, q.size());
      const std::vector<uint16_t> got_k = download<uint16_t>(kc, cache_halves);
      const std::vector<uint16_t> got_v = download<uint16_t>(vc, cache_halves);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> rq(q.begin() + t * n_heads * D, q.begin() + (t + 1) * n_heads * D);
        std::vector<float> rk(k.begin() + t * n_kv * D, k.begin() + (t + 1) * n_kv * D);
        if (neox) {
          table.apply_neox(rq.data(), n_heads, D, positions[size_t(t)]);
          table.apply_neox(rk.data(), n_kv, D, positions[size_t(t)]);
        } else {
          table.apply_normal(rq.data(), n_heads, D, positions[size_t(t)]);
          table.apply_normal(rk.data(), n_kv, D, positions[size_t(t)]);
        }
        for (int i = 0; i < n_heads * D; ++i)
          ASSERT_NEAR(got_q[size_t(t * n_heads * D + i)], rq[size_t(i)], 1e-6f);
        for (int h = 0; h < n_kv; ++h) {
          const int64_t slot = slots[size_t(t)];
          const size_t base = size_t(((slot / bs) * n_kv + h) * bs + slot % bs) * D;
          for (int d = 0; d < D; ++d) {
            ASSERT_EQ(got_k[base + size_t(d)], fp32_to_fp16(rk[size_t(h * D + d)])) << t << " " << d;
            ASSERT_EQ(got_v[base + size_t(d)], fp32_to_fp16(v[size_t((t * n_kv + h) * D + d)]));
          }
        }
      }
    }
  }
}

// Paged attention of several sequences, with block tables out of order, windows, soft-capping
// and contexts over one chunk, against a double-precision softmax on the same f16 keys/values.
TEST(CudaKernels, PagedAttentionMatchesAReference) {
  struct Case {
    int n_heads, n_kv, D, window;
    float softcap;
  };
  for (const Case cs : {Case{8, 2, 64, 0, 0.0f}, Case{4, 4, 128, 0, 0.0f}, Case{12, 2, 128, 100, 0.0f},
                        Case{8, 1, 256, 0, 50.0f}, Case{6, 2, 80, 0, 0.0f}}) {
    SCOPED_TRACE("heads " + std::to_string(cs.n_heads) + "/" + std::to_string(cs.n_kv) + " D " +
                 std::to_string(cs.D) + " window " + std::to_string(cs.window));
    const int bs = 16, n_blocks = 64;
    // Two sequences: one decoding at position 700 (3 chunks), one with 5 prompt tokens at 40..44.
    std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
    for (int i = 0; i < n_blocks; ++i) blocks[size_t(i)] = i;
    std::shuffle(blocks.begin(), blocks.end(), rng());
    const std::vector<int32_t> table_a(blocks.begin(), blocks.begin() + 45);  // 720 positions
    const std::vector<int32_t> table_b(blocks.begin() + 45, blocks.begin() + 48);
    std::vector<int32_t> tables = table_a;
    tables.insert(tables.end(), table_b.begin(), table_b.end());
    // Twice: with the long sequence (chunks combined), and without it (one chunk, written
    // directly).
    for (const bool long_context : {true, false}) {
    for (const int keys_per_block : {256, 64, 32}) {
    SCOPED_TRACE(std::string(long_context ? "with" : "without") + " the long sequence, " +
                 std::to_string(keys_per_block) + " keys a block");
    std::vector<AttentionToken> tokens = {{700, 0}, {40, 45}, {41, 45}, {42, 45}, {43, 45}, {44, 45}};
    if (!long_context) tokens.erase(tokens.begin());
    const auto T = int64_t(tokens.size());
    const size_t cache_halves = size_t(n_blocks) * cs.n_kv * bs * cs.D;
    std::vector<uint16_t> kc(cache_halves), vc(cache_halves);
    for (uint16_t& h : kc) h = fp32_to_fp16(random_floats(1)[0]);
    for (uint16_t& h : vc) h = fp32_to_fp16(random_floats(1)[0]);
    const std::vector<float> q = random_floats(size_t(T * cs.n_heads * cs.D));
    const DeviceBuffer dq = upload(q), dt = upload(tokens), dtab = upload(tables), dk = upload(kc),
                       dv = upload(vc);
    const KvLayout kv{cs.n_kv, cs.D, bs, 0};
    const float scale = 1.0f / std::sqrt(float(cs.D));
    const AttentionParams params{cs.n_heads, scale, cs.softcap, cs.window, keys_per_block};
    const int max_chunks = ((long_context ? 700 : 44) + 1 + keys_per_block - 1) / keys_per_block;
    const DeviceBuffer scratch(attention_scratch_floats(T, cs.n_heads, cs.D, max_chunks) * 4);
    const DeviceBuffer out = poisoned(size_t(T * cs.n_heads * cs.D) * 4);
    paged_attention(dq.get<float>(), dt.get<AttentionToken>(), dtab.get<int32_t>(), T, params, kv,
                    dk.get<uint16_t>(), dv.get<uint16_t>(), max_chunks, scratch.get<float>(),
                    out.get<float>(), nullptr);
    check(cudaGetLastError(), "paged_attention");
    const std::vector<float> got = download<float>(out, size_t(T * cs.n_heads * cs.D));
    const int G = cs.n_heads / cs.n_kv;
    for (int64_t t = 0; t < T; ++t) {
      const AttentionToken tok = tokens[size_t(t)];
      const int first = cs.window > 0 ? std::max(0, tok.position - cs.window + 1) : 0;
      for (int h = 0; h < cs.n_heads; ++h) {
        const int kvh = h / G;
        std::vector<double> s;
        std::vector<size_t> rows;
        for (int p = first; p <= tok.position; ++p) {
          const int32_t block = tables[size_t(tok.table_offset + p / bs)];
          const size_t base = size_t((int64_t(block) * cs.n_kv + kvh) * bs + p % bs) * size_t(cs.D);
          double dot = 0;
          for (int d = 0; d < cs.D; ++d)
            dot += double(q[size_t((t * cs.n_heads + h) * cs.D + d)]) * fp16_to_fp32(kc[base + size_t(d)]);
          dot *= scale;
          if (cs.softcap > 0) dot = cs.softcap * std::tanh(dot / cs.softcap);
          s.push_back(dot);
          rows.push_back(base);
        }
        const double m = *std::max_element(s.begin(), s.end());
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - m));
        for (int d = 0; d < cs.D; ++d) {
          double ref = 0;
          for (size_t j = 0; j < s.size(); ++j) ref += s[j] * fp16_to_fp32(vc[rows[j] + size_t(d)]);
          ref /= l;
          ASSERT_NEAR(got[size_t((t * cs.n_heads + h) * cs.D + d)], ref, 2e-4)
              << "token " << t << " head " << h << " dim " << d;
        }
      }
    }
    }
    }
  }
}

TEST(CudaKernels, ArgmaxTakesTheFirstOfTies) {
  const int64_t rows = 4, n = 128256 + 3;
  std::vector<float> x = random_floats(size_t(rows * n));
  x[size_t(0 * n + 5)] = 100.0f;
  x[size_t(0 * n + 90000)] = 100.0f;  // a tie: 5 wins
  x[size_t(1 * n + n - 1)] = 50.0f;   // the last element
  x[size_t(2 * n + 0)] = 50.0f;       // the first
  const DeviceBuffer dx = upload(x);
  const DeviceBuffer ids = poisoned(size_t(rows) * 4);
  argmax_rows(dx.get<float>(), rows, n, ids.get<int32_t>(), nullptr);
  check(cudaGetLastError(), "argmax");
  const std::vector<int32_t> got = download<int32_t>(ids, size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = &x[size_t(r * n)];
    const auto want = int32_t(std::max_element(row, row + n) - row);
    EXPECT_EQ(got[size_t(r)], want) << "row " << r;
  }
  EXPECT_EQ(got[0], 5);
}

// Speed of the decode kernels on Llama-3.1-8B's shapes (scripts/gpu-check runs it with
// --gtest_also_run_disabled_tests): device time per call from events over 200 calls, and the
// bytes of weights (or K/V) read per second.
TEST(CudaKernels, DISABLED_DecodeKernelSpeed) {
  cudaStream_t st;
  check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
  // Device time per call: 100 calls captured in a graph and replayed (no CPU launch cost in
  // the figure), and the same calls launched one by one (what a step without graphs pays).
  struct Times {
    double graph_us, launched_us;
  };
  const auto time_us = [&](auto&& launch) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    constexpr int kCalls = 100;
    for (int i = 0; i < 10; ++i) launch();
    float ms = 0;
    check(cudaEventRecord(a, st), "event");
    for (int i = 0; i < kCalls; ++i) launch();
    check(cudaEventRecord(b, st), "event");
    check(cudaEventSynchronize(b), "event");
    check(cudaEventElapsedTime(&ms, a, b), "event");
    const double launched = double(ms) * 1e3 / kCalls;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < kCalls; ++i) launch();
    check(cudaStreamEndCapture(st, &graph), "capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check(cudaGraphLaunch(exec, st), "replay");  // warm-up
    check(cudaEventRecord(a, st), "event");
    for (int r = 0; r < 3; ++r) check(cudaGraphLaunch(exec, st), "replay");
    check(cudaEventRecord(b, st), "event");
    check(cudaEventSynchronize(b), "event");
    check(cudaEventElapsedTime(&ms, a, b), "event");
    check(cudaGetLastError(), "launch");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return Times{double(ms) * 1e3 / (3 * kCalls), launched};
  };
  const int64_t hidden = 4096, ffn = 14336;
  const std::vector<float> x = random_floats(size_t(ffn));
  const DeviceBuffer dx = upload(x), values{size_t(ffn)}, scales{size_t(ffn / 32) * 8};
  const QuantizedActivations q{values.get<int8_t>(), scales.get<float2>()};
  quantize_activations(dx.get<float>(), 1, ffn, q, st);
  const DeviceBuffer y{size_t(ffn) * 4 * 2};
  struct Shape {
    const char* name;
    WeightType type;
    int64_t rows, cols;
    bool glu;
  };
  for (const Shape sh : {Shape{"q 4096x4096 Q4_K", WeightType::Q4_K, hidden, hidden, false},
                         Shape{"gate+up 2x14336x4096 Q4_K (glu)", WeightType::Q4_K, ffn, hidden, true},
                         Shape{"down 4096x14336 Q4_K", WeightType::Q4_K, hidden, ffn, false},
                         Shape{"down 4096x14336 Q6_K", WeightType::Q6_K, hidden, ffn, false},
                         Shape{"output 128256x4096 Q6_K", WeightType::Q6_K, 128256, hidden, false},
                         Shape{"down 4096x14336 Q8_0", WeightType::Q8_0, hidden, ffn, false},
                         Shape{"down 4096x14336 F16", WeightType::F16, hidden, ffn, false}}) {
    const HostMatrix m = random_matrix(sh.type, sh.rows, sh.cols);
    // Copies of the weights that together are several times the L2 cache (60 MB on an H200),
    // taken in turn: a product reads its weights from memory, as in a model's step.
    const size_t per_call = m.bytes.size() * (sh.glu ? 2 : 1);
    const size_t copies = std::max<size_t>(1, (size_t{256} << 20) / per_call);
    std::vector<DeviceBuffer> w;
    for (size_t i = 0; i < copies * (sh.glu ? 2 : 1); ++i) w.push_back(upload(m.bytes));
    size_t call = 0;
    for (const int rows : {1, 2, 4}) {
      for (const bool pdl : {true, false}) {
        if (sh.glu && rows == 1) continue;  // the same as 2
        set_gemv_rows(rows);
        set_programmatic_launch(pdl);
        const Times us = time_us([&] {
          const size_t c = (call++ % copies) * (sh.glu ? 2 : 1);
          const GemvTarget targets[2] = {
              {to_device(m, w[c]), y.get<float>(), sh.rows},
              {to_device(m, w[sh.glu ? c + 1 : c]), y.get<float>() + ffn, sh.rows}};
          gemv_many(targets, sh.glu ? 2 : 1, dx.get<float>(), q, 1, sh.glu, false, st);
        });
        std::printf("[gpu-speed] gemv %s, %d rows a warp, PDL %s: %.1f us in a graph "
                    "(%.0f GB/s of weights), %.1f us launched\n",
                    sh.name, rows, pdl ? "on" : "off", us.graph_us,
                    double(per_call) / us.graph_us / 1e3, us.launched_us);
      }
    }
    set_gemv_rows(0);
    set_programmatic_launch(true);
  }
  const DeviceBuffer normed{size_t(hidden) * 4}, weight = upload(random_floats(size_t(hidden)));
  for (const int threads : {512, 1024}) {
    set_norm_max_threads(threads);
    const Times norm = time_us([&] {
      add_rms_norm(dx.get<float>(), nullptr, weight.get<float>(), normed.get<float>(), 1, hidden,
                   1e-5f, st, q);
    });
    std::printf("[gpu-speed] add_rms_norm + quantize 1x4096, %d threads: %.1f us in a graph, %.1f us "
                "launched\n", threads, norm.graph_us, norm.launched_us);
  }
  set_norm_max_threads(1024);
  const Times quant = time_us([&] { quantize_activations(dx.get<float>(), 1, ffn, q, st); });
  std::printf("[gpu-speed] quantize 1x14336: %.1f us in a graph, %.1f us launched\n",
              quant.graph_us, quant.launched_us);
  // Attention of one token over 128 and 4096 keys, 32 query heads on 8 kv heads of 128.
  const int bs = 16, n_kv = 8, D = 128;
  for (const int context : {128, 4096}) {
    for (const int keys : {256, 32}) {
      const int blocks = context / bs;
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      for (int i = 0; i < blocks; ++i) table[size_t(i)] = i;
      const std::vector<AttentionToken> tok = {{context - 1, 0}};
      const DeviceBuffer dt = upload(tok), dtab = upload(table);
      const DeviceBuffer kc(size_t(blocks) * n_kv * bs * D * 2), vc(kc.bytes());
      check(cudaMemset(kc.get(), 0x11, kc.bytes()), "fill");
      check(cudaMemset(vc.get(), 0x11, vc.bytes()), "fill");
      const DeviceBuffer dq = upload(random_floats(size_t(32 * D))), out(size_t(32 * D) * 4);
      const int chunks = (context + keys - 1) / keys;
      const DeviceBuffer scratch(attention_scratch_floats(1, 32, D, chunks) * 4);
      const AttentionParams params{32, 0.088f, 0.0f, 0, keys};
      const KvLayout kv{n_kv, D, bs, 0};
      const Times us = time_us([&] {
        paged_attention(dq.get<float>(), dt.get<AttentionToken>(), dtab.get<int32_t>(), 1, params,
                        kv, kc.get<uint16_t>(), vc.get<uint16_t>(), chunks, scratch.get<float>(),
                        out.get<float>(), st);
      });
      std::printf("[gpu-speed] attention 1 token, %d keys, %d keys a block: %.1f us in a graph "
                  "(%.0f GB/s of K/V), %.1f us launched\n",
                  context, keys, us.graph_us, double(kc.bytes() * 2) / us.graph_us / 1e3,
                  us.launched_us);
    }
  }
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace inferd::cuda

int main(int argc, char** argv) {
  if (!inferd::cuda::device_available()) {
    std::fprintf(stderr, "no CUDA device: the GPU tests are skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
