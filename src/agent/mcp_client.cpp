#include "agent/mcp_client.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/mcp_session.h"

namespace inferd::agent {

using nlohmann::json;
using nlohmann::ordered_json;
using Clock = McpSession::Clock;
using Kind = McpFailure::Kind;

class McpServer {
 public:
  McpServer(McpServerConfig config, McpOptions options)
      : config_(std::move(config)), options_(options) {}

  const std::string& name() const { return config_.name; }

  // Starts the server, learns its tools and stops it; on failure, one line on stderr.
  void warm_up();
  std::vector<McpToolDef> tools() const {
    std::lock_guard lock(mutex_);
    return tools_;
  }
  ordered_json call(const std::string& tool, const json& arguments, const ToolCall& call);
  // Step one of McpServers::shutdown(): every wait of this server's ends at its next slice.
  void begin_shutdown() { stopping_ = true; }
  // Step two: once the call in flight has given up, kills the process.
  void finish_shutdown() {
    std::lock_guard lock(mutex_);
    session_.reset();
  }

 private:
  // A started and initialized session; throws what stopped it.
  std::unique_ptr<McpSession> start(Clock::time_point deadline,
                                    const McpSession::StopFn& stop) const;
  ordered_json call_locked(const std::string& tool, const json& arguments,
                           const McpSession::StopFn& stop);

  const McpServerConfig config_;
  const McpOptions options_;
  std::atomic<bool> stopping_{false};
  // One request at a time on the pipes; timed, so that a call queued behind a slow one still
  // notices a shutdown.
  mutable std::timed_mutex mutex_;
  std::vector<McpToolDef> tools_;        // guarded by mutex_
  std::unique_ptr<McpSession> session_;  // guarded by mutex_; null until a call needs it
};

namespace {

ordered_json error_answer(const std::string& message) {
  return {{"error", message}};
}

// tools/call's result as a tool's answer: its text items, one per line.
ordered_json tool_answer(const json& result) {
  if (!result.is_object()) return error_answer("the MCP server's answer is not an object");
  std::string text;
  bool first = true;
  if (auto content = result.find("content"); content != result.end() && content->is_array()) {
    for (const json& item : *content) {
      if (!item.is_object() || item.value("type", json()) != "text") continue;
      auto item_text = item.find("text");
      if (item_text == item.end() || !item_text->is_string()) continue;
      if (!first) text += '\n';
      text += item_text->get<std::string>();
      first = false;
    }
  }
  const auto is_error = result.find("isError");
  if (is_error != result.end() && is_error->is_boolean() && is_error->get<bool>())
    return error_answer(text.empty() ? "the MCP tool reported an error" : text);
  return {{"plain_text_response", text}};
}

class McpTool : public Tool {
 public:
  McpTool(std::shared_ptr<McpServer> server, McpToolDef def)
      : server_(std::move(server)),
        def_(std::move(def)),
        name_(server_->name() + "_" + def_.name) {}

  const std::string& name() const override { return name_; }

  ordered_json info() const override {
    ordered_json function = {
        {"name", name_}, {"description", def_.description}, {"parameters", def_.input_schema}};
    return {{"tool", name_},
            {"display_name", name_},
            {"type", "mcp"},
            // What an MCP server does is its own: assume it may change things.
            {"permissions", {{"write", true}}},
            {"definition", {{"type", "function"}, {"function", std::move(function)}}}};
  }

  ordered_json invoke(const ToolCall& call) override {
    if (!call.params.is_null() && !call.params.is_object())
      return error_answer("the parameters must be a JSON object");
    const json arguments = call.params.is_null() ? json::object() : call.params;
    return server_->call(def_.name, arguments, call);
  }

