#include "model/lora.h"

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace inferd::model {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A 2-D tensor of the adapter as floats, row by row through the kernels' dequantization (any
// type the kernels read: F32, F16, BF16, Q8_0, ...).
std::vector<float> read_matrix(const gguf::TensorInfo& t, const std::string& file, int64_t& rows,
                               int64_t& cols) {
  if (t.shape.size() != 2)
    fail("{}: LoRA tensor {} is not a matrix ({})", file, t.name, t.shape_string());
  cols = static_cast<int64_t>(t.shape[0]);
  rows = static_cast<int64_t>(t.shape[1]);
  const std::optional<uint64_t> bytes = row_bytes(t.type, t.shape[0]);
  if (!bytes || *bytes * t.shape[1] != t.num_bytes)
    fail("{}: LoRA tensor {} of type {} and shape {} has no whole rows", file, t.name,
         dtype_name(t.type), t.shape_string());
  kernels::WeightMatrix view;
  view.type = t.type;
  view.rows = rows;
  view.cols = cols;
  view.row_bytes = *bytes;
  view.data = t.data;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    kernels::dequantize_row(view, r, &out[static_cast<size_t>(r * cols)]);
  return out;
}

}  // namespace

LoraAdapters::LoraAdapters(const std::vector<LoraSpec>& specs, const std::string& architecture) {
  for (const LoraSpec& spec : specs) add(spec, architecture);
}

void LoraAdapters::add(const LoraSpec& spec, const std::string& architecture) {
  if (!std::isfinite(spec.scale)) fail("{}: LoRA scale {} is not a number", spec.path, spec.scale);
  const size_t index = default_scales_.size();
  default_scales_.push_back(spec.scale);
  try {  // (nothing of a file that fails stays)
    const gguf::GgufFile file = gguf::GgufFile::open(spec.path);
    const std::string& name = spec.path;
    const std::string type = file.get_string("general.type").value_or("");
    if (type != "adapter")
      fail("{}: not a LoRA adapter (general.type is '{}', not 'adapter')", name, type);
    const std::string arch = file.get_string("general.architecture").value_or("");
    if (arch != architecture)
      fail("{}: a LoRA adapter for '{}', the model is '{}'", name, arch, architecture);
    const std::string adapter = file.get_string("adapter.type").value_or("");
    if (adapter != "lora")
      fail("{}: adapter.type '{}' is not implemented (only 'lora')", name, adapter);
    if (file.has("adapter.alora.invocation_tokens"))
      fail("{}: activated LoRA (adapter.alora.invocation_tokens) is not implemented", name);
    const float alpha = static_cast<float>(file.get_float("adapter.lora.alpha").value_or(0.0));
    std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
    for (const gguf::TensorInfo& t : file.tensors()) {
      if (ends_with(t.name, ".lora_a")) {
        pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
      } else if (ends_with(t.name, ".lora_b")) {
        pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
      } else {
        // (llama.cpp skips an adapter's norm vectors; they would change the output.)
        fail("{}: tensor {} is not a lora_a / lora_b matrix: not implemented", name, t.name);
      }
    }
    for (const auto& [weight, ab] : pairs) {
      if (ab.first == nullptr || ab.second == nullptr)
        fail("{}: {} has {} but not {}", name, weight, ab.first ? "lora_a" : "lora_b",
             ab.first ? "lora_b" : "lora_a");
      Pair p;
      p.file = name;
      p.adapter = index;
      int64_t a_rows = 0, b_cols = 0;
      p.a = read_matrix(*ab.first, name, a_rows, p.in);
      const std::vector<float> b = read_matrix(*ab.second, name, p.out, b_cols);
      if (a_rows != b_cols || a_rows <= 0)
        fail("{}: {}: lora_a has rank {} and lora_b {} (lora_a must be [in, rank] in ggml's order)",
             name, weight, a_rows, b_cols);
      p.rank = a_rows;
      if (p.rank > kMaxRank)
        fail("{}: {} has rank {}, above the {} inferd supports", name, weight, p.rank, kMaxRank);
      // alpha / rank folds into B, stored by column; the scale is the token's (begin_batch).
      const float s = alpha != 0.0f ? alpha / static_cast<float>(p.rank) : 1.0f;
      p.b_by_col.resize(b.size());
      for (int64_t o = 0; o < p.out; ++o)
        for (int64_t j = 0; j < p.rank; ++j)
          p.b_by_col[static_cast<size_t>(j * p.out + o)] =
              s * b[static_cast<size_t>(o * p.rank + j)];
      pending_[weight].push_back(std::move(p));
    }
  } catch (...) {
    drop_last();
    throw;
  }
}

