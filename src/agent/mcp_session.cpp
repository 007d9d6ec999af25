#include "agent/mcp_session.h"

#include <limits.h>
#include <sys/wait.h>

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace inferd::agent {
namespace {

using nlohmann::json;
using Clock = McpSession::Clock;
using Kind = McpFailure::Kind;

// The first version of the protocol: every server knows it, and one that prefers a later one
// still serves tools/list and tools/call under it.
constexpr const char* kProtocolVersion = "2024-11-05";

util::SpawnOptions spawn_options(const McpServerConfig& config) {
  util::SpawnOptions options;
  options.argv.push_back(config.command);
  options.argv.insert(options.argv.end(), config.args.begin(), config.args.end());
  options.cwd = config.cwd;
  options.env.assign(config.env.begin(), config.env.end());
  options.pipe_stdin = true;
  options.stderr_mode = util::SpawnOptions::Stderr::kInherit;  // its log lines, next to ours
  return options;
}

// The message of a JSON-RPC error object (or whatever stands in its place).
std::string error_text(const json& error) {
  if (error.is_object()) {
    auto message = error.find("message");
    if (message != error.end() && message->is_string() && !message->get<std::string>().empty())
      return message->get<std::string>();
    auto code = error.find("code");
    if (code != error.end()) return fmt::format("error {}", code->dump());
  }
  if (error.is_string()) return error.get<std::string>();
  return error.dump();
}

// What the tool takes, as an object schema (the shape chat templates and clients expect).
json object_schema(const json& tool) {
  auto schema = tool.find("inputSchema");
  if (schema == tool.end() || !schema->is_object())
    return {{"type", "object"}, {"properties", json::object()}};
  json result = *schema;
  if (result.value("type", json()) == "object" && !result.contains("properties"))
    result["properties"] = json::object();
  return result;
}

}  // namespace

McpSession::McpSession(const McpServerConfig& config)
    : name_(config.name), process_(spawn_options(config)) {}

void McpSession::initialize(Clock::time_point deadline, const StopFn& stop) {
  json params = {{"protocolVersion", kProtocolVersion},
                 {"capabilities", json::object()},
                 {"clientInfo", {{"name", "inferd"}, {"version", "1.0"}}}};
  json result = request("initialize", std::move(params), deadline, stop);
  if (!result.is_object())
    throw McpFailure(Kind::kRemote, fmt::format("MCP server '{}' answered initialize with {}",
                                                name_, result.dump()));
  send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}, deadline, stop);
}

std::vector<McpToolDef> McpSession::list_tools(Clock::time_point deadline, const StopFn& stop) {
  std::vector<McpToolDef> tools;
  std::set<std::string> cursors;  // a server that hands back a cursor twice would loop forever
  json params = json::object();
  for (;;) {
    json result = request("tools/list", params, deadline, stop);
    const json* list =
        result.is_object() && result.contains("tools") ? &result.at("tools") : nullptr;
    if (list == nullptr || !list->is_array())
      throw McpFailure(Kind::kRemote,
                       fmt::format("MCP server '{}' answered tools/list without a list", name_));
    for (const json& tool : *list) {
      if (!tool.is_object() || !tool.contains("name") || !tool.at("name").is_string() ||
          tool.at("name").get<std::string>().empty()) {
        fmt::print(stderr, "[inferd] MCP server '{}' lists a tool without a name: left out\n",
                   name_);
        continue;
      }
      McpToolDef def;
      def.name = tool.at("name").get<std::string>();
      if (tool.contains("description") && tool.at("description").is_string())
        def.description = tool.at("description").get<std::string>();
      def.input_schema = object_schema(tool);
      tools.push_back(std::move(def));
    }
    auto cursor = result.find("nextCursor");
    if (cursor == result.end() || !cursor->is_string() || cursor->get<std::string>().empty())
      return tools;
    if (!cursors.insert(cursor->get<std::string>()).second)
      throw McpFailure(Kind::kRemote,
                       fmt::format("MCP server '{}' repeats a tools/list cursor", name_));
    params = {{"cursor", *cursor}};
  }
}

json McpSession::call_tool(const std::string& tool, const json& arguments,
                           Clock::time_point deadline, const StopFn& stop) {
  return request("tools/call", {{"name", tool}, {"arguments", arguments}}, deadline, stop);
}

bool McpSession::exited() const {
  siginfo_t info{};
  // WNOWAIT: look without reaping (see the header).
  return ::waitid(P_PID, static_cast<id_t>(process_.pid()), &info, WEXITED | WNOHANG | WNOWAIT) ==
             0 &&
         info.si_pid == process_.pid();
}

