// The built-in agent tools of POST /tools, as llama-server has them: read_file, write_file,
// edit_file (builtin_tools.cpp), grep_search, file_glob_search (search_tools.cpp),
// exec_shell_command and get_info (builtin_tools.cpp). They act on the host or in the call's
// runtime (src/agent/tool_runtime.h). A tool's own failure is an {"error": ...} answer; only a
// failure of the server's side (a bad runtime) is thrown, as ToolFailure.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/tool.h"

namespace inferd::agent {

// The tools named in `list`: "all", or a comma-separated subset of builtin_tool_names(), in
// the order of builtin_tool_names(). Throws inferd::Error naming an unknown name and the valid
// ones.
std::vector<std::unique_ptr<Tool>> make_builtin_tools(std::string_view list);

// Every built-in tool's name.
const std::vector<std::string_view>& builtin_tool_names();

// `text` matched against a glob: `*` and `?` stop at '/', `**` crosses it ("**/" also matches
// no directory at all), `[abc]`, `[a-z]`, `[!a]` as in a shell.
bool glob_match(std::string_view pattern, std::string_view text);

// How grep_search and file_glob_search apply include/exclude to an entry's path relative to
// the searched directory: a pattern without '/' matches the last component at any depth; one
// with '/' matches the whole path, anchored at the searched directory when it starts with '/',
// else at any depth (as if it started with "**/").
bool path_glob_match(std::string_view pattern, std::string_view rel_path);

// What follows is shared by the tools' own files.

// The part every built-in tool has alike: its GET /tools entry, and answering {"error": ...}
// for bad parameters and unexpected failures (never ToolFailure, which the server answers).
class BuiltinTool : public Tool {
 public:
  BuiltinTool(std::string name, std::string display_name, bool writes, std::string description,
              nlohmann::ordered_json properties, std::vector<std::string> required);

  const std::string& name() const override { return name_; }
  nlohmann::ordered_json info() const override;
  nlohmann::ordered_json invoke(const ToolCall& call) override;

 protected:
  // The call, with call.params an object. Throws ParamError for a parameter the model got
  // wrong.
  virtual nlohmann::ordered_json run(const ToolCall& call) = 0;

 private:
  std::string name_;
  std::string display_name_;
  bool writes_;
  std::string description_;
  nlohmann::ordered_json properties_;
  std::vector<std::string> required_;
};

// A parameter missing or of the wrong type: the model's mistake, answered as {"error": ...}.
class ParamError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parameters as models write them: a number may come as "10", a boolean as "true". Absent or
// null takes the default; a required one missing throws ParamError.
std::string string_param(const nlohmann::json& params, const char* key);
std::string string_param(const nlohmann::json& params, const char* key, std::string fallback);
long long int_param(const nlohmann::json& params, const char* key, long long fallback);
bool bool_param(const nlohmann::json& params, const char* key, bool fallback);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a UTF-8
// sequence: where a long line or file is cut.
size_t utf8_cut(std::string_view text, size_t max_bytes);

// A JSON schema property: {"type": type, "description": description}.
nlohmann::ordered_json schema_property(const char* type, std::string description);

// The search tools (search_tools.cpp).
std::unique_ptr<Tool> make_grep_search_tool();
std::unique_ptr<Tool> make_file_glob_search_tool();

}  // namespace inferd::agent