void LoraAdapters::drop_last() {
  if (default_scales_.empty()) return;
  const size_t last = default_scales_.size() - 1;
  const auto drop = [last](auto& by_weight) {
    for (auto it = by_weight.begin(); it != by_weight.end();) {
      std::erase_if(it->second, [last](const Pair& p) { return p.adapter == last; });
      it = it->second.empty() ? by_weight.erase(it) : std::next(it);
    }
  };
  drop(pending_);
  drop(bound_);
  default_scales_.pop_back();
}

void LoraAdapters::bind(const std::string& name, const kernels::WeightMatrix* w) {
  const auto it = pending_.find(name);
  if (it == pending_.end() || w == nullptr) return;
  for (const Pair& p : it->second) {
    if (p.in != w->cols || p.out != w->rows)
      fail("{}: LoRA pair of {} is [{} x {}] over [{} x {}], the weight is [{} x {}]", p.file, name,
           p.out, p.rank, p.rank, p.in, w->rows, w->cols);
  }
  std::vector<Pair>& target = bound_[w];
  for (Pair& p : it->second) target.push_back(std::move(p));
  pending_.erase(it);
}

void LoraAdapters::check_all_bound() const {
  if (pending_.empty()) return;
  const auto& [name, pairs] = *pending_.begin();
  fail(
      "{}: LoRA pair for {}: the model has no such weight that inferd adapts (attention and "
      "dense feed-forward projections of the CPU decoder)",
      pairs.front().file, name);
}

void LoraAdapters::reserve(int64_t max_tokens) {
  size_t most_pairs = 0;
  int64_t most_rank = 0;
  for (const auto& [weight, pairs] : bound_) {
    most_pairs = std::max(most_pairs, pairs.size());
    for (const Pair& p : pairs) most_rank = std::max(most_rank, p.rank);
  }
  jobs_.reserve(3 * most_pairs);  // (q, k and v share an input; no more targets do)
  few_low_.resize(3 * most_pairs * static_cast<size_t>(kFewTokens * most_rank));
  token_scales_.assign(static_cast<size_t>(max_tokens), default_scales_.data());
}

void LoraAdapters::begin_batch(const Batch& batch) {
  any_scale_ = false;
  if (bound_.empty()) return;
  if (batch.num_tokens() > std::ssize(token_scales_))
    fail("LoRA: a batch of {} tokens, sized for {}", batch.num_tokens(), token_scales_.size());
  const auto any = [&](const float* scales) {
    return std::any_of(scales, scales + default_scales_.size(), [](float s) { return s != 0.0f; });
  };
  for (const BatchSequence& seq : batch.sequences) {
    const float* scales = seq.lora_scales != nullptr ? seq.lora_scales : default_scales_.data();
    any_scale_ = any_scale_ || any(scales);
    std::fill(token_scales_.begin() + seq.token_begin, token_scales_.begin() + seq.token_end,
              scales);
  }
}

void LoraAdapters::apply(const kernels::WeightMatrix* w, const float* x, int64_t T, float* y,
                         ThreadPool& pool) {
  const kernels::MatmulTarget target{w, y};
  apply_many(std::span(&target, 1), x, T, pool);
}

