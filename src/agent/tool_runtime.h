// Where the built-in agent tools (src/agent/builtin_tools.h) act: the host, or a runtime named
// by the x-tool-runtime header or --tools-runtime, an already running docker or podman
// container or a host reached over ssh. A Workspace gives the tools one set of file and command
// operations for all of them; in a runtime every operation is a command run there (sh, cat,
// find, mkdir), so a tool never falls back to the host's files by mistake.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/tool.h"

namespace inferd::util {
class Subprocess;
}

namespace inferd::agent {

// A runtime spec, parsed.
struct RuntimeSpec {
  enum class Kind {
    kHost,       // ""
    kContainer,  // "docker-container:ID", "podman-container:ID": a running container
    kSsh,        // "ssh:TARGET"
    kImage,      // "docker:IMAGE", "podman:IMAGE": --tools-runtime only (see ToolsRuntime)
  };
  Kind kind = Kind::kHost;
  std::string engine;  // "docker" or "podman" for kContainer and kImage
  std::string target;  // the container id, the ssh target or the image
};

// Parses a runtime spec; "" is the host. The id, target and image end up on a command line
// (and may come from a client's header), so anything that could pass for an option is refused.
// Throws ToolFailure: "unknown tool runtime: ...", "invalid container id: ...", "invalid ssh
// target: ...", "invalid image name: ...".
RuntimeSpec parse_runtime_spec(std::string_view spec);

// The lines of `text` (a final one without its newline too), each without its '\r'.
std::vector<std::string_view> split_lines(std::string_view text);

// `word` quoted for a POSIX shell: it reads back as exactly `word`.
std::string shell_quote(std::string_view word);

// The host command line that runs `inner` (a complete argv) in a container or over ssh, in
// `cwd` when that is not empty: `ENGINE exec -i [-w CWD] ID inner...`, or `ssh -o BatchMode=yes
// TARGET 'cd CWD && inner...'` (ssh hands the remote shell one string, so it is quoted).
std::vector<std::string> runtime_argv(const RuntimeSpec& spec,
                                      const std::vector<std::string>& inner,
                                      const std::string& cwd);

// Receives output as it arrives; false: nobody wants more (the client went away).
using OutputSink = std::function<bool(std::string_view chunk)>;

struct CommandOptions {
  std::vector<std::string> argv;
  std::string cwd;              // on the host; empty: the server's
  bool pipe_stdin = false;      // false: the command reads /dev/null
  std::string_view stdin_data;  // written, then stdin closed (with pipe_stdin)
  bool merge_stderr = true;     // false: stderr is dropped (when stdout is a file's bytes)
  std::chrono::milliseconds timeout{15000};
  size_t max_output = 16 * 1024;
  // Kill the command once it wrote more than max_output (reading the head of a big file)
  // rather than drain and drop the rest.
  bool stop_at_cap = false;
};

struct CommandResult {
  std::string output;      // at most max_output bytes
  int exit_code = -1;      // 128 + the signal when killed
  bool timed_out = false;  // killed at the timeout
  bool truncated = false;  // the command wrote more than max_output
  bool cancelled = false;  // killed because the sink said stop or the server is stopping
};

// Runs a command with every wait bounded: the process group is killed at the timeout, when
// `sink` returns false, or when *stopping becomes true. `sink` (optional) gets the kept output
// as it comes, never a UTF-8 sequence split in two. Throws ToolFailure when the program cannot
// be started.
CommandResult run_command(const CommandOptions& options, const OutputSink& sink = {},
                          const std::atomic<bool>* stopping = nullptr);

enum class EntryKind { kFiles, kDirs, kAll };

struct FileInfo {
  enum class Type { kMissing, kFile, kDir, kOther };
  Type type = Type::kMissing;
  uint64_t size = 0;  // for kFile
};

struct ReadResult {
  bool ok = false;
  std::string error;       // when !ok
  std::string data;        // the first max_bytes bytes
  bool truncated = false;  // the file holds more than that
};

struct ListEntry {
  std::string path;  // relative to the listed directory, '/'-separated
  bool is_dir = false;
};

struct Listing {
  std::vector<ListEntry> entries;  // sorted by path
  bool incomplete = false;         // time or size budget ran out, or a directory was unreadable
};

// Directories a listing reports but never walks into: they are big and rarely what a model
// is looking for (version control, dependencies, build output, caches).
const std::vector<std::string_view>& junk_dir_names();

// The operations the tools need, on the host or in a runtime. Paths given to them are absolute
// (from resolve()); none throws for a file that is missing or unreadable.
class Workspace {
 public:
  virtual ~Workspace() = default;
  // `path` made absolute against the call's working directory (a leading ~ is the home
  // directory on the host); an absolute path is returned as it is.
  virtual std::string resolve(std::string_view path) const = 0;
  virtual FileInfo stat(const std::string& path) = 0;
  virtual ReadResult read(const std::string& path, size_t max_bytes) = 0;
  // Creates the parent directories too. Empty when written, else why not.
  virtual std::string write(const std::string& path, std::string_view content) = 0;
  // Entries under `dir` down to `max_depth` levels (0: no limit, 1: its children only); junk
  // directories are listed but not walked.
  virtual Listing list(const std::string& dir, int max_depth, EntryKind kind) = 0;
  // `sh -c command` in the call's working directory, stdout and stderr merged.
  virtual CommandResult shell(const std::string& command, std::chrono::seconds timeout,
                              size_t max_output, const OutputSink& sink,
                              const std::atomic<bool>* stopping) = 0;
  // The system's name (uname -a) and the working directory, for get_info.
  virtual nlohmann::ordered_json describe() = 0;
};

// The workspace of one call: its runtime (call.runtime) and working directory (call.cwd).
// Throws ToolFailure for a runtime that parse_runtime_spec refuses, or one that names an image
// rather than a running container.
std::unique_ptr<Workspace> open_workspace(const ToolCall& call);

// --tools-runtime, owned by the server for its lifetime. A spec naming a running container or
// an ssh target is only checked; "docker:IMAGE" / "podman:IMAGE" starts a container of that
// image (`ENGINE run --rm -i IMAGE sh`, kept alive by holding its stdin open), started again if
// it dies, and ended when this is destroyed (or when the server dies, as its stdin closes).
class ToolsRuntime {
 public:
  // Throws ToolFailure (an inferd::Error) for a bad spec or a container that does not start.
  explicit ToolsRuntime(std::string_view spec);
  ~ToolsRuntime();
  ToolsRuntime(const ToolsRuntime&) = delete;
  ToolsRuntime& operator=(const ToolsRuntime&) = delete;

  // What a call's ToolCall::runtime gets: the spec, or "ENGINE-container:ID" of the container
  // started here.
  std::string spec();

 private:
  void start_container();
  void stop_container();

  RuntimeSpec parsed_;
  std::string spec_;
  std::mutex mutex_;
  std::unique_ptr<util::Subprocess> container_;  // the `ENGINE run` client
  std::string container_id_;
};

}  // namespace inferd::agent
