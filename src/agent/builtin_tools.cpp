#include "agent/builtin_tools.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "agent/tool_runtime.h"
#include "util/comma_list.h"
#include "util/error.h"

namespace inferd::agent {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

// read_file answers at most this much text: a model's context is the scarce thing.
constexpr size_t kReadMaxText = 16 * 1024;
// What read_file takes in to cut a line range from, and its base64 form's limit.
constexpr size_t kReadRangeMaxBytes = 32 * 1024 * 1024;
constexpr size_t kReadBase64MaxBytes = 32 * 1024 * 1024;
// edit_file holds the file and its edited copy.
constexpr size_t kEditMaxBytes = 16 * 1024 * 1024;
constexpr long long kExecDefaultTimeout = 10;  // seconds
constexpr long long kExecMaxTimeout = 60;
constexpr size_t kExecMaxOutput = 16 * 1024;

const json* find_param(const json& params, const char* key) {
  if (!params.is_object()) return nullptr;
  const auto it = params.find(key);
  return it == params.end() || it->is_null() ? nullptr : &*it;
}

ojson error_answer(std::string message) {
  return {{"error", std::move(message)}};
}

// The path of a call's "path" parameter, as the model wrote it and as the workspace sees it.
struct Target {
  std::string given;
  std::string resolved;
};

Target target_path(const json& params, const Workspace& workspace) {
  std::string given = string_param(params, "path");
  std::string resolved = workspace.resolve(given);
  return {std::move(given), std::move(resolved)};
}

std::string base64_encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  for (size_t i = 0; i < data.size(); i += 3) {
    const size_t n = std::min<size_t>(3, data.size() - i);
    uint32_t bits = 0;
    for (size_t k = 0; k < 3; ++k) {
      bits = (bits << 8) | (k < n ? static_cast<unsigned char>(data[i + k]) : 0u);
    }
    for (size_t k = 0; k < 4; ++k) {
      out += k <= n ? kAlphabet[(bits >> (18 - 6 * k)) & 0x3F] : '=';
    }
  }
  return out;
}

class ReadFileTool final : public BuiltinTool {
 public:
  ReadFileTool()
      : BuiltinTool(
            "read_file", "Read file", false,
            "Read a text file. Without a line range the whole file is returned, up to 16 KiB; "
            "for a bigger file give start_line and/or end_line. With append_loc each line "
            "starts with its number and an arrow (\"12\u2192...\").",
            {{"path", schema_property("string",
                                      "The file, absolute or relative to the working "
                                      "directory")},
             {"start_line", schema_property("integer", "First line to return, from 1 (default 1)")},
             {"end_line",
              schema_property("integer", "Last line to return, inclusive (default: the last)")},
             {"append_loc", schema_property("boolean", "Put each line's number before it")}},
            {"path"}) {}

 protected:
  ojson run(const ToolCall& call) override {
    const json& params = call.params;
    const auto workspace = open_workspace(call);
    const Target file = target_path(params, *workspace);
    const long long start_line = std::max(1LL, int_param(params, "start_line", 1));
    const long long end_line = int_param(params, "end_line", 0);  // 0 and less: to the end
    const bool append_loc = bool_param(params, "append_loc", false);
    // Set by the server from the x-resp-type header (a picture for the web page), not by the
    // model: the definition does not offer it.
    const bool as_base64 = string_param(params, "resp_type", "") == "base64";
    const bool ranged = find_param(params, "start_line") != nullptr || end_line > 0;

    const FileInfo info = workspace->stat(file.resolved);
    if (info.type == FileInfo::Type::kMissing) return error_answer("no such file: " + file.given);
    if (info.type == FileInfo::Type::kDir) {
      return error_answer(file.given + " is a directory; list it with file_glob_search");
    }
    if (info.type != FileInfo::Type::kFile)
      return error_answer("not a regular file: " + file.given);

    if (as_base64) {
      if (info.size > kReadBase64MaxBytes) {
        return error_answer(
            fmt::format("file too large ({} bytes, at most {})", info.size, kReadBase64MaxBytes));
      }
      const ReadResult read = workspace->read(file.resolved, kReadBase64MaxBytes);
      if (!read.ok) return error_answer(read.error);
      return {{"base64", base64_encode(read.data)}, {"size_bytes", read.data.size()}};
    }
    if (!ranged && info.size > kReadMaxText) {
      return error_answer(fmt::format(
          "file too large ({} bytes, at most {} at once); read a part with start_line and "
          "end_line",
          info.size, kReadMaxText));
    }
    const ReadResult read =
        workspace->read(file.resolved, ranged ? kReadRangeMaxBytes : kReadMaxText);
    if (!read.ok) return error_answer(read.error);
    return {{"plain_text_response",
             select_lines(read.data, start_line, end_line, append_loc, read.truncated)}};
  }

