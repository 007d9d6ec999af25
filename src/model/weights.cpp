#include "model/weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace inferd::model {

const gguf::TensorInfo& WeightLoader::find(const std::string& name) const {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (t == nullptr) fail("{}: tensor '{}' is missing", file_.name(), name);
  used_.insert(name);
  return *t;
}

void WeightLoader::skip_prefix(const std::string& prefix) const {
  for (const gguf::TensorInfo& t : file_.tensors())
    if (t.name.starts_with(prefix)) used_.insert(t.name);
}

void WeightLoader::check_all_used() const {
  std::vector<std::string> unused;
  for (const gguf::TensorInfo& t : file_.tensors())
    if (!used_.contains(t.name)) unused.push_back(t.name);
  if (unused.empty()) return;
  constexpr size_t kNamed = 8;
  const size_t named = std::min(unused.size(), kNamed);
  fail(
      "{}: {} tensor(s) that inferd's '{}' model does not implement: {}{} (refusing to run "
      "without them: the output would be wrong)",
      file_.name(), unused.size(), file_.architecture(),
      fmt::join(unused.begin(), unused.begin() + static_cast<std::ptrdiff_t>(named), ", "),
      unused.size() > named ? ", ..." : "");
}

kernels::WeightMatrix WeightLoader::matrix(const std::string& name, int64_t rows,
                                           int64_t cols) const {
  return matrix_rows(name, 0, rows, rows, cols);
}

kernels::WeightMatrix WeightLoader::matrix_rows(const std::string& name, int64_t row_begin,
                                                int64_t rows, int64_t total_rows,
                                                int64_t cols) const {
  const gguf::TensorInfo& t = find(name);
  if (shard_ranks_ > 1 && rows == total_rows && t.shape.size() == 2) {
    const int64_t ranks = shard_ranks_;
    if (t.shape[0] == uint64_t(cols) && t.shape[1] == uint64_t(rows * ranks)) {
      row_begin = shard_rank_ * rows;  // this rank's rows
      total_rows = rows * ranks;
    } else if (t.shape[0] == uint64_t(cols * ranks) && t.shape[1] == uint64_t(rows)) {
      return matrix_columns(t, rows, cols);
    }
  }
  bool shape_ok =
      (t.shape.size() == 2 && t.shape[0] == uint64_t(cols) && t.shape[1] == uint64_t(total_rows)) ||
      (total_rows == 1 && t.shape.size() == 1 && t.shape[0] == uint64_t(cols));
  if (!shape_ok) {
    fail("{}: tensor '{}' has shape {}, expected [{}, {}]", file_.name(), name, t.shape_string(),
         cols, total_rows);
  }
  if (row_begin < 0 || rows <= 0 || row_begin + rows > total_rows) {
    fail("{}: rows {}..{} of tensor '{}' are outside its {}", file_.name(), row_begin,
         row_begin + rows, name, total_rows);
  }
  return take_rows(t, name, row_begin, rows, cols);
}

kernels::WeightMatrix WeightLoader::take_rows(const gguf::TensorInfo& t, const std::string& name,
                                              int64_t row_begin, int64_t rows,
                                              int64_t cols) const {
  check_multipliable(t);
  kernels::WeightMatrix w;
  w.type = t.type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = static_cast<size_t>(*row_bytes(t.type, cols));
  w.data = t.data + static_cast<size_t>(row_begin) * w.row_bytes;
  // Repacked once here so every matmul streams SIMD-friendly 16-row groups; the rows of a
  // table looked up in place stay in the file's map (keep_rows).
  const auto kept = keep_rows_.find(name);
  const bool multiplied = kept == keep_rows_.end() || kept->second;
  if (multiplied && kernels::PackedWeights::supports(t.type, cols) && rows > 1)
    w.packed = kernels::PackedWeights::pack(t.type, w.data, rows, cols, w.row_bytes, arena_);
  if (kept == keep_rows_.end()) {
    w.data = take_out(w.data, static_cast<size_t>(rows) * w.row_bytes, w.packed == nullptr);
  } else if (w.packed != nullptr) {
    // Packing read every row; the lookups need a row a token from now on: let the file's pages
    // go (they fault back in as rows are looked up), or a tied embedding is held twice (525 MB
    // more for Llama 3.2 1B in F16).
    file_.release_pages(w.data, static_cast<size_t>(rows) * w.row_bytes);
  }
  return w;
}

