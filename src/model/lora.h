// LoRA adapters (llama.cpp's GGUF form: general.type "adapter", adapter.type "lora",
// adapter.lora.alpha; for each adapted weight W [out, in] a pair `W.lora_a` [rank, in] and
// `W.lora_b` [out, rank]). A layer then computes W x + s B (A x) with s = scale * alpha / rank
// (alpha 0: scale), as llama.cpp's `--lora-scaled FILE:SCALE` does. The pairs are kept beside
// the base weights, which stay as they are (quantized weights cannot take the product exactly).
// Each sequence of a batch may give every adapter a scale of its own (BatchSequence::
// lora_scales: llama-server's per-request `lora`, vLLM's adapter chosen by model name), so
// requests with different adapters share a step; a sequence that gives none takes the specs'.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "model/batch.h"
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
  // One more adapter, read as the constructor reads them; its pairs wait for bind() (and
  // check_all_bound(), then reserve()), between forward passes.
  void add(const LoraSpec& spec, const std::string& architecture);
  // Forgets the adapter added last, bound or not (an add whose binding failed).
  void drop_last();

  // The pairs for the weight named `name` (e.g. "blk.3.attn_q.weight") now apply to `w`, whose
  // shape they must match.
  void bind(const std::string& name, const kernels::WeightMatrix* w);
  // Throws naming a pair that no weight took (a tensor inferd does not adapt, or one absent
  // from the model).
  void check_all_bound() const;
  // Sizes the work lists once bound, for batches of up to max_tokens tokens.
  void reserve(int64_t max_tokens);

  // How many adapters (the specs' count, in their order: the index of a scale).
  size_t size() const { return default_scales_.size(); }
  // Each spec's scale, what a sequence without lora_scales of its own takes.
  std::span<const float> default_scales() const { return default_scales_; }

  // The scale of every adapter for each token of `batch`, from its sequence's lora_scales
  // (the defaults where it has none), for the applies of the forward pass that follows.
  void begin_batch(const Batch& batch);

  // y[T, w.rows] += s B (A x) for every adapter of `w` (nothing when it has none), s from the
  // token's scale of that adapter (begin_batch; none for a scale of 0); x: [T, w.cols], T the
  // tokens of the batch begin_batch was given, in its order.
  void apply(const kernels::WeightMatrix* w, const float* x, int64_t T, float* y, ThreadPool& pool);
  // The same for weights that share their input (q/k/v, gate/up), in one parallel region over
  // the tokens (none for a few tokens: a decode step's products are a few microseconds).
  void apply_many(std::span<const kernels::MatmulTarget> targets, const float* x, int64_t T,
                  ThreadPool& pool);

 private:
  struct Pair {
    std::string file;
    size_t adapter = 0;           // index of its spec (of a token's scales)
    std::vector<float> a;         // [rank, in]
    std::vector<float> b_by_col;  // [rank, out]: B's columns, times alpha / rank (1 for alpha 0)
    int64_t rank = 0, in = 0, out = 0;
  };
  std::vector<float> default_scales_;       // [adapters]
  std::vector<const float*> token_scales_;  // [max_tokens]: [adapters] each, by begin_batch
  bool any_scale_ = false;                  // some token of the batch has a scale not 0
  std::map<std::string, std::vector<Pair>> pending_;  // by weight name, until bound
  std::map<const kernels::WeightMatrix*, std::vector<Pair>> bound_;
  // Tokens a step at most that apply_few takes (a decode step's).
  static constexpr int64_t kFewTokens = 16;
  // Which pairs an apply_many call runs, and where each adds its product (sized by reserve()).
  struct Job {
    const Pair* pair;
    float* y;
    // apply_few: the tokens with a scale for the pair's adapter, their scales, their s A x
    // ([n, rank] in few_low_), and where the pair's rank rows and outputs start in the step's
    // flat lists of them.
    int64_t n = 0;
    int64_t tokens[kFewTokens] = {};
    float scales[kFewTokens] = {};
    float* low = nullptr;
    int64_t first_row = 0, first_out = 0;
  };
  std::vector<Job> jobs_;
  std::vector<float> few_low_;  // [jobs, kFewTokens, rank] at most
  // apply_many for a few tokens on several threads: every pair's rank dots split over them,
  // then its outputs; each value as apply_many's one-thread-a-token path computes it.
  void apply_few(const float* x, int64_t T, ThreadPool& pool);
};

}  // namespace inferd::model
