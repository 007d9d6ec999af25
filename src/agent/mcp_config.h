// The MCP servers a server starts (--mcp-servers-json, --mcp-servers-config), in the format
// Cursor and Claude Desktop use:
//   {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}, "cwd": "...",
//                            "timeout_ms": N}}}
// Only local (stdio) servers are run: an entry without "command" (a remote "url" one) is named
// on stderr and left out. Any other mistake throws inferd::Error: the server refuses to start
// rather than run without tools the user asked for.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::agent {

struct McpServerConfig {
  std::string name;  // its key under "mcpServers": the prefix of its tools' names
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;    // set over the server's own environment
  std::string cwd;                           // empty: the server's working directory
  std::chrono::milliseconds timeout{30000};  // how long one tool call may take
};

// Reads the JSON text of a config; `origin` names it in messages ("--mcp-servers-json").
std::vector<McpServerConfig> parse_mcp_config(std::string_view json_text, std::string_view origin);
// Reads a config file; one that cannot be read throws too.
std::vector<McpServerConfig> read_mcp_config_file(const std::string& path);
// Both options together (either may be empty): the file's servers, then the inline ones; a
// name given twice throws, since its tools' names would collide.
std::vector<McpServerConfig> load_mcp_config(const std::string& config_path,
                                             const std::string& json_text);

}  // namespace inferd::agent