void McpSession::close(std::chrono::milliseconds grace) {
  process_.close_stdin();
  const auto deadline = Clock::now() + grace;
  while (!exited() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  process_.kill();  // the group: a grandchild must not keep running once the server is gone
}

json McpSession::request(std::string_view method, json params, Clock::time_point deadline,
                         const StopFn& stop) {
  const int64_t id = next_id_++;
  send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}},
       deadline, stop);
  for (;;) {
    json message = receive(deadline, stop);
    if (message.contains("method")) {  // the server's own notification or request
      if (message.contains("id")) answer_server_request(message, deadline, stop);
      continue;
    }
    auto reply_id = message.find("id");
    // Ids only grow, so another id is the late answer to a request given up on: not ours.
    if (reply_id == message.end() || *reply_id != id) continue;
    if (auto error = message.find("error"); error != message.end())
      throw McpFailure(Kind::kRemote, error_text(*error));
    if (auto result = message.find("result"); result != message.end()) return *result;
    throw McpFailure(Kind::kRemote,
                     fmt::format("MCP server '{}' answered {} with neither a result nor an error",
                                 name_, method));
  }
}

void McpSession::send(const json& message, Clock::time_point deadline, const StopFn& stop) {
  const std::string line =
      message.dump(-1, ' ', false, json::error_handler_t::replace).append(1, '\n');
  std::string_view rest = line;
  while (!rest.empty()) {
    check_wait(deadline, stop, "taking a request");
    // Pieces of at most PIPE_BUF bytes: the kernel writes such a piece whole or not at all, so
    // a slice that ends on a full pipe leaves nothing half-sent, and the next slice resends it.
    const std::string_view piece = rest.substr(0, PIPE_BUF);
    const auto slice_end = std::min(deadline, Clock::now() + kSlice);
    if (process_.write_stdin(piece, slice_end)) {
      rest.remove_prefix(piece.size());
    } else if (Clock::now() < slice_end) {  // failed before the slice ended: stdin is closed
      throw McpFailure(Kind::kGone, fmt::format("MCP server '{}' closed its input", name_));
    }
  }
}

json McpSession::receive(Clock::time_point deadline, const StopFn& stop) {
  for (;;) {
    const size_t newline = pending_.find('\n', scanned_);
    if (newline == std::string::npos) {
      scanned_ = pending_.size();
      if (pending_.size() > kMaxLineBytes)
        throw McpFailure(Kind::kProtocol, fmt::format("MCP server '{}' wrote a message over {} MiB",
                                                      name_, kMaxLineBytes >> 20));
      check_wait(deadline, stop, "waiting for an answer");
      const auto slice_end = std::min(deadline, Clock::now() + kSlice);
      const util::Subprocess::Read read = process_.read_stdout(pending_, slice_end);
      if (read == util::Subprocess::Read::kData) continue;
      // A grandchild may hold stdout open after the server died: no end of file would come, so
      // its exit is looked at too, after taking what it wrote before it ended.
      if (read == util::Subprocess::Read::kTimeout &&
          (!exited() ||
           process_.read_stdout(pending_, Clock::now()) == util::Subprocess::Read::kData))
        continue;
      throw McpFailure(Kind::kGone, fmt::format("MCP server '{}' exited", name_));
    }
    std::string_view line(pending_.data(), newline);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxLineBytes)
      throw McpFailure(Kind::kProtocol, fmt::format("MCP server '{}' wrote a message over {} MiB",
                                                    name_, kMaxLineBytes >> 20));
    json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
    pending_.erase(0, newline + 1);
    scanned_ = 0;
    // Anything but an object (a stray log line on stdout, a blank line) carries no message.
    if (message.is_object()) return message;
  }
}

void McpSession::answer_server_request(const json& message, Clock::time_point deadline,
                                       const StopFn& stop) {
  json answer = {{"jsonrpc", "2.0"}, {"id", message.at("id")}};
  if (message.at("method") == "ping") {
    answer["result"] = json::object();
  } else {  // sampling, roots, elicitation: nothing of it is offered (no capabilities)
    answer["error"] = {{"code", -32601}, {"message", "method not supported by this client"}};
  }
  send(answer, deadline, stop);
}

void McpSession::check_wait(Clock::time_point deadline, const StopFn& stop,
                            std::string_view what) const {
  if (stop && stop())
    throw McpFailure(Kind::kStopped, fmt::format("the call to MCP server '{}' was stopped", name_));
  if (Clock::now() >= deadline)
    throw McpFailure(Kind::kTimeout, fmt::format("MCP server '{}' timed out ({})", name_, what));
}

}  // namespace inferd::agent
