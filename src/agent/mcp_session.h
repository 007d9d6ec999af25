// One running MCP server: a child process spoken to in JSON-RPC 2.0, one message per line on
// its stdin and stdout (MCP's stdio transport). Every wait is cut into short slices that look
// at a stop function, so a hung server, or a grandchild that keeps its pipes open, never holds
// up the caller past its deadline nor a shutdown past a slice. Not thread-safe: its owner
// (McpServers) lets one call at a time through.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/mcp_config.h"
#include "util/error.h"
#include "util/subprocess.h"

namespace inferd::agent {

// Why a request brought no result.
class McpFailure : public inferd::Error {
 public:
  enum class Kind {
    kRemote,    // the server answered with a JSON-RPC error; the session is still usable
    kGone,      // the process ended or closed its pipes before answering
    kTimeout,   // no answer before the deadline
    kStopped,   // the caller, or the server's shutdown, ended the wait
    kProtocol,  // a line past the size cap: the stream can no longer be trusted
  };
  McpFailure(Kind kind, const std::string& message) : inferd::Error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct McpToolDef {
  std::string name;  // as the MCP server names it, without the "SERVER_" prefix
  std::string description;
  nlohmann::json input_schema;  // always an object schema
};

class McpSession {
 public:
  using Clock = std::chrono::steady_clock;
  using StopFn = std::function<bool()>;

  // Messages longer than this fail the request: a server that never writes a newline must not
  // fill the server's memory.
  static constexpr size_t kMaxLineBytes = 16u << 20;
  // The longest a wait goes without looking at the stop function.
  static constexpr std::chrono::milliseconds kSlice{50};

  // Starts the server (stderr: the server's own). Throws inferd::Error when it cannot start.
  explicit McpSession(const McpServerConfig& config);
  McpSession(const McpSession&) = delete;
  McpSession& operator=(const McpSession&) = delete;
  // Kills the server's process group (what it started too) and reaps it.
  ~McpSession() = default;

  // Each request below returns its result or throws McpFailure.
  // The handshake: "initialize", then the "notifications/initialized" notification.
  void initialize(Clock::time_point deadline, const StopFn& stop);
  // "tools/list", every page of it.
  std::vector<McpToolDef> list_tools(Clock::time_point deadline, const StopFn& stop);
  // "tools/call": the result object ({"content": [...], "isError"?: bool, ...}).
  nlohmann::json call_tool(const std::string& tool, const nlohmann::json& arguments,
                           Clock::time_point deadline, const StopFn& stop);

  // Whether the process has ended. It is not reaped here, so its process group id stays
  // reserved and the destructor's kill still reaches a grandchild left in the group.
  bool exited() const;
  // A polite end: closes its stdin (MCP's stdio shutdown), gives it up to `grace` to exit,
  // then kills the group.
  void close(std::chrono::milliseconds grace);

 private:
  nlohmann::json request(std::string_view method, nlohmann::json params, Clock::time_point deadline,
                         const StopFn& stop);
  void send(const nlohmann::json& message, Clock::time_point deadline, const StopFn& stop);
  // The next message the server writes (lines that are not JSON objects are skipped).
  nlohmann::json receive(Clock::time_point deadline, const StopFn& stop);
  // Answers a request the server made of us, so that it never waits on us.
  void answer_server_request(const nlohmann::json& message, Clock::time_point deadline,
                             const StopFn& stop);
  // Throws kStopped or kTimeout when the wait must end.
  void check_wait(Clock::time_point deadline, const StopFn& stop, std::string_view what) const;

  std::string name_;
  util::Subprocess process_;
  int64_t next_id_ = 1;
  std::string pending_;  // bytes read but not yet cut into lines
  size_t scanned_ = 0;   // pending_[0, scanned_) has no newline: not searched again
};

}  // namespace inferd::agent
