#include "quant/quantize_file.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"
#include "quant/quantize.h"
#include "util/error.h"

namespace inferd::quant {
namespace {

// The output is written this many bytes of converted rows at a time.
constexpr uint64_t kSlabBytes = 64ull << 20;
// Rows are handed to the threads in runs of about this many values.
constexpr int64_t kValuesPerTask = 32 * 1024;

bool is_block_quantized(DType t) {
  return t != DType::F32 && t != DType::F16 && t != DType::BF16;
}

// An integer key, or the first element of an integer array (per-layer head counts).
int64_t int_or_first(const gguf::GgufFile& file, const std::string& key, int64_t fallback) {
  const gguf::Value* v = file.find(key);
  if (v == nullptr) return fallback;
  if (const gguf::Array* a = v->as_array()) {
    if (a->items.empty()) return fallback;
    return a->items[0].as_int().value_or(fallback);
  }
  return v->as_int().value_or(fallback);
}

ModelShape model_shape(const gguf::GgufFile& file) {
  ModelShape m;
  m.arch = file.get_string("general.architecture").value_or("");
  const std::string p = m.arch + ".";
  m.n_layer = int_or_first(file, p + "block_count", 0);
  m.n_head = int_or_first(file, p + "attention.head_count", 0);
  m.n_head_kv = int_or_first(file, p + "attention.head_count_kv", m.n_head);
  m.n_expert = int_or_first(file, p + "expert_count", 0);
  return m;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

// Converts one tensor's rows (any type the reference kernels expand) to `to`, slab by slab.
void convert_tensor(const gguf::TensorInfo& t, DType to, ThreadPool& pool,
                    gguf::GgufStreamWriter& out) {
  const int64_t n_per_row = static_cast<int64_t>(t.shape[0]);
  const int64_t rows = static_cast<int64_t>(t.num_elements()) / n_per_row;
  const uint64_t row_in = *row_bytes(t.type, n_per_row);
  const uint64_t row_out = *row_bytes(to, n_per_row);
  const kernels::DequantizeRowFn expand =
      kernels::reference_kernels().for_weight(t.type)->dequantize;
  const QuantizeFn quantize = quantizer_for(to);

  const int64_t slab_rows =
      std::clamp<int64_t>(static_cast<int64_t>(kSlabBytes / std::max(row_in, row_out)), 1, rows);
  const int64_t task_rows = std::max<int64_t>(1, kValuesPerTask / n_per_row);
  std::vector<uint8_t> slab(static_cast<size_t>(slab_rows * row_out));
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.num_threads()),
                                          std::vector<float>(static_cast<size_t>(n_per_row)));
  for (int64_t first = 0; first < rows; first += slab_rows) {
    const int64_t n = std::min(slab_rows, rows - first);
    std::atomic<int64_t> next{0};
    pool.run([&](int thread, int) {
      float* x = scratch[static_cast<size_t>(thread)].data();
      for (int64_t begin = next.fetch_add(task_rows); begin < n;
           begin = next.fetch_add(task_rows)) {
        const int64_t end = std::min(n, begin + task_rows);
        for (int64_t r = begin; r < end; ++r) {
          expand(t.data + static_cast<uint64_t>(first + r) * row_in, x, n_per_row);
          quantize(x, slab.data() + static_cast<uint64_t>(r) * row_out, n_per_row);
        }
      }
    });
    out.write({slab.data(), static_cast<size_t>(static_cast<uint64_t>(n) * row_out)});
  }
}

}  // namespace

QuantizeSummary quantize_file(const std::string& input, const std::string& output,
                              const QuantizeOptions& options, ThreadPool& pool,
                              const std::function<void(const TensorReport&)>& on_tensor,
                              const std::function<void()>& on_checked) {
  if (same_file(input, output)) fail("the output '{}' is the input file", output);
  const gguf::GgufFile file = gguf::GgufFile::open(input);
  if (int_or_first(file, "split.count", 1) > 1) {
    fail("{}: split models are not supported (merge the parts with llama-gguf-split first)", input);
  }

  std::vector<TensorDesc> descs;
  for (const gguf::TensorInfo& t : file.tensors()) descs.push_back({t.name, t.type, t.shape});
  const std::vector<TypeChoice> choices =
      choose_types(model_shape(file), descs, options.file_type, options.pure);
  const std::vector<size_t> order = processing_order(descs);

  // Every conversion is checked before a byte is written.
  for (size_t i = 0; i < descs.size(); ++i) {
    const gguf::TensorInfo& t = file.tensors()[i];
    const DType to = choices[i].type;
    if (to == t.type) continue;
    if (is_block_quantized(t.type) && !options.allow_requantize) {
      fail(
          "tensor '{}' is already quantized ({}); pass --allow-requantize to convert it to {} "
          "(quality suffers from quantizing twice)",
          t.name, dtype_name(t.type), dtype_name(to));
    }
    const kernels::WeightKernels* k = kernels::reference_kernels().for_weight(t.type);
    if (k == nullptr || k->dequantize == nullptr) {
      fail("tensor '{}': cannot read {} tensors to convert them to {}", t.name, dtype_name(t.type),
           dtype_name(to));
    }
    if (quantizer_for(to) == nullptr) {
      fail("tensor '{}': cannot write {} tensors", t.name, dtype_name(to));
    }
    if (t.shape.empty() || t.shape[0] == 0) fail("tensor '{}' has no rows", t.name);
  }

  gguf::GgufWriter header(3, static_cast<uint32_t>(file.alignment()));
  for (const auto& [key, value] : file.metadata()) {
    if (key == "general.alignment" || key == "general.quantization_version" ||
        key == "general.file_type" || key.rfind("split.", 0) == 0) {
      continue;
    }
    header.set(key, value);
  }
  header.set_u32("general.quantization_version", 2);
  header.set_u32("general.file_type", static_cast<uint32_t>(options.file_type));
  for (size_t i : order) header.declare_tensor(descs[i].name, choices[i].type, descs[i].shape);

  QuantizeSummary summary;
  summary.tensors = order.size();
  summary.file_bytes_in = file.file_size();
  gguf::GgufStreamWriter out(header, output);
  if (on_checked) on_checked();
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const gguf::TensorInfo& t = file.tensors()[i];
    const DType to = choices[i].type;
    if (to == t.type) {
      out.write({t.data, static_cast<size_t>(t.num_bytes)});
    } else {
      convert_tensor(t, to, pool, out);
    }
    TensorReport report;
    report.index = k;
    report.count = order.size();
    report.name = t.name;
    report.shape = t.shape_string();
    report.from = t.type;
    report.to = to;
    report.fell_back = choices[i].fell_back;
    report.wanted = choices[i].wanted;
    report.bytes_in = t.num_bytes;
    report.bytes_out = *row_bytes(to, t.num_elements());
    summary.elements += t.num_elements();
    summary.tensor_bytes_in += report.bytes_in;
    summary.tensor_bytes_out += report.bytes_out;
    if (report.fell_back) ++summary.fallbacks;
    if (on_tensor) on_tensor(report);
  }
  summary.file_bytes_out = out.position();
  out.finish();
  return summary;
}

}  // namespace inferd::quant
