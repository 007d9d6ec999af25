// A child process with pipes, for the agent tools (src/agent/): shell commands and MCP servers.
// The child runs in a process group of its own, with no descriptor of ours but its pipes, the
// default signal dispositions and an empty signal mask, so that a hung or crashed child (or a
// grandchild that keeps its pipes open) can always be killed and never blocks the server: every
// read and write takes a deadline, and kill() ends the whole group.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inferd::util {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::string cwd;                // empty: the server's working directory
  // Variables set over the server's environment, which the child gets otherwise as it is.
  std::vector<std::pair<std::string, std::string>> env;
  bool pipe_stdin = false;  // false: the child reads /dev/null
  enum class Stderr {
    kMerged,   // into the stdout pipe (what a terminal would show)
    kDiscard,  // /dev/null
    kInherit,  // the server's stderr (an MCP server's log lines)
  };
  Stderr stderr_mode = Stderr::kMerged;
};

class Subprocess {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the child. Throws inferd::Error naming the program and the reason when it cannot
  // be started (not found, not executable, a cwd that does not exist).
  explicit Subprocess(const SpawnOptions& options);
  // Kills the group (if still running) and reaps the child.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Writes all of `data` to the child's stdin. False when the child closed its end, stdin is
  // not a pipe, or `deadline` passed first. Never raises SIGPIPE.
  bool write_stdin(std::string_view data, Clock::time_point deadline);
  void close_stdin();

  enum class Read { kData, kEof, kTimeout };
  // Appends what the child wrote to stdout (stderr too with kMerged), waiting until some
  // arrives, the pipe reaches end of file, or `deadline` passes.
  Read read_stdout(std::string& out, Clock::time_point deadline);

  // The exit status once the child has ended: its code, or 128 + the signal that ended it.
  std::optional<int> try_wait();
  // Waits until the child ends or `deadline` passes.
  std::optional<int> wait_until(Clock::time_point deadline);
  // SIGKILL to the child's process group, then reaps the child.
  void kill();

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::optional<int> status_;
};

}  // namespace inferd::util