 private:
  // Lines [start, end] of `content` (end <= 0: to the last), each as it is in the file (so a
  // whole file comes back byte for byte), cut at kReadMaxText.
  static std::string select_lines(std::string_view content, long long start, long long end,
                                  bool append_loc, bool content_cut) {
    std::string text;
    long long number = 0;
    while (!content.empty()) {
      ++number;
      const size_t newline = content.find('\n');
      const size_t length = newline == std::string_view::npos ? content.size() : newline + 1;
      const std::string_view line = content.substr(0, length);
      content.remove_prefix(length);
      if (number < start) continue;
      if (end > 0 && number > end) return text;
      const std::string prefix = append_loc ? fmt::format("{}\u2192", number) : "";
      if (text.size() + prefix.size() + line.size() > kReadMaxText) {
        const size_t room = kReadMaxText - std::min(kReadMaxText, text.size() + prefix.size());
        text += prefix;
        text.append(line.substr(0, utf8_cut(line, room)));
        text += "\n[output truncated]";
        return text;
      }
      text += prefix;
      text.append(line);
    }
    // Only the head of a huge file is read (kReadRangeMaxBytes); the rest is out of reach.
    if (content_cut) text += "\n[the file was not read to its end]";
    return text;
  }
};

class WriteFileTool final : public BuiltinTool {
 public:
  WriteFileTool()
      : BuiltinTool("write_file", "Write file", true,
                    "Create a file or replace all of its content; missing parent directories are "
                    "created. To change part of an existing file, edit_file is cheaper.",
                    {{"path", schema_property("string",
                                              "The file, absolute or relative to the working "
                                              "directory")},
                     {"content", schema_property("string", "The file's complete new content")}},
                    {"path", "content"}) {}

 protected:
  ojson run(const ToolCall& call) override {
    const auto workspace = open_workspace(call);
    const Target file = target_path(call.params, *workspace);
    const std::string content = string_param(call.params, "content");
    if (workspace->stat(file.resolved).type == FileInfo::Type::kDir) {
      return error_answer(file.given + " is a directory");
    }
    const std::string failure = workspace->write(file.resolved, content);
    if (!failure.empty()) return error_answer(failure);
    return {
        {"result", "file written successfully"}, {"path", file.given}, {"bytes", content.size()}};
  }
};

class EditFileTool final : public BuiltinTool {
 public:
  EditFileTool()
      : BuiltinTool(
            "edit_file", "Edit file", true,
            "Replace exact pieces of a file's text. Each old_text must appear exactly once in "
            "the file as it is now (white space included; add neighbouring lines to make it "
            "unique), and no two edits may touch the same text. All edits apply together, or "
            "none does.",
            {{"path", schema_property("string",
                                      "The file, absolute or relative to the working "
                                      "directory")},
             {"edits",
              {{"type", "array"},
               {"description", "The replacements, each matched against the original text"},
               {"items",
                {{"type", "object"},
                 {"properties",
                  {{"old_text", schema_property("string", "Text to replace, exactly as it is")},
                   {"new_text", schema_property("string", "Text to put in its place")}}},
                 {"required", {"old_text", "new_text"}}}}}}},
            {"path", "edits"}) {}

