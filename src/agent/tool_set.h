// The tools a server offers at /tools: the built-in ones --tools names, then those of the MCP
// servers in --mcp-servers-json / --mcp-servers-config, looked up by name. Owns the MCP
// servers' processes; stop() ends every call in flight and every process, promptly.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/tool.h"

namespace inferd::agent {

class McpServers;
class ToolsRuntime;

struct AgentOptions {
  std::string tools;               // --tools: "all" or a comma-separated list; empty: none
  std::string tools_runtime;       // --tools-runtime: where commands run by default
  std::string mcp_servers_json;    // --mcp-servers-json: the config inline
  std::string mcp_servers_config;  // --mcp-servers-config: the config's file
  bool enabled() const {
    return !tools.empty() || !mcp_servers_json.empty() || !mcp_servers_config.empty();
  }
};

class ToolSet {
 public:
  // Builds the built-in tools and reads the MCP config (a bad list, runtime or config throws
  // inferd::Error naming it: the server does not start), then starts each MCP server once to
  // learn its tools (one that fails is named on stderr and left out).
  explicit ToolSet(const AgentOptions& options);
  ~ToolSet();
  ToolSet(const ToolSet&) = delete;
  ToolSet& operator=(const ToolSet&) = delete;

  // nullptr when no tool has that name.
  Tool* find(std::string_view name) const;
  // GET /tools' answer: each tool's info(), built-in ones first.
  nlohmann::ordered_json list() const;
  // --tools-runtime: the runtime of calls whose request names none ("" for the host).
  std::string default_runtime() const;
  const std::atomic<bool>* stopping() const { return &stopping_; }
  // Only sets the flag (safe in a signal handler): calls in flight end at their next check.
  void request_stop() { stopping_.store(true); }
  // Ends calls in flight (they answer an error) and stops every MCP server.
  void stop();

 private:
  void add(std::unique_ptr<Tool> tool);

  std::vector<std::unique_ptr<Tool>> tools_;
  std::unique_ptr<McpServers> mcp_;
  std::unique_ptr<ToolsRuntime> runtime_;
  std::atomic<bool> stopping_{false};
};

}  // namespace inferd::agent
