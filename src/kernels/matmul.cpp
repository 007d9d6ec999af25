#include "kernels/matmul.h"

#include "util/error.h"

namespace inferd::kernels {

void ActivationScratch::reserve(int64_t max_tokens, int64_t max_cols) {
  // F32 is the widest activation format (4 bytes a value); block formats are smaller.
  size_t need = static_cast<size_t>(max_tokens * max_cols) * sizeof(float);
  if (buffer_.size() < need) buffer_.resize(need);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            ActivationScratch& scratch, ThreadPool& pool, const KernelTable& table) {
  const WeightKernels* k = table.for_weight(w.type);
  if (k == nullptr) fail("matmul: weight type {} is not supported yet", dtype_name(w.type));
  const size_t act_row = static_cast<size_t>(*row_bytes(k->activation_type, w.cols));
  if (act_row * static_cast<size_t>(n_tokens) > scratch.size()) {
    fail("matmul: activation scratch of {} bytes is too small for {} tokens x {} columns",
         scratch.size(), n_tokens, w.cols);
  }
  uint8_t* act = scratch.data();
  pool.parallel_for(n_tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      k->quantize_activation(x + t * w.cols, act + static_cast<size_t>(t) * act_row, w.cols);
    }
  });
  // Each thread takes a contiguous band of weight rows and streams it once for all tokens.
  constexpr int64_t kRowGrain = 16;
  pool.parallel_for(w.rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* wrow = w.row(r);
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * w.rows + r] = k->dot(w.cols, wrow, act + static_cast<size_t>(t) * act_row);
      }
    }
  });
}

void dequantize_row(const WeightMatrix& w, int64_t r, float* out, const KernelTable& table) {
  const WeightKernels* k = table.for_weight(w.type);
  if (k == nullptr) fail("dequantize: weight type {} is not supported yet", dtype_name(w.type));
  k->dequantize(w.row(r), out, w.cols);
}

}  // namespace inferd::kernels