 protected:
  ojson run(const ToolCall& call) override {
    const auto workspace = open_workspace(call);
    const Target file = target_path(call.params, *workspace);

    struct Edit {
      size_t index;     // in the request
      size_t position;  // of old_text in the original
      std::string old_text;
      std::string new_text;
    };
    std::vector<Edit> edits;
    const json list = edit_list(call.params);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_object()) throw ParamError(fmt::format("edits[{}] must be an object", i));
      Edit edit{i, 0, string_param(list[i], "old_text"), string_param(list[i], "new_text")};
      if (edit.old_text.empty()) {
        return error_answer(fmt::format("edits[{}].old_text is empty", i));
      }
      edits.push_back(std::move(edit));
    }

    const FileInfo info = workspace->stat(file.resolved);
    if (info.type == FileInfo::Type::kMissing) return error_answer("no such file: " + file.given);
    if (info.type != FileInfo::Type::kFile) {
      return error_answer("not a regular file: " + file.given);
    }
    const ReadResult read = workspace->read(file.resolved, kEditMaxBytes);
    if (!read.ok) return error_answer(read.error);
    if (read.truncated) {
      return error_answer(fmt::format("{} is too large to edit (more than {} MiB)", file.given,
                                      kEditMaxBytes >> 20));
    }
    const std::string& original = read.data;

    for (Edit& edit : edits) {
      const size_t first = original.find(edit.old_text);
      if (first == std::string::npos) {
        return error_answer(fmt::format(
            "edits[{}].old_text was not found in {}; it must match the file's current text "
            "exactly, white space included",
            edit.index, file.given));
      }
      if (original.find(edit.old_text, first + 1) != std::string::npos) {
        return error_answer(fmt::format(
            "edits[{}].old_text occurs {} times in {}; it must be unique: include more of the "
            "surrounding text",
            edit.index, count_occurrences(original, edit.old_text), file.given));
      }
      edit.position = first;
    }
    std::sort(edits.begin(), edits.end(),
              [](const Edit& a, const Edit& b) { return a.position < b.position; });
    for (size_t k = 1; k < edits.size(); ++k) {
      if (edits[k - 1].position + edits[k - 1].old_text.size() > edits[k].position) {
        return error_answer(
            fmt::format("edits[{}] and edits[{}] overlap in {}; merge them into one edit",
                        std::min(edits[k - 1].index, edits[k].index),
                        std::max(edits[k - 1].index, edits[k].index), file.given));
      }
    }

    std::string edited;
    size_t done = 0;  // of the original, copied or replaced
    for (const Edit& edit : edits) {
      edited.append(original, done, edit.position - done);
      edited += edit.new_text;
      done = edit.position + edit.old_text.size();
    }
    edited.append(original, done);
    if (edited == original) {
      return error_answer("the edits change nothing: each new_text equals its old_text");
    }
    const std::string failure = workspace->write(file.resolved, edited);
    if (!failure.empty()) return error_answer(failure);
    return {{"result", "file edited successfully"},
            {"path", file.given},
            {"edits_applied", edits.size()}};
  }

 private:
  // The edits array; models also send it as a JSON string or send a lone edit object.
  static json edit_list(const json& params) {
    const json* edits = find_param(params, "edits");
    if (edits == nullptr) throw ParamError("missing required parameter \"edits\"");
    json list = *edits;
    if (list.is_string()) list = json::parse(list.get<std::string>(), nullptr, false);
    if (list.is_object()) list = json::array({list});
    if (!list.is_array() || list.empty()) {
      throw ParamError("\"edits\" must be a non-empty array of {old_text, new_text}");
    }
    return list;
  }

  static size_t count_occurrences(const std::string& text, const std::string& needle) {
    size_t count = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
      ++count;
    return count;
  }
};

