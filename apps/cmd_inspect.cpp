// `inferd inspect MODEL`: what a GGUF file holds: architecture, hyperparameters, tokenizer,
// chat template, the tensor table and bytes per tensor type; the file type (quantization mix) by
// llama-quantize's name.
#include <map>

#include <fmt/format.h>

#include "commands.h"
#include "gguf/gguf.h"
#include "quant/type_policy.h"

namespace inferd::app {
namespace {

void print_metadata(const gguf::GgufFile& file, bool all) {
  std::string arch = file.get_string("general.architecture").value_or("(none)");
  fmt::print("architecture: {}\n", arch);
  if (auto name = file.get_string("general.name")) fmt::print("name: {}\n", *name);
  if (auto file_type = file.get_int("general.file_type")) {
    auto type_name = *file_type >= 0 && *file_type <= UINT32_MAX
                         ? quant::file_type_name(static_cast<uint32_t>(*file_type))
                         : std::nullopt;
    fmt::print("file type: {} ({})\n", type_name.value_or("unknown"), *file_type);
  }
  fmt::print("GGUF version {}, {} metadata entries, {} tensors, alignment {}\n\n", file.version(),
             file.metadata().size(), file.tensors().size(), file.alignment());
  fmt::print("hyperparameters:\n");
  std::string prefix = arch + ".";
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind(prefix, 0) == 0) fmt::print("  {:<44} {}\n", key, value.to_string());
  }
  fmt::print("\ntokenizer:\n");
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind("tokenizer.", 0) != 0 || key == "tokenizer.chat_template") continue;
    if (const gguf::Array* array = value.as_array()) {
      fmt::print("  {:<44} {} x {}\n", key, array->items.size(),
                 gguf::value_type_name(array->element_type));
    } else {
      fmt::print("  {:<44} {}\n", key, value.to_string());
    }
  }
  auto chat_template = file.get_string("tokenizer.chat_template");
  fmt::print("\nchat template: {}\n",
             chat_template ? fmt::format("present ({} bytes)", chat_template->size()) : "absent");
  if (all) {
    fmt::print("\nall metadata:\n");
    for (const auto& [key, value] : file.metadata()) {
      fmt::print("  {:<44} {}\n", key, value.to_string());
    }
  }
}

void print_tensors(const gguf::GgufFile& file) {
  fmt::print("\ntensors:\n  {:<36} {:<6} {:<22} {:>12}\n", "name", "type", "shape", "bytes");
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // name -> (count, bytes)
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    fmt::print("  {:<36} {:<6} {:<22} {:>12}\n", t.name, dtype_name(t.type), t.shape_string(),
               t.num_bytes);
    auto& entry = by_type[std::string(dtype_name(t.type))];
    entry.first += 1;
    entry.second += t.num_bytes;
    total += t.num_bytes;
  }
  fmt::print("\nbytes per type:\n");
  for (const auto& [type, entry] : by_type) {
    fmt::print("  {:<6} {:>4} tensors {:>12} bytes ({:.1f} MiB)\n", type, entry.first, entry.second,
               entry.second / 1048576.0);
  }
  fmt::print("  total  {:>4} tensors {:>12} bytes ({:.1f} MiB)\n", file.tensors().size(), total,
             total / 1048576.0);
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensor table");
  auto model = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("model", *model, "GGUF file (default: the fetched SmolLM2)");
  cmd->add_flag("--all", *all, "Print every metadata entry");
  cmd->callback([model, all] {
    std::string path = model->empty() ? default_model_path() : *model;
    gguf::GgufFile file = gguf::GgufFile::open(path);
    fmt::print("file: {} ({} bytes)\n", path, file.file_size());
    print_metadata(file, *all);
    print_tensors(file);
  });
}

}  // namespace inferd::app
