// Weight look-up by GGUF tensor name with shape checks. An absent tensor or a wrong shape is
// an inferd::Error naming the tensor, the expected and the found shape. The loader remembers
// which tensors an architecture took, so that one it does not implement (a bias, a frequency
// table, a norm of a variant) stops the load instead of being silently ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "util/huge_pages.h"

namespace inferd::model {

class WeightLoader {
 public:
  explicit WeightLoader(const gguf::GgufFile& file)
      : file_(file), arena_(std::make_shared<HugePageArena>()) {}

  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  // What the model reads of the file is moved out of its map at load: packed matrices are
  // repacked, every other tensor (norms, biases, F32 routers, types without a packed layout)
  // is copied into the model's memory, and the file's pages are let go of
  // (GgufFile::release_pages). A model that fills most of RAM then never holds two copies, and
  // no decode step faults a page back in from the file after the kernel evicted it. Call this
  // first for a tensor whose rows are read in place (the token embeddings: one row a token);
  // it is packed only when it is `multiplied` too (an output tied to the embeddings).
  void keep_rows(const std::string& name, bool multiplied) { keep_rows_[name] = multiplied; }
  // Tensor parallelism (dist/model_parallel.h): rank `rank` of `ranks` takes its shard of a
  // tensor asked for with 1/ranks of the file's rows (its rows rank * rows ..), of its columns
  // (likewise; whole blocks of the weight type or an error naming the tensor) or of a vector's
  // values; a tensor asked for whole is taken whole.
  void shard(int rank, int ranks) {
    shard_rank_ = rank;
    shard_ranks_ = ranks;
  }
  // A [rows, cols] matrix (GGUF shape [cols, rows]) whose type the kernels can multiply.
  kernels::WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // Rows [row_begin, row_begin + rows) of a [total_rows, cols] matrix, as a matrix of its own:
  // the parts of a fused tensor (Phi-3's attn_qkv and gate/up ffn_up).
  kernels::WeightMatrix matrix_rows(const std::string& name, int64_t row_begin, int64_t rows,
                                    int64_t total_rows, int64_t cols) const;
  // Rows [row_begin, row_begin + rows) of each expert's [rows_per_expert, cols] matrix in a 3-D
  // tensor of n_experts of them (GGUF shape [cols, rows_per_expert, n_experts]), as one matrix
  // an expert: merged expert tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps; the gate and
  // up halves of ffn_gate_up_exps).
  // Expert parallelism: only experts [take_begin, take_end) are loaded (take_end -1: to the
  // last); the others' matrices are left empty (another rank holds them).
  std::vector<kernels::WeightMatrix> expert_matrices(const std::string& name, int64_t n_experts,
                                                     int64_t row_begin, int64_t rows,
                                                     int64_t rows_per_expert, int64_t cols,
                                                     int64_t take_begin = 0,
                                                     int64_t take_end = -1) const;
  // A 3-D tensor of n matrices of [rows, cols] (GGUF shape [cols, rows, n]) as one matrix of
  // n * rows rows: MLA's attn_v_b, a [value dims, kv_lora_rank] matrix a head.
  kernels::WeightMatrix stacked_matrix(const std::string& name, int64_t n, int64_t rows,
                                       int64_t cols) const;
  // The same tensor with each of its n matrices transposed, as one F32 matrix of n * cols rows
  // of `rows` values, made at load from the dequantized rows (exact, in 4 bytes a weight): MLA's
  // attn_k_b, [kv_lora_rank, nope dims] a head, which decompresses the keys read the other way.
  kernels::WeightMatrix transposed_stacked_f32(const std::string& name, int64_t n, int64_t rows,
                                               int64_t cols) const;
  // An F32 [rows, n] table (GGUF [n, rows]): the experts' biases (row e for expert e), a
  // convolution's taps (row c for channel c).
  const float* f32_rows(const std::string& name, int64_t rows, int64_t n) const;
  // An F32 vector of n values (norm weights).
  const float* vector(const std::string& name, int64_t n) const;
  // An I64 or I32 vector of n token ids (an EAGLE-3 head's d2t), each checked to lie in
  // [0, limit): copied out.
  std::vector<int32_t> token_ids(const std::string& name, int64_t n, int64_t limit) const;
  // The same for a tensor that a file may leave out (biases): nullptr when absent.
  const float* optional_vector(const std::string& name, int64_t n) const {
    return has(name) ? vector(name, n) : nullptr;
  }
  // The memory the weights handed out live in (packed matrices, copied vectors): a model keeps
  // it for as long as it uses them.
  std::shared_ptr<HugePageArena> memory() const { return arena_; }
  // Pipeline parallelism (dist/model_parallel.h): a tensor, or every tensor whose name starts
  // with `prefix` (a layer's "blk.N."), that another rank loads: counted as taken, not read.
  void skip(const std::string& name) const { used_.insert(name); }
  void skip_prefix(const std::string& prefix) const;
  // Fails naming the file's tensors that no call above took: call once all are loaded.
  void check_all_used() const;

 private:
  const gguf::TensorInfo& find(const std::string& name) const;
  // Tensor `name` of `n` matrices of [rows, cols] (GGUF [cols, rows, n]), or an error naming it.
  const gguf::TensorInfo& find_stacked(const std::string& name, int64_t n, int64_t rows,
                                       int64_t cols) const;
  // Rows [row_begin, row_begin + rows) of tensor t (rows of `cols` values), packed where the
  // kernels pack its type.
  kernels::WeightMatrix take_rows(const gguf::TensorInfo& t, const std::string& name,
                                  int64_t row_begin, int64_t rows, int64_t cols) const;
  // shard(): this rank's columns of a [rows, cols x ranks] tensor, rows a whole row apart.
  kernels::WeightMatrix matrix_columns(const gguf::TensorInfo& t, int64_t rows, int64_t cols) const;
  int shard_rank_ = 0, shard_ranks_ = 1;
  // Fails naming a tensor whose type the kernels cannot multiply.
  void check_multipliable(const gguf::TensorInfo& t) const;
  // `bytes` of the file at `data`, copied into the arena when `copy` (else already repacked),
  // then released from the map; returns where the model reads them from now.
  const uint8_t* take_out(const uint8_t* data, size_t bytes, bool copy) const;
  const gguf::GgufFile& file_;
  mutable std::unordered_set<std::string> used_;
  std::unordered_map<std::string, bool> keep_rows_;  // name -> also multiplied
  // The packed matrices of one model, together in huge pages (util/huge_pages.h).
  std::shared_ptr<HugePageArena> arena_;
};

}  // namespace inferd::model