class ExecShellCommandTool final : public BuiltinTool {
 public:
  ExecShellCommandTool()
      : BuiltinTool(
            "exec_shell_command", "Run shell command", true,
            fmt::format("Run a command with sh -c in the working directory and return its output "
                        "(stdout and stderr together, at most {} bytes) and exit code. It is "
                        "killed, with what it started, at the timeout.",
                        kExecMaxOutput),
            {{"command", schema_property("string", "The shell command line")},
             {"timeout",
              schema_property("integer", fmt::format("Seconds before it is killed (default {}, "
                                                     "at most {})",
                                                     kExecDefaultTimeout, kExecMaxTimeout))},
             {"max_output_size",
              schema_property("integer", fmt::format("Bytes of output to keep (default and "
                                                     "most {})",
                                                     kExecMaxOutput))}},
            {"command"}) {}

  bool can_stream() const override { return true; }

 protected:
  // With call.on_output the output goes there as it comes, then the closing lines; the answer
  // still holds all of it, for a server that wants it.
  ojson run(const ToolCall& call) override {
    const std::string command = string_param(call.params, "command");
    long long timeout = int_param(call.params, "timeout", kExecDefaultTimeout);
    timeout = timeout < 1 ? kExecDefaultTimeout : std::min(timeout, kExecMaxTimeout);
    const long long requested = int_param(call.params, "max_output_size", kExecMaxOutput);
    const size_t max_output =
        requested < 1 ? kExecMaxOutput : std::min(static_cast<size_t>(requested), kExecMaxOutput);
    const auto workspace = open_workspace(call);

    bool client_gone = false;
    OutputSink sink;
    if (call.on_output) {
      sink = [&](std::string_view chunk) {
        client_gone = !call.on_output(chunk);
        return !client_gone;
      };
    }
    const CommandResult result =
        workspace->shell(command, std::chrono::seconds(timeout), max_output, sink, call.stopping);

    std::string tail;
    if (!result.output.empty() && result.output.back() != '\n') tail += '\n';
    if (result.truncated) tail += fmt::format("[output cut at {} bytes]\n", max_output);
    tail += fmt::format("[exit code: {}]", result.exit_code);
    if (result.timed_out) {
      tail += fmt::format(" [timed out after {} s: killed with everything it started]", timeout);
    } else if (result.cancelled) {
      tail += " [stopped: the request ended]";
    }
    if (call.on_output && !client_gone) call.on_output(tail);
    return {{"plain_text_response", result.output + tail}};
  }
};

class GetInfoTool final : public BuiltinTool {
 public:
  GetInfoTool()
      : BuiltinTool("get_info", "Get runtime info", false,
                    "Tell where the tools run: the operating system (uname -a), the working "
                    "directory, and the runtime (host, container or ssh target).",
                    ojson::object(), {}) {}

 protected:
  ojson run(const ToolCall& call) override { return open_workspace(call)->describe(); }
};

std::unique_ptr<Tool> make_tool(std::string_view name) {
  if (name == "read_file") return std::make_unique<ReadFileTool>();
  if (name == "file_glob_search") return make_file_glob_search_tool();
  if (name == "grep_search") return make_grep_search_tool();
  if (name == "exec_shell_command") return std::make_unique<ExecShellCommandTool>();
  if (name == "write_file") return std::make_unique<WriteFileTool>();
  if (name == "edit_file") return std::make_unique<EditFileTool>();
  if (name == "get_info") return std::make_unique<GetInfoTool>();
  return nullptr;
}

}  // namespace

const std::vector<std::string_view>& builtin_tool_names() {
  static const std::vector<std::string_view> names = {
      "read_file",  "file_glob_search", "grep_search", "exec_shell_command",
      "write_file", "edit_file",        "get_info"};
  return names;
}

