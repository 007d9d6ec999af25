// The grouped matmul (kernels/matmul.h, matmul_grouped): many products with their own inputs in
// one parallel region must give every product exactly what matmul gives it alone, on every ISA,
// for weights of every layout (packed int8, F16, k-quants and a type with no packed layout),
// odd row counts, token counts around the tile and panel sizes, and inputs shared by several
// products.
#include <vector>

#include <gtest/gtest.h>

#include "kernels/matmul.h"
#include "kernels/ref/quant_ref.h"
#include "random_data.h"
#include "util/error.h"

namespace inferd::kernels {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// rows x cols weights of `type` from random blocks (random floats rounded for F16/Q8_0), packed
// where the type has a packed layout.
Matrix random_matrix(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m;
  const auto row_size = static_cast<size_t>(*row_bytes(type, cols));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row(row_size);
    const auto x = testing::random_floats(cols, seed + static_cast<uint32_t>(r), 0.1f);
    if (type == DType::F16) {
      ref::quantize_row_f16(x.data(), row.data(), cols);
    } else if (type == DType::Q8_0) {
      ref::quantize_row_q8_0(x.data(), row.data(), cols);
    } else if (type == DType::Q4_0) {
      ref::quantize_row_q4_0(x.data(), row.data(), cols);
    } else if (type == DType::Q4_1) {
      ref::quantize_row_q4_1(x.data(), row.data(), cols);
    } else {
      row = testing::random_blocks(type, cols, seed + static_cast<uint32_t>(r), 0.1f);
    }
    m.bytes.insert(m.bytes.end(), row.begin(), row.end());
  }
  m.w = {type, rows, cols, row_size, nullptr, nullptr};
  return m;
}

void finish(Matrix& m) {
  m.w.data = m.bytes.data();
  if (PackedWeights::supports(m.w.type, m.w.cols) && m.w.rows > 1)
    m.w.packed = PackedWeights::pack(m.w.type, m.w.data, m.w.rows, m.w.cols, m.w.row_bytes);
}

TEST(GroupedMatmul, EveryProductEqualsItsOwnMatmulOnEveryIsa) {
  constexpr int64_t kCols = 512;
  // (type, rows, tokens, input): products with the same input index share their x.
  struct Case {
    DType type;
    int64_t rows;
    int input;
  };
  const Case cases[] = {{DType::Q4_K, 48, 0}, {DType::Q4_K, 48, 0}, {DType::Q6_K, 33, 1},
                        {DType::Q8_0, 17, 2}, {DType::Q4_0, 64, 2}, {DType::F16, 31, 3},
                        {DType::Q2_K, 20, 4}, {DType::Q5_K, 16, 5}, {DType::IQ4_XS, 40, 6},
                        {DType::Q4_1, 9, 7}};
  const int64_t tokens_of_input[] = {1, 3, 17, 40, 5, 8, 25, 2};
  std::vector<Matrix> matrices;
  matrices.reserve(std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i)
    matrices.push_back(random_matrix(cases[i].type, cases[i].rows, kCols, 100 * uint32_t(i)));
  for (Matrix& m : matrices) finish(m);
  std::vector<std::vector<float>> inputs;
  for (size_t j = 0; j < std::size(tokens_of_input); ++j)
    inputs.push_back(testing::random_floats(tokens_of_input[j] * kCols, 7 + uint32_t(j)));

  ThreadPool pool(2);
  for (const KernelTable* table : available_kernels()) {
    ActivationScratch scratch;
    scratch.reserve(grouped_scratch_tokens(200, 16), kCols);
    std::vector<std::vector<float>> got(std::size(cases)), want(std::size(cases));
    std::vector<GroupedProduct> items;
    for (size_t i = 0; i < std::size(cases); ++i) {
      const auto j = static_cast<size_t>(cases[i].input);
      const int64_t n = tokens_of_input[j];
      got[i].assign(static_cast<size_t>(n * cases[i].rows), -1.0f);
      want[i].assign(got[i].size(), -2.0f);
      items.push_back({&matrices[i].w, inputs[j].data(), n, got[i].data()});
      matmul(matrices[i].w, inputs[j].data(), n, want[i].data(), scratch, pool, *table);
    }
    matmul_grouped(items, scratch, pool, *table);
    for (size_t i = 0; i < std::size(cases); ++i) {
      for (size_t k = 0; k < got[i].size(); ++k)
        ASSERT_EQ(got[i][k], want[i][k])
            << table->isa << " product " << i << " (" << dtype_name(cases[i].type) << ") value " << k;
    }
  }
}

TEST(GroupedMatmul, EmptyProductsAndMismatchedWidths) {
  Matrix a = random_matrix(DType::Q8_0, 32, 64, 1), b = random_matrix(DType::Q8_0, 32, 96, 2);
  finish(a);
  finish(b);
  const auto x = testing::random_floats(2 * 96, 3);
  std::vector<float> y(64, 5.0f);
  ThreadPool pool(2);
  ActivationScratch scratch;
  scratch.reserve(grouped_scratch_tokens(8, 4), 96);
  // A product of no tokens writes nothing.
  const GroupedProduct none[] = {{&a.w, x.data(), 0, y.data()}};
  matmul_grouped(none, scratch, pool);
  EXPECT_EQ(y[0], 5.0f);
  const GroupedProduct mixed[] = {{&a.w, x.data(), 1, y.data()}, {&b.w, x.data(), 1, y.data()}};
  EXPECT_THROW(matmul_grouped(mixed, scratch, pool), Error);
}

}  // namespace
}  // namespace inferd::kernels
