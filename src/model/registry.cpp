#include "model/registry.h"

#include <fmt/ranges.h>

#include "util/error.h"

namespace inferd::model {
namespace {

using Factory = std::unique_ptr<Model> (*)(const gguf::GgufFile&, const ModelOptions&);
struct Entry {
  const char* architecture;
  Factory make;
};
constexpr Entry kArchitectures[] = {
    {"llama", make_llama},   {"qwen2", make_qwen2},   {"qwen3", make_qwen3},
    {"gemma2", make_gemma2}, {"gemma3", make_gemma3}, {"gemma4", make_gemma4}, {"phi3", make_phi3},
    {"qwen2moe", make_qwen2moe}, {"qwen3moe", make_qwen3moe}, {"gpt-oss", make_gpt_oss},
    {"qwen35", make_qwen35},     {"qwen35moe", make_qwen35moe}, {"qwen3next", make_qwen3next},
    {"glm4moe", make_glm4moe},   {"deepseek2", make_deepseek2},
    {"eagle3", make_eagle3},
};

}  // namespace

std::vector<std::string> known_architectures() {
  std::vector<std::string> out;
  for (const Entry& e : kArchitectures) out.emplace_back(e.architecture);
  return out;
}

std::unique_ptr<Model> load_model(const gguf::GgufFile& file, const ModelOptions& options) {
  std::string arch = file.architecture();
  for (const Entry& e : kArchitectures) {
    if (arch == e.architecture) return e.make(file, options);
  }
  fail("{}: unknown architecture '{}' (inferd runs: {})", file.name(), arch,
       fmt::join(known_architectures(), ", "));
}

}  // namespace inferd::model
