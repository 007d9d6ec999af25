#include "agent/mcp_config.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace inferd::agent {
namespace {

using nlohmann::json;

// What a JSON value is, for messages ("a number" where a string was wanted).
std::string kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

std::string string_field(const json& entry, const char* key, std::string_view where) {
  const json& value = entry.at(key);
  if (!value.is_string()) fail("{}: \"{}\" must be a string, not {}", where, key, kind_of(value));
  return value.get<std::string>();
}

McpServerConfig parse_entry(const std::string& name, const json& entry, std::string_view where) {
  McpServerConfig config;
  config.name = name;
  config.command = string_field(entry, "command", where);
  if (config.command.empty()) fail("{}: \"command\" is empty", where);
  if (entry.contains("args")) {
    const json& args = entry.at("args");
    if (!args.is_array()) fail("{}: \"args\" must be an array of strings", where);
    for (const json& arg : args) {
      if (!arg.is_string()) fail("{}: \"args\" holds {}, not a string", where, kind_of(arg));
      config.args.push_back(arg.get<std::string>());
    }
  }
  if (entry.contains("env")) {
    const json& env = entry.at("env");
    if (!env.is_object()) fail("{}: \"env\" must be an object of strings", where);
    for (const auto& [key, value] : env.items()) {
      // The variables reach the child as NAME=VALUE: a name with '=' would cut the wrong way.
      if (key.empty() || key.find('=') != std::string::npos)
        fail("{}: \"env\" has a bad variable name \"{}\"", where, key);
      if (!value.is_string())
        fail("{}: \"env\".\"{}\" must be a string, not {}", where, key, kind_of(value));
      config.env[key] = value.get<std::string>();
    }
  }
  if (entry.contains("cwd")) config.cwd = string_field(entry, "cwd", where);
  if (entry.contains("timeout_ms")) {
    const json& timeout = entry.at("timeout_ms");
    // A day at most: beyond it the number is a mistake, and deadlines must not overflow.
    constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
    if (!timeout.is_number_integer() || timeout.get<int64_t>() <= 0 ||
        timeout.get<int64_t>() > kMaxTimeoutMs)
      fail("{}: \"timeout_ms\" must be a whole number of milliseconds, 1 to {}", where,
           kMaxTimeoutMs);
    config.timeout = std::chrono::milliseconds(timeout.get<int64_t>());
  }
  return config;
}

}  // namespace

std::vector<McpServerConfig> parse_mcp_config(std::string_view json_text, std::string_view origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", origin, e.what());
  }
  if (!root.is_object() || !root.contains("mcpServers") || !root.at("mcpServers").is_object())
    fail("{}: expected {{\"mcpServers\": {{\"NAME\": {{\"command\": ..., \"args\": [...]}}}}}}",
         origin);
  std::vector<McpServerConfig> configs;
  for (const auto& [name, entry] : root.at("mcpServers").items()) {
    const std::string where = fmt::format("{}: MCP server \"{}\"", origin, name);
    if (name.empty()) fail("{}: an MCP server has an empty name", origin);
    if (!entry.is_object()) fail("{} must be an object, not {}", where, kind_of(entry));
    if (!entry.contains("command")) {
      // A remote server ("url"): the config may be shared with clients that speak HTTP.
      fmt::print(stderr, "[inferd] {} has no \"command\" (only local servers run): left out\n",
                 where);
      continue;
    }
    configs.push_back(parse_entry(name, entry, where));
  }
  return configs;
}

std::vector<McpServerConfig> read_mcp_config_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("--mcp-servers-config: cannot open '{}'", path);
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail("--mcp-servers-config: cannot read '{}'", path);
  return parse_mcp_config(text.str(), fmt::format("--mcp-servers-config '{}'", path));
}

std::vector<McpServerConfig> load_mcp_config(const std::string& config_path,
                                             const std::string& json_text) {
  std::vector<McpServerConfig> configs;
  if (!config_path.empty()) configs = read_mcp_config_file(config_path);
  if (!json_text.empty()) {
    for (McpServerConfig& config : parse_mcp_config(json_text, "--mcp-servers-json"))
      configs.push_back(std::move(config));
  }
  std::set<std::string> names;
  for (const McpServerConfig& config : configs) {
    if (!names.insert(config.name).second)
      fail("MCP server \"{}\" is in both --mcp-servers-config and --mcp-servers-json", config.name);
  }
  return configs;
}

}  // namespace inferd::agent