void LoraAdapters::apply_many(std::span<const kernels::MatmulTarget> targets, const float* x,
                              int64_t T, ThreadPool& pool) {
  if (!any_scale_) return;
  jobs_.clear();
  for (const kernels::MatmulTarget& t : targets) {
    const auto it = bound_.find(t.w);
    if (it == bound_.end()) continue;
    for (const Pair& p : it->second) jobs_.push_back({&p, t.y});
  }
  if (jobs_.empty()) return;
  if (T <= kFewTokens && pool.num_threads() > 1) return apply_few(x, T, pool);
  const kernels::KernelTable& table = kernels::active_kernels();
  constexpr int64_t kTokensPerThread = 16;
  pool.parallel_for(T, kTokensPerThread, [&](int64_t begin, int64_t end) {
    // A pair at a time over up to kBlock of the tokens that have a scale for its adapter: a row
    // of A and a column chunk of B are read once for them all. Each token's sums are those it
    // gets alone (its rank dots, then KernelTable::lora_up), whatever it is batched with.
    constexpr int64_t kBlock = 8;
    float low[kBlock * kMaxRank];  // [tokens, rank]: s A x of each
    float* rows[kBlock];           // their rows of y
    const float* inputs[kBlock];
    float scales[kBlock];
    for (const Job& job : jobs_) {
      const Pair& p = *job.pair;
      int64_t n = 0;
      const auto flush = [&] {
        for (int64_t j = 0; j < p.rank; ++j) {
          const float* a = &p.a[static_cast<size_t>(j * p.in)];
          for (int64_t i = 0; i < n; ++i)
            low[i * p.rank + j] = scales[i] * table.f32.dot(p.in, a, inputs[i]);
        }
        table.lora_up(n, p.rank, p.out, p.out, low, p.b_by_col.data(), rows);
        n = 0;
      };
      for (int64_t t = begin; t < end; ++t) {
        const float s = token_scales_[static_cast<size_t>(t)][p.adapter];
        if (s == 0.0f) continue;
        inputs[n] = x + t * p.in;
        rows[n] = job.y + t * p.out;
        scales[n++] = s;
        if (n == kBlock) flush();
      }
      if (n > 0) flush();
    }
  });
}

void LoraAdapters::apply_few(const float* x, int64_t T, ThreadPool& pool) {
  const kernels::KernelTable& table = kernels::active_kernels();
  int64_t rows = 0, outs = 0;
  float* low = few_low_.data();
  for (Job& job : jobs_) {
    const Pair& p = *job.pair;
    job.n = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float s = token_scales_[static_cast<size_t>(t)][p.adapter];
      if (s == 0.0f) continue;
      job.tokens[job.n] = t;
      job.scales[job.n++] = s;
    }
    job.low = low;
    low += job.n * p.rank;
    job.first_row = rows;
    if (job.n > 0) rows += p.rank;
    // Pairs of one weight (several adapters) add into the same outputs: one stretch of the
    // flat list, so that one thread adds all of them to an output, in the pairs' order.
    const bool same_target = &job != jobs_.data() && (&job - 1)->y == job.y;
    if (!same_target) outs += p.out;
    job.first_out = outs - p.out;
  }
  // s A x: row j of a pair's A for each of its tokens.
  pool.parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
    for (const Job& job : jobs_) {
      const Pair& p = *job.pair;
      if (job.n == 0) continue;
      const int64_t j_begin = std::max(begin, job.first_row) - job.first_row;
      const int64_t j_end = std::min(end, job.first_row + p.rank) - job.first_row;
      for (int64_t j = j_begin; j < j_end; ++j) {
        const float* a = &p.a[static_cast<size_t>(j * p.in)];
        for (int64_t i = 0; i < job.n; ++i)
          job.low[i * p.rank + j] =
              job.scales[i] * table.f32.dot(p.in, a, x + job.tokens[i] * p.in);
      }
    }
  });
  // y += (s A x) B^T, each thread a slice of the outputs.
  pool.parallel_for(outs, 64, [&](int64_t begin, int64_t end) {
    for (const Job& job : jobs_) {
      const Pair& p = *job.pair;
      if (job.n == 0) continue;
      const int64_t o_begin = std::max(begin, job.first_out) - job.first_out;
      const int64_t o_end = std::min(end, job.first_out + p.out) - job.first_out;
      if (o_begin >= o_end) continue;
      float* y_rows[kFewTokens];
      for (int64_t i = 0; i < job.n; ++i) y_rows[i] = job.y + job.tokens[i] * p.out + o_begin;
      table.lora_up(job.n, p.rank, o_end - o_begin, p.out, job.low, p.b_by_col.data() + o_begin,
                    y_rows);
    }
  });
}

}  // namespace inferd::model
