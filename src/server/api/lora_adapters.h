// The server's LoRA adapters (model/lora.h), as both peers let clients choose them:
// - llama-server: GET /lora-adapters lists them ({id, path, scale, ...}); POST /lora-adapters
//   [{id, scale}] sets the scales every request runs with (adapters not listed: 0); a request's
//   own `lora` [{id, scale}] replaces those for it (adapters not listed: 0);
// - vLLM: `--lora-modules NAME=PATH` gives an adapter a name that a request's "model" chooses
//   (scale 1, every other adapter 0), listed by GET /v1/models with its base model as parent.
// The engine applies each request's scales to its own tokens, so requests with different
// adapters share a step, and cached prompt blocks only with requests of the same scales.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inferd::server {

struct LoraAdapterInfo {
  std::string path;
  std::string name;  // vLLM's module name; empty for --lora / --lora-scaled ones
  float scale = 1;   // what requests get until POST /lora-adapters (modules: 0)
  // The adapter file's adapter.lora.task_name and adapter.lora.prompt_prefix (GET reports them,
  // as llama-server does; they change nothing).
  std::string task_name, prompt_prefix;
};

class LoraRegistry {
 public:
  LoraRegistry() = default;
  // The adapters in the engine's order (EngineConfig::lora: the same paths and scales).
  explicit LoraRegistry(std::vector<LoraAdapterInfo> adapters);

  size_t size() const { return adapters_.size(); }
  const std::vector<LoraAdapterInfo>& adapters() const { return adapters_; }
  // Whether `name` is a module's name (a request's "model" may then name it).
  bool has_module(std::string_view name) const { return module_index(name).has_value(); }

  // GET /lora-adapters: [{id, path, scale, task_name, prompt_prefix}], the scales as they are
  // now.
  nlohmann::ordered_json list() const;
  // POST /lora-adapters: [{id, scale}], every adapter not listed set to 0. ApiError (400) for a
  // body that is not such a list, an id that is no adapter's, a scale that is not a number, or
  // a list that is not empty on a registry without adapters.
  void set_scales(const nlohmann::ordered_json& body);

  // The scales a request runs with: its `lora` field (nullptr or []: none) when given, else the
  // module its `model` names, else the server's scales. ApiError (400, naming `lora`) for a bad
  // field. Empty when the server has no adapters.
  std::vector<float> request_scales(const nlohmann::ordered_json* lora,
                                    std::string_view model) const;
  // [{id, scale}] for each adapter, a request's scales (llama-server's generation_settings.lora).
  static nlohmann::ordered_json describe(const std::vector<float>& scales);

 private:
  // The adapter the module `name` is, if one is.
  std::optional<size_t> module_index(std::string_view name) const;
  // `list`'s [{id, scale}] entries as one scale per adapter (the others 0); `param` names the
  // field in errors ("": the request body).
  std::vector<float> scales_of(const nlohmann::ordered_json& list, const char* param) const;

  std::vector<LoraAdapterInfo> adapters_;
  mutable std::mutex mutex_;
  std::vector<float> scales_;  // the server's, set by POST /lora-adapters
};

// --lora-modules' entries: NAME=PATH, or vLLM's JSON form {"name": ..., "path": ...}.
// inferd::Error for another form.
LoraAdapterInfo parse_lora_module(const std::string& text);

// The file's task_name and prompt_prefix into `info` (an inferd::Error if it cannot be read).
void read_lora_metadata(LoraAdapterInfo& info);

}  // namespace inferd::server