std::vector<std::unique_ptr<Tool>> make_builtin_tools(std::string_view list) {
  const auto& names = builtin_tool_names();
  bool all = false;
  std::set<std::string_view> wanted;
  for (std::string_view item : comma_list(list)) {
    if (item == "all") {
      all = true;
    } else if (std::find(names.begin(), names.end(), item) != names.end()) {
      wanted.insert(item);
    } else {
      fail("unknown tool '{}'; the built-in tools are: all, {}", item, fmt::join(names, ", "));
    }
  }
  std::vector<std::unique_ptr<Tool>> tools;
  for (std::string_view name : names) {
    if (all || wanted.count(name) > 0) tools.push_back(make_tool(name));
  }
  return tools;
}

BuiltinTool::BuiltinTool(std::string name, std::string display_name, bool writes,
                         std::string description, ojson properties,
                         std::vector<std::string> required)
    : name_(std::move(name)),
      display_name_(std::move(display_name)),
      writes_(writes),
      description_(std::move(description)),
      properties_(std::move(properties)),
      required_(std::move(required)) {}

ojson BuiltinTool::info() const {
  ojson parameters = {{"type", "object"}, {"properties", properties_}};
  parameters["required"] = required_;
  return {{"tool", name_},
          {"display_name", display_name_},
          {"type", "server"},
          {"permissions", {{"write", writes_}}},
          {"definition",
           {{"type", "function"},
            {"function",
             {{"name", name_}, {"description", description_}, {"parameters", parameters}}}}}};
}

ojson BuiltinTool::invoke(const ToolCall& call) {
  if (!call.params.is_null() && !call.params.is_object()) {
    return error_answer("the parameters must be a JSON object");
  }
  try {
    return run(call);
  } catch (const ToolFailure&) {
    throw;  // the server's side: HTTP 500
  } catch (const ParamError& e) {
    return error_answer(e.what());
  } catch (const std::exception& e) {
    // A file system error or the like: the model may try something else; the server goes on.
    return error_answer(fmt::format("{} failed: {}", name_, e.what()));
  }
}

std::string string_param(const json& params, const char* key) {
  const json* value = find_param(params, key);
  if (value == nullptr) throw ParamError(fmt::format("missing required parameter \"{}\"", key));
  if (value->is_string()) return value->get<std::string>();
  if (value->is_number() || value->is_boolean()) return value->dump();
  throw ParamError(fmt::format("parameter \"{}\" must be a string", key));
}

std::string string_param(const json& params, const char* key, std::string fallback) {
  return find_param(params, key) == nullptr ? std::move(fallback) : string_param(params, key);
}

long long int_param(const json& params, const char* key, long long fallback) {
  const json* value = find_param(params, key);
  if (value == nullptr) return fallback;
  if (value->is_number_integer()) return value->get<long long>();
  if (value->is_number_unsigned()) {
    return static_cast<long long>(std::min<uint64_t>(value->get<uint64_t>(), 1ULL << 62));
  }
  if (value->is_number_float()) {
    const double number = value->get<double>();
    if (number == static_cast<double>(static_cast<long long>(number))) {
      return static_cast<long long>(number);
    }
  }
  if (value->is_string()) {
    const std::string text = value->get<std::string>();
    char* end = nullptr;
    errno = 0;
    const long long number = std::strtoll(text.c_str(), &end, 10);
    if (!text.empty() && *end == '\0' && errno == 0) return number;
  }
  throw ParamError(fmt::format("parameter \"{}\" must be an integer", key));
}

bool bool_param(const json& params, const char* key, bool fallback) {
  const json* value = find_param(params, key);
  if (value == nullptr) return fallback;
  if (value->is_boolean()) return value->get<bool>();
  if (value->is_number_integer() && (*value == 0 || *value == 1)) return *value == 1;
  if (value->is_string()) {
    const std::string text = value->get<std::string>();
    if (text == "true" || text == "1") return true;
    if (text == "false" || text == "0") return false;
  }
  throw ParamError(fmt::format("parameter \"{}\" must be true or false", key));
}

ojson schema_property(const char* type, std::string description) {
  return {{"type", type}, {"description", std::move(description)}};
}

size_t utf8_cut(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t cut = max_bytes;
  // Back over continuation bytes to the start of the sequence the cut falls in.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

}  // namespace inferd::agent
