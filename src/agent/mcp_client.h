// The tools of MCP servers (--mcp-servers-json, --mcp-servers-config) as agent tools, named
// SERVER_TOOL. Each server is started once at startup to learn its tools, then stopped; the
// first call to one of its tools starts it again and keeps it for the calls after. Calls to
// one server go one at a time (a stdio server answers in order); calls to different servers
// run side by side. A server that crashes is started again, one that hangs is killed when the
// call's timeout_ms runs out, and shutdown() ends everything within a fraction of a second.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "agent/mcp_config.h"
#include "agent/tool.h"

namespace inferd::agent {

class McpServer;  // one configured server (mcp_client.cpp)

struct McpOptions {
  // How long starting a server may take: the process, initialize and tools/list (a server run
  // through npx or uvx may first fetch its package). Not part of a call's timeout_ms.
  std::chrono::milliseconds start_timeout{10000};
  // How long a server asked to end (its stdin closed) gets before it is killed.
  std::chrono::milliseconds exit_grace{200};
};

class McpServers {
 public:
  explicit McpServers(std::vector<McpServerConfig> configs, McpOptions options = {});
  // shutdown(). The tools handed out stay safe to call: they answer an error.
  ~McpServers();
  McpServers(const McpServers&) = delete;
  McpServers& operator=(const McpServers&) = delete;

  // Starts every server (side by side), lists its tools and stops it. One that cannot start or
  // answer is named on stderr, in one line, and offers no tools; never throws.
  void warm_up();
  // One tool per tool listed at warm_up(); a name that two servers make alike is kept once.
  std::vector<std::unique_ptr<Tool>> tools() const;
  // Ends every call in flight (each answers an error) and kills every server's processes;
  // later calls answer an error. Returns within a few slices of 50 ms.
  void shutdown();

 private:
  std::vector<std::shared_ptr<McpServer>> servers_;
};

}  // namespace inferd::agent
