#include "server/api/lora_adapters.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "server/json/fields.h"
#include "util/error.h"

namespace inferd::server {

using json = nlohmann::ordered_json;
using json_fields::bad;

LoraRegistry::LoraRegistry(std::vector<LoraAdapterInfo> adapters) : adapters_(std::move(adapters)) {
  for (const LoraAdapterInfo& a : adapters_) scales_.push_back(a.scale);
}

std::optional<size_t> LoraRegistry::module_index(std::string_view name) const {
  for (size_t i = 0; i < adapters_.size(); ++i)
    if (!adapters_[i].name.empty() && adapters_[i].name == name) return i;
  return std::nullopt;
}

json LoraRegistry::list() const {
  std::vector<float> scales;
  {
    const std::lock_guard lock(mutex_);
    scales = scales_;
  }
  json out = json::array();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const LoraAdapterInfo& a = adapters_[i];
    json entry = {{"id", i},
                  {"path", a.path},
                  {"scale", scales[i]},
                  {"task_name", a.task_name},
                  {"prompt_prefix", a.prompt_prefix}};
    if (!a.name.empty()) entry["name"] = a.name;
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<float> LoraRegistry::scales_of(const json& list, const char* param) const {
  if (adapters_.empty() && !(list.is_array() && list.empty()))
    bad(param, "this server has no LoRA adapters (--lora, --lora-modules)");
  const std::string what = *param != '\0' ? fmt::format("'{}'", param) : "the request body";
  if (!list.is_array() ||
      !std::all_of(list.begin(), list.end(), [](const json& e) { return e.is_object(); }))
    bad(param, fmt::format("{} must be a list of {{\"id\", \"scale\"}} objects", what));
  std::vector<float> scales(adapters_.size(), 0.0f);
  for (const json& entry : list) {
    const json* id = json_fields::field(entry, "id");
    if (id == nullptr || !id->is_number_integer())
      bad(param, fmt::format("each entry of {} needs an integer 'id'", what));
    const int64_t i = id->get<int64_t>();
    if (i < 0 || i >= static_cast<int64_t>(adapters_.size()))
      bad(param, fmt::format("no LoRA adapter {}: the server has {} (ids 0 to {})", i,
                             adapters_.size(), adapters_.size() - 1));
    // As llama-server: a missing scale is 0.
    const json* scale = json_fields::field(entry, "scale");
    if (scale != nullptr && (!scale->is_number() || !std::isfinite(scale->get<double>())))
      bad(param, fmt::format("the 'scale' of LoRA adapter {} must be a number", i));
    scales[static_cast<size_t>(i)] = scale != nullptr ? scale->get<float>() : 0.0f;
  }
  return scales;
}

void LoraRegistry::set_scales(const json& body) {
  std::vector<float> scales = scales_of(body, "");
  const std::lock_guard lock(mutex_);
  scales_ = std::move(scales);
}

std::vector<float> LoraRegistry::request_scales(const json* lora, std::string_view model) const {
  // (An empty list is none, as llama-server has it: the server's scales.)
  if (lora != nullptr && !(lora->is_array() && lora->empty())) return scales_of(*lora, "lora");
  if (const std::optional<size_t> module = module_index(model)) {
    std::vector<float> scales(adapters_.size(), 0.0f);
    scales[*module] = 1.0f;
    return scales;
  }
  const std::lock_guard lock(mutex_);
  return scales_;
}

json LoraRegistry::describe(const std::vector<float>& scales) {
  json out = json::array();
  for (size_t i = 0; i < scales.size(); ++i) out.push_back({{"id", i}, {"scale", scales[i]}});
  return out;
}

LoraAdapterInfo parse_lora_module(const std::string& text) {
  LoraAdapterInfo info;
  info.scale = 0;  // applied when a request names it
  if (!text.empty() && text.front() == '{') {
    json module;
    try {
      module = json::parse(text);
    } catch (const json::exception& e) {
      fail("--lora-modules {}: {}", text, e.what());
    }
    const auto string_of = [&](const char* key) -> std::string {
      const json* v = json_fields::field(module, key);
      return v != nullptr && v->is_string() ? v->get<std::string>() : "";
    };
    info.name = string_of("name");
    info.path = string_of("path");
  } else if (const size_t eq = text.find('='); eq != std::string::npos) {
    info.name = text.substr(0, eq);
    info.path = text.substr(eq + 1);
  }
  if (info.name.empty() || info.path.empty())
    fail("--lora-modules takes NAME=PATH or {{\"name\": ..., \"path\": ...}}, got '{}'", text);
  return info;
}

void read_lora_metadata(LoraAdapterInfo& info) {
  const gguf::GgufFile file = gguf::GgufFile::open(info.path);
  info.task_name = file.get_string("adapter.lora.task_name").value_or("");
  info.prompt_prefix = file.get_string("adapter.lora.prompt_prefix").value_or("");
}

}  // namespace inferd::server
