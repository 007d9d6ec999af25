#include "agent/tool_set.h"

#include <fmt/format.h>

#include "agent/builtin_tools.h"
#include "agent/mcp_client.h"
#include "agent/mcp_config.h"
#include "agent/tool_runtime.h"

namespace inferd::agent {

ToolSet::ToolSet(const AgentOptions& options) {
  if (!options.tools.empty()) {
    for (std::unique_ptr<Tool>& tool : make_builtin_tools(options.tools)) add(std::move(tool));
  }
  if (!options.tools_runtime.empty())
    runtime_ = std::make_unique<ToolsRuntime>(options.tools_runtime);
  if (!options.mcp_servers_config.empty() || !options.mcp_servers_json.empty()) {
    mcp_ = std::make_unique<McpServers>(
        load_mcp_config(options.mcp_servers_config, options.mcp_servers_json));
    mcp_->warm_up();
    for (std::unique_ptr<Tool>& tool : mcp_->tools()) add(std::move(tool));
  }
}

ToolSet::~ToolSet() {
  stop();
}

void ToolSet::add(std::unique_ptr<Tool> tool) {
  if (find(tool->name()) != nullptr) {
    fmt::print(stderr, "[inferd] tools: '{}' is offered twice; the first one is kept\n",
               tool->name());
    return;
  }
  tools_.push_back(std::move(tool));
}

Tool* ToolSet::find(std::string_view name) const {
  for (const std::unique_ptr<Tool>& tool : tools_) {
    if (tool->name() == name) return tool.get();
  }
  return nullptr;
}

nlohmann::ordered_json ToolSet::list() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const std::unique_ptr<Tool>& tool : tools_) out.push_back(tool->info());
  return out;
}

std::string ToolSet::default_runtime() const {
  return runtime_ ? runtime_->spec() : std::string();
}

void ToolSet::stop() {
  stopping_.store(true);
  if (mcp_) mcp_->shutdown();
}

}  // namespace inferd::agent