 private:
  std::shared_ptr<McpServer> server_;  // shared: the tool may outlive McpServers
  McpToolDef def_;
  std::string name_;
};

}  // namespace

std::unique_ptr<McpSession> McpServer::start(Clock::time_point deadline,
                                             const McpSession::StopFn& stop) const {
  auto session = std::make_unique<McpSession>(config_);
  session->initialize(deadline, stop);
  return session;
}

void McpServer::warm_up() {
  const McpSession::StopFn stop = [this] { return stopping_.load(); };
  std::lock_guard lock(mutex_);
  try {
    const auto deadline = Clock::now() + options_.start_timeout;
    std::unique_ptr<McpSession> session = start(deadline, stop);
    tools_ = session->list_tools(deadline, stop);
    session->close(stopping_ ? std::chrono::milliseconds(0) : options_.exit_grace);
    fmt::print(stderr, "[inferd] MCP server '{}': {} tool{}\n", name(), tools_.size(),
               tools_.size() == 1 ? "" : "s");
  } catch (const std::exception& e) {
    // Never fatal: the server runs on without this one's tools.
    fmt::print(stderr, "[inferd] MCP server '{}' left out: {}\n", name(), e.what());
  }
}

ordered_json McpServer::call(const std::string& tool, const json& arguments, const ToolCall& call) {
  const McpSession::StopFn stop = [this, &call] { return stopping_ || call.should_stop(); };
  std::unique_lock lock(mutex_, std::defer_lock);
  while (!lock.try_lock_for(McpSession::kSlice)) {
    if (stop()) return error_answer(fmt::format("MCP server '{}' is shutting down", name()));
  }
  return call_locked(tool, arguments, stop);
}

ordered_json McpServer::call_locked(const std::string& tool, const json& arguments,
                                    const McpSession::StopFn& stop) {
  // A server that died while answering is started again and asked once more: the usual cause
  // is a crash left over from an earlier call, not this one.
  for (int attempt = 0;; ++attempt) {
    if (stop()) return error_answer(fmt::format("MCP server '{}' is shutting down", name()));
    // Ended since the last call (a crash, an exit): start anew rather than write to it.
    if (session_ && session_->exited()) session_.reset();
    bool started = session_ != nullptr;
    try {
      if (!started) session_ = start(Clock::now() + options_.start_timeout, stop);
      started = true;
      return tool_answer(
          session_->call_tool(tool, arguments, Clock::now() + config_.timeout, stop));
    } catch (const McpFailure& failure) {
      // The server answered: it is in a fit state for the next call.
      if (failure.kind() == Kind::kRemote && started) return error_answer(failure.what());
      session_.reset();
      if (failure.kind() == Kind::kGone && attempt == 0) continue;
      if (failure.kind() == Kind::kStopped) return error_answer(failure.what());
      if (!started)
        return error_answer(
            fmt::format("cannot start MCP server '{}': {}", name(), failure.what()));
      if (failure.kind() == Kind::kTimeout)
        return error_answer(
            fmt::format("MCP server '{}' timed out: no answer to '{}' within {} "
                        "ms (it is restarted on the next call)",
                        name(), tool, config_.timeout.count()));
      return error_answer(failure.what());
    } catch (const inferd::Error& e) {  // the process could not be started at all
      return error_answer(fmt::format("cannot start MCP server '{}': {}", name(), e.what()));
    }
  }
}

McpServers::McpServers(std::vector<McpServerConfig> configs, McpOptions options) {
  for (McpServerConfig& config : configs)
    servers_.push_back(std::make_shared<McpServer>(std::move(config), options));
}

McpServers::~McpServers() {
  shutdown();
}

void McpServers::warm_up() {
  // Side by side: a server started through npx may take seconds, and the server's start waits.
  std::vector<std::thread> threads;
  for (const auto& server : servers_) {
    try {
      threads.emplace_back([&server] { server->warm_up(); });
    } catch (const std::system_error&) {  // no thread to spare: in turn, then
      server->warm_up();
    }
  }
  for (std::thread& thread : threads) thread.join();
}

std::vector<std::unique_ptr<Tool>> McpServers::tools() const {
  std::vector<std::unique_ptr<Tool>> tools;
  std::set<std::string> names;
  for (const auto& server : servers_) {
    for (McpToolDef& def : server->tools()) {
      auto tool = std::make_unique<McpTool>(server, std::move(def));
      // "a_b" + "c" and "a" + "b_c" make one name: the first keeps it.
      if (!names.insert(tool->name()).second) {
        fmt::print(stderr,
                   "[inferd] MCP tool '{}' of server '{}' has a name already taken: "
                   "left out\n",
                   tool->name(), server->name());
        continue;
      }
      tools.push_back(std::move(tool));
    }
  }
  return tools;
}

void McpServers::shutdown() {
  // Every flag first: the calls in flight on all servers give up in the same slice.
  for (const auto& server : servers_) server->begin_shutdown();
  for (const auto& server : servers_) server->finish_shutdown();
}

}  // namespace inferd::agent