kernels::WeightMatrix WeightLoader::matrix_columns(const gguf::TensorInfo& t, int64_t rows,
                                                   int64_t cols) const {
  check_multipliable(t);
  const int64_t all_cols = cols * shard_ranks_;
  const std::optional<int64_t> full = row_bytes(t.type, all_cols);
  const std::optional<int64_t> part = row_bytes(t.type, cols);
  if (!full || !part || *part * shard_ranks_ != *full)
    fail("{}: tensor '{}' ({}) cannot be split into {} column ranges of {}: not on its blocks",
         file_.name(), t.name, dtype_name(t.type), shard_ranks_, cols);
  // This rank's part of every row, read in place: rows `full` bytes apart (the stride a
  // WeightMatrix's row_bytes is), each part a whole number of blocks.
  kernels::WeightMatrix w;
  w.type = t.type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = static_cast<size_t>(*full);
  w.data = t.data + shard_rank_ * *part;
  if (kernels::PackedWeights::supports(t.type, cols) && rows > 1) {
    w.packed = kernels::PackedWeights::pack(t.type, w.data, rows, cols, w.row_bytes, arena_);
    file_.release_pages(t.data, t.num_bytes);
  }
  return w;
}

const gguf::TensorInfo& WeightLoader::find_stacked(const std::string& name, int64_t n,
                                                   int64_t rows, int64_t cols) const {
  const gguf::TensorInfo& t = find(name);
  if (t.shape.size() != 3 || t.shape[0] != uint64_t(cols) || t.shape[1] != uint64_t(rows) ||
      t.shape[2] != uint64_t(n)) {
    fail("{}: tensor '{}' has shape {}, expected [{}, {}, {}]", file_.name(), name,
         t.shape_string(), cols, rows, n);
  }
  return t;
}

kernels::WeightMatrix WeightLoader::stacked_matrix(const std::string& name, int64_t n,
                                                   int64_t rows, int64_t cols) const {
  return take_rows(find_stacked(name, n, rows, cols), name, 0, n * rows, cols);
}

kernels::WeightMatrix WeightLoader::transposed_stacked_f32(const std::string& name, int64_t n,
                                                           int64_t rows, int64_t cols) const {
  const gguf::TensorInfo& t = find_stacked(name, n, rows, cols);
  check_multipliable(t);
  kernels::WeightMatrix source;  // the file's rows, as they are
  source.type = t.type;
  source.rows = n * rows;
  source.cols = cols;
  source.row_bytes = static_cast<size_t>(*row_bytes(t.type, cols));
  source.data = t.data;
  const std::span<float> out = arena_->allocate_array<float>(static_cast<size_t>(n * rows * cols));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      kernels::dequantize_row(source, m * rows + r, row.data());
      for (int64_t c = 0; c < cols; ++c)  // out row m * cols + c, column r
        out[static_cast<size_t>((m * cols + c) * rows + r)] = row[static_cast<size_t>(c)];
    }
  }
  file_.release_pages(t.data, t.num_bytes);
  kernels::WeightMatrix w;
  w.type = DType::F32;
  w.rows = n * cols;
  w.cols = rows;
  w.row_bytes = static_cast<size_t>(rows) * sizeof(float);
  w.data = reinterpret_cast<const uint8_t*>(out.data());
  return w;
}

