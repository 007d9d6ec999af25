// One tool an agent can call through the server (llama-server's GET/POST /tools): a built-in
// one (src/agent/builtin_tools.h: files, search, shell) or one an MCP server offers
// (src/agent/mcp_client.h). Off unless the server is started with --tools or an MCP config:
// these run commands and write files with the server's own rights.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace inferd::agent {

// A failure on the server's side of a call (an unknown runtime, a container id that looks like
// an option, a process that cannot be started): answered with HTTP 500. A tool's own failure
// (no such file, an edit that does not apply, bad parameters) is not thrown: the tool answers
// {"error": "..."} with HTTP 200, for the model to read and react to.
class ToolFailure : public inferd::Error {
 public:
  using inferd::Error::Error;
};

struct ToolCall {
  nlohmann::json params;  // the call's arguments, as the model wrote them
  // The x-tool-cwd header: relative paths and commands start there. It wins over a "cwd"
  // parameter (the runtime, not the model, decides where the tool runs). Empty: the server's.
  std::string cwd;
  // The x-tool-runtime header ("docker-container:ID", "podman-container:ID", "ssh:TARGET"),
  // else the server's --tools-runtime; empty: the host.
  std::string runtime;
  // Set when the client asked for a stream: the tool hands over its output as it comes.
  // False from it: the client is gone; stop (and kill what was started).
  std::function<bool(std::string_view chunk)> on_output;
  // Becomes true when the server shuts down: long waits end early.
  const std::atomic<bool>* stopping = nullptr;

  bool should_stop() const { return stopping != nullptr && stopping->load(); }
};

class Tool {
 public:
  virtual ~Tool() = default;
  // The name POST /tools calls it by.
  virtual const std::string& name() const = 0;
  // GET /tools' entry: {"tool", "display_name", "type": "server" | "mcp", "permissions":
  // {"write": bool}, "definition": {"type": "function", "function": {"name", "description",
  // "parameters": JSON schema}}}.
  virtual nlohmann::ordered_json info() const = 0;
  // Whether on_output is used (a stream asked of another tool is answered 404).
  virtual bool can_stream() const { return false; }
  // The answer: {"plain_text_response": TEXT} or a JSON object of the tool's own, {"error":
  // MESSAGE} when the tool failed. Throws ToolFailure (HTTP 500) as said above.
  virtual nlohmann::ordered_json invoke(const ToolCall& call) = 0;
};

}  // namespace inferd::agent
