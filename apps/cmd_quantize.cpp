// `inferd quantize IN OUT TYPE`: writes a copy of a GGUF model with its weights quantized as
// llama-quantize would (quant/quantize_file.h), one progress line per tensor and a size summary.
#include <fmt/format.h>

#include "commands.h"
#include "generation_options.h"
#include "quant/quantize_file.h"
#include "util/error.h"

namespace inferd::app {
namespace {

struct QuantizeArgs {
  std::string input;
  std::string output;
  std::string type;
  bool pure = false;
  bool allow_requantize = false;
  ThreadOptions threads;
};

double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void run_quantize(const QuantizeArgs& args) {
  auto file_type = quant::parse_file_type(args.type);
  if (!file_type) {
    fail("unknown quantization type '{}'; choose one of: {}", args.type,
         fmt::join(quant::file_type_names(), ", "));
  }
  quant::QuantizeOptions options;
  options.file_type = *file_type;
  options.pure = args.pure;
  options.allow_requantize = args.allow_requantize;
  ThreadPool pool(args.threads.count(), args.threads.pin());
  const std::string_view mix = *quant::file_type_name(static_cast<uint32_t>(*file_type));

  auto summary = quant::quantize_file(
      args.input, args.output, options, pool,
      [&](const quant::TensorReport& r) {
        std::string change =
            r.from == r.to
                ? fmt::format("{:>6} (kept)        ", dtype_name(r.from))
                : fmt::format("{:>6} -> {:<6}     ", dtype_name(r.from), dtype_name(r.to));
        std::string note =
            r.fell_back ? fmt::format("  ({} does not fit rows of {} values)", dtype_name(r.wanted),
                                      r.shape.substr(1, r.shape.find(',') - 1))
                        : "";
        int width = static_cast<int>(fmt::formatted_size("{}", r.count));
        fmt::print("[{:>{}}/{}] {:<36} {:<16} {} {:9.3f} MiB -> {:9.3f} MiB{}\n", r.index + 1,
                   width, r.count, r.name, r.shape, change, mib(r.bytes_in), mib(r.bytes_out),
                   note);
        std::fflush(stdout);
      },
      [&] {
        fmt::print("quantizing '{}' to '{}' as {}{} with {} threads\n", args.input, args.output,
                   mix, args.pure ? " (pure)" : "", pool.num_threads());
        std::fflush(stdout);
      });

  const double elements = static_cast<double>(std::max<uint64_t>(summary.elements, 1));
  fmt::print(
      "\ntensors: {:.2f} MiB ({:.2f} bits per weight) -> {:.2f} MiB ({:.2f} bits per weight)\n",
      mib(summary.tensor_bytes_in), summary.tensor_bytes_in * 8.0 / elements,
      mib(summary.tensor_bytes_out), summary.tensor_bytes_out * 8.0 / elements);
  fmt::print("file:    {} bytes -> {} bytes ({:.1f}%)\n", summary.file_bytes_in,
             summary.file_bytes_out,
             100.0 * static_cast<double>(summary.file_bytes_out) /
                 static_cast<double>(std::max<uint64_t>(summary.file_bytes_in, 1)));
  if (summary.fallbacks > 0) {
    fmt::print(
        "{} of {} tensors fell back to another type: their row length is not a multiple "
        "of the block size\n",
        summary.fallbacks, summary.tensors);
  }
}

}  // namespace

void register_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Write a copy of a GGUF model with quantized weights, as llama-quantize would (same "
      "per-tensor type rules and mixes; no importance matrix)");
  auto args = std::make_shared<QuantizeArgs>();
  cmd->add_option("input", args->input, "GGUF model to read (F32, F16 or BF16 weights)")
      ->required();
  cmd->add_option("output", args->output, "GGUF file to write")->required();
  cmd->add_option("type", args->type,
                  fmt::format("Quantization mix: {} (case-insensitive)",
                              fmt::join(quant::file_type_names(), ", ")))
      ->required();
  cmd->add_flag("--pure", args->pure,
                "One type for every 2-D weight: no per-tensor mix (output and embeddings "
                "included; row lengths the blocks do not divide still fall back)");
  cmd->add_flag("--allow-requantize", args->allow_requantize,
                "Accept weights that are already quantized (they are expanded first; quality "
                "suffers from quantizing twice)");
  args->threads.add_to(*cmd);
  cmd->footer(
      "No importance matrix is used or accepted: every weight counts by its own magnitude, as "
      "llama-quantize does without --imatrix.");
  cmd->callback([args] { run_quantize(*args); });
}

}  // namespace inferd::app