std::vector<kernels::WeightMatrix> WeightLoader::expert_matrices(const std::string& name,
                                                                 int64_t n_experts,
                                                                 int64_t row_begin, int64_t rows,
                                                                 int64_t rows_per_expert,
                                                                 int64_t cols, int64_t take_begin,
                                                                 int64_t take_end) const {
  const gguf::TensorInfo& t = find_stacked(name, n_experts, rows_per_expert, cols);
  if (row_begin < 0 || rows <= 0 || row_begin + rows > rows_per_expert)
    fail("{}: rows {}..{} of tensor '{}' are outside its {} an expert", file_.name(), row_begin,
         row_begin + rows, name, rows_per_expert);
  check_multipliable(t);
  const auto row_size = static_cast<size_t>(*row_bytes(t.type, cols));
  std::vector<kernels::WeightMatrix> experts(static_cast<size_t>(n_experts));
  if (take_end < 0) take_end = n_experts;
  for (int64_t e = std::max<int64_t>(take_begin, 0); e < std::min(take_end, n_experts); ++e) {
    kernels::WeightMatrix& w = experts[static_cast<size_t>(e)];
    w.type = t.type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = row_size;
    w.data = t.data + static_cast<size_t>(e * rows_per_expert + row_begin) * row_size;
    if (kernels::PackedWeights::supports(t.type, cols) && rows > 1)
      w.packed = kernels::PackedWeights::pack(t.type, w.data, rows, cols, w.row_bytes, arena_);
    w.data = take_out(w.data, static_cast<size_t>(rows) * row_size, w.packed == nullptr);
  }
  return experts;
}

const float* WeightLoader::f32_rows(const std::string& name, int64_t rows,
                                    int64_t n) const {
  const gguf::TensorInfo& t = find(name);
  if (t.shape.size() != 2 || t.shape[0] != uint64_t(n) || t.shape[1] != uint64_t(rows)) {
    fail("{}: tensor '{}' has shape {}, expected [{}, {}]", file_.name(), name, t.shape_string(), n,
         rows);
  }
  if (t.type != DType::F32) {
    fail("{}: tensor '{}' has type {}, expected F32", file_.name(), name, dtype_name(t.type));
  }
  return reinterpret_cast<const float*>(take_out(t.data, t.num_bytes, true));
}

const float* WeightLoader::vector(const std::string& name, int64_t n) const {
  const gguf::TensorInfo& t = find(name);
  if (shard_ranks_ > 1 && t.shape.size() == 1 && t.shape[0] == uint64_t(n * shard_ranks_) &&
      t.type == DType::F32) {  // this rank's part (a bias of its heads, their sinks)
    return reinterpret_cast<const float*>(
        take_out(t.data + shard_rank_ * n * static_cast<int64_t>(sizeof(float)),
                 static_cast<size_t>(n) * sizeof(float), true));
  }
  if (t.shape.size() != 1 || t.shape[0] != uint64_t(n)) {
    fail("{}: tensor '{}' has shape {}, expected [{}]", file_.name(), name, t.shape_string(), n);
  }
  if (t.type != DType::F32) {
    fail("{}: tensor '{}' has type {}, expected F32", file_.name(), name, dtype_name(t.type));
  }
  return reinterpret_cast<const float*>(take_out(t.data, t.num_bytes, true));
}

std::vector<int32_t> WeightLoader::token_ids(const std::string& name, int64_t n,
                                             int64_t limit) const {
  const gguf::TensorInfo& t = find(name);
  if (t.shape.size() != 1 || t.shape[0] != uint64_t(n)) {
    fail("{}: tensor '{}' has shape {}, expected [{}]", file_.name(), name, t.shape_string(), n);
  }
  if (t.type != DType::I64 && t.type != DType::I32) {
    fail("{}: tensor '{}' has type {}, expected I64 or I32 token ids", file_.name(), name,
         dtype_name(t.type));
  }
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = 0;
    if (t.type == DType::I64) {
      std::memcpy(&id, t.data + i * 8, 8);
    } else {
      int32_t v = 0;
      std::memcpy(&v, t.data + i * 4, 4);
      id = v;
    }
    if (id < 0 || id >= limit)
      fail("{}: tensor '{}' holds token id {} at {}, outside [0, {})", file_.name(), name, id, i,
           limit);
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(id);
  }
  return ids;
}

void WeightLoader::check_multipliable(const gguf::TensorInfo& t) const {
  if (kernels::active_kernels().for_weight(t.type) == nullptr) {
    fail("{}: tensor '{}' has type {}, which inferd cannot multiply yet", file_.name(), t.name,
         dtype_name(t.type));
  }
}

const uint8_t* WeightLoader::take_out(const uint8_t* data, size_t bytes, bool copy) const {
  const uint8_t* kept = data;
  if (copy) {
    uint8_t* to = arena_->allocate(bytes, 64);
    std::memcpy(to, data, bytes);
    kept = to;
  }
  file_.release_pages(data, bytes);
  return kept;
}

}  // namespace inferd::model
