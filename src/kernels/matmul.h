// Matrix multiplication of a weight matrix (any supported GGUF type, rows = outputs) with a
// batch of float activations: Y[t, r] = W[r, :] . X[t, :]. Activations are converted once per
// row into the weight type's paired format and reused for every weight row. Packed weights
// (kernels/packed.h) go through 16-row group kernels: each thread streams its groups once and
// multiplies each by all tokens while the group is in L1.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace inferd::kernels {

// A non-owning view of a 2-D weight: `rows` rows of `cols` values each, stored in `type`.
struct WeightMatrix {
  DType type = DType::F32;
  int64_t rows = 0;  // output features (N)
  int64_t cols = 0;  // input features (K), a whole number of blocks
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  // The same weights repacked for the packed int8 path (Q4_0, Q4_1, Q8_0); null otherwise.
  std::shared_ptr<const PackedWeights> packed;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

// Scratch for converted activations; sized once for the largest batch so matmul never
// allocates in the decode loop. In huge pages: every group of weight rows reads all of them
// again, and in 4 KiB pages a prompt's activations alone span dozens of TLB entries.
class ActivationScratch {
 public:
  // Room for `max_tokens` rows of up to `max_cols` values in any activation format (what was
  // there is not kept when it grows).
  void reserve(int64_t max_tokens, int64_t max_cols);
  uint8_t* data() { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }

 private:
  HugePageBuffer buffer_;
};

// Rows [bf16_from, n_tokens) may take the table's bf16 route (kernels.h; model/batch.h says
// which rows a model marks): the default, no row.
constexpr int64_t kNoBf16Rows = INT64_MAX;

// y: [n_tokens, w.rows], x: [n_tokens, w.cols] (row stride w.cols).
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            ActivationScratch& scratch, ThreadPool& pool,
            const KernelTable& table = active_kernels(), int64_t bf16_from = kNoBf16Rows);

// One weight and its output, for matmuls that share an input (q/k/v, gate/up).
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;  // [n_tokens, w->rows]
};

// y_i = W_i x for every target; all W_i have the same cols. The input is converted once and the
// row groups of all targets are split over the threads in one parallel region.
void matmul_many(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens,
                 ActivationScratch& scratch, ThreadPool& pool,
                 const KernelTable& table = active_kernels(), int64_t bf16_from = kNoBf16Rows);

// One product of a grouped matmul: y = W x for its own input rows (an expert and the tokens
// routed to it).
struct GroupedProduct {
  const WeightMatrix* w;
  const float* x;  // [n_tokens, w->cols]
  int64_t n_tokens;
  float* y;  // [n_tokens, w->rows]
};

// Scratch a matmul_grouped call may need: `rows` input rows in all (their sum over the distinct
// inputs) spread over at most `inputs` distinct inputs, of up to `max_cols` values.
int64_t grouped_scratch_tokens(int64_t rows, int64_t inputs);

// Every product of `items`, all of the same cols, in one parallel region: the weights of all of
// them are split over the threads together, so a decode step that touches a few experts keeps
// every core streaming instead of paying a region (and a ramp-up) per expert. Products that
// share an input (the same x and n_tokens, such as an expert's gate and up) convert it once.
// Int8 rows only (no bf16 route): a token's result does not depend on what it is batched with.
// Items whose weights have no packed layout run row by row after the others.
void matmul_grouped(std::span<const GroupedProduct> items, ActivationScratch& scratch,
                    ThreadPool& pool, const KernelTable& table = active_kernels());

// Copies row r of a weight matrix into floats (embedding look-up).
void dequantize_row(const WeightMatrix& w, int64_t r, float* out,
                    const KernelTable& table = active_kernels());

}  // namespace inferd::kernels
