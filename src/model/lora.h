// LoRA adapters (llama.cpp's GGUF form: general.type "adapter", adapter.type "lora",
// adapter.lora.alpha; for each adapted weight W [out, in] a pair `W.lora_a` [rank, in] and
// `W.lora_b` [out, rank]). A layer then computes W x + s B (A x) with s = scale * alpha / rank
// (alpha 0: scale), as llama.cpp's `--lora-scaled FILE:SCALE` does. The pairs are kept beside
// the base weights, which stay as they are (quantized weights cannot take the product exactly).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "util/thread_pool.h"

namespace inferd::model {

struct LoraSpec {
  std::string path;
  float scale = 1.0f;
};

class LoraAdapters {
 public:
  static constexpr int64_t kMaxRank = 1024;

  LoraAdapters() = default;
  // Reads every adapter (an inferd::Error names the file and what is wrong: not an adapter,
  // another architecture than `architecture`, an activated LoRA, a tensor that is not a lora_a
  // / lora_b pair, ranks that disagree).
  LoraAdapters(const std::vector<LoraSpec>& specs, const std::string& architecture);

  // The pairs for the weight named `name` (e.g. "blk.3.attn_q.weight") now apply to `w`, whose
  // shape they must match.
  void bind(const std::string& name, const kernels::WeightMatrix* w);
  // Throws naming a pair that no weight took (a tensor inferd does not adapt, or one absent
  // from the model).
  void check_all_bound() const;
  // Sizes the work lists once bound.
  void reserve();

  // y[T, w.rows] += s B (A x) for every adapter of `w` (nothing when it has none);
  // x: [T, w.cols].
  void apply(const kernels::WeightMatrix* w, const float* x, int64_t T, float* y, ThreadPool& pool);
  // The same for weights that share their input (q/k/v, gate/up), in one parallel region over
  // the tokens (none for a few tokens: a decode step's products are a few microseconds).
  void apply_many(std::span<const kernels::MatmulTarget> targets, const float* x, int64_t T,
                  ThreadPool& pool);

 private:
  struct Pair {
    std::string file;
    std::vector<float> a;         // [rank, in]
    std::vector<float> b_by_col;  // [rank, out]: B's columns, times s
    int64_t rank = 0, in = 0, out = 0;
  };
  std::map<std::string, std::vector<Pair>> pending_;  // by weight name, until bound
  std::map<const kernels::WeightMatrix*, std::vector<Pair>> bound_;
  // Which pairs an apply_many call runs, and where each adds its product (sized by reserve()).
  struct Job {
    const Pair* pair;
    float* y;
  };
  std::vector<Job> jobs_;
};

}  // namespace inferd::model
