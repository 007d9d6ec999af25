// `inferd dequantize MODEL --out PATH`: a developer command that expands tensors to float32 with
// the kernels' dequantizers (the active table, INFERD_ISA picks another) and writes them raw,
// little-endian, back to back: every tensor in file order, or the --tensor names in the order
// given. `--out -` writes to stdout, so a checker can compare against another implementation
// tensor by tensor without the floats touching the disk (tests/golden/quant/check-dequant).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "util/error.h"

namespace inferd::app {
namespace {

struct DequantizeOptions {
  std::string model;
  std::string out;
  std::vector<std::string> tensors;
};

// Rows per write: a few MiB of floats at a time, whatever the tensor's size.
constexpr uint64_t kChunkFloats = uint64_t{1} << 20;

void write_tensor(const gguf::GgufFile& file, const gguf::TensorInfo& t, std::FILE* out,
                  std::vector<float>& buffer) {
  const kernels::WeightKernels* k = kernels::active_kernels().for_weight(t.type);
  if (k == nullptr) {
    fail("{}: tensor '{}' has type {}, which inferd cannot dequantize", file.name(), t.name,
         dtype_name(t.type));
  }
  const uint64_t cols = t.shape[0];
  const uint64_t rows = t.num_elements() / cols;
  const auto row_size = static_cast<size_t>(*row_bytes(t.type, cols));
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkFloats / cols);
  buffer.resize(static_cast<size_t>(std::min(rows, rows_per_chunk) * cols));
  for (uint64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const uint64_t n_rows = std::min(rows_per_chunk, rows - r0);
    for (uint64_t r = 0; r < n_rows; ++r) {
      k->dequantize(t.data + (r0 + r) * row_size, buffer.data() + r * cols,
                    static_cast<int64_t>(cols));
    }
    const auto count = static_cast<size_t>(n_rows * cols);
    if (std::fwrite(buffer.data(), sizeof(float), count, out) != count)
      fail("dequantize: writing tensor '{}' failed", t.name);
  }
}

void run_dequantize(const DequantizeOptions& o) {
  gguf::GgufFile file = gguf::GgufFile::open(o.model);
  std::vector<const gguf::TensorInfo*> selected;
  if (o.tensors.empty()) {
    for (const gguf::TensorInfo& t : file.tensors()) selected.push_back(&t);
  } else {
    for (const std::string& name : o.tensors) {
      const gguf::TensorInfo* t = file.find_tensor(name);
      if (t == nullptr) fail("{}: no tensor '{}'", file.name(), name);
      selected.push_back(t);
    }
  }
  const bool to_stdout = o.out == "-";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(
      to_stdout ? nullptr : std::fopen(o.out.c_str(), "wb"), &std::fclose);
  if (!to_stdout && owned == nullptr) fail("dequantize: cannot write '{}'", o.out);
  std::FILE* out = to_stdout ? stdout : owned.get();
  std::vector<float> buffer;
  for (const gguf::TensorInfo* t : selected) write_tensor(file, *t, out, buffer);
  if (std::fflush(out) != 0) fail("dequantize: writing '{}' failed", o.out);
}

}  // namespace

void register_dequantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("dequantize",
                                 "Write tensors of a GGUF file as raw float32 (a developer tool)");
  auto o = std::make_shared<DequantizeOptions>();
  cmd->add_option("model", o->model, "GGUF file")->required();
  cmd->add_option("--out", o->out, "Output file, - for stdout")->required();
  cmd->add_option("--tensor", o->tensors, "Only these tensors, in this order (repeatable)");
  cmd->callback([o] { run_dequantize(*o); });
}

}  // namespace inferd::app
