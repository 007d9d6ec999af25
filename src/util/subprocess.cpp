#include "util/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

extern char** environ;

namespace inferd::util {
namespace {

// posix_spawn's file actions and attributes, released on every path out.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Milliseconds until `deadline` for poll(): 0 once it has passed, rounded up otherwise so a
// wait never spins on a sub-millisecond remainder.
int poll_timeout(Subprocess::Clock::time_point deadline) {
  const auto left = deadline - Subprocess::Clock::now();
  if (left <= Subprocess::Clock::duration::zero()) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
  return ms > 1000000 ? 1000000 : static_cast<int>(ms);
}

// The server's environment with `overrides` set over it, as "NAME=VALUE" strings.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    bool replaced = false;
    for (const auto& [key, value] : overrides) replaced = replaced || key == name;
    if (!replaced) out.emplace_back(text);
  }
  for (const auto& [key, value] : overrides) out.push_back(key + "=" + value);
  return out;
}

int exit_status(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

}  // namespace

Subprocess::Subprocess(const SpawnOptions& options) {
  if (options.argv.empty()) fail("a subprocess needs a program to run");
  int out[2] = {-1, -1};
  int in[2] = {-1, -1};
  // Ours are close-on-exec (the child gets only the ends dup2'd onto 0, 1 and 2), so a second
  // child started meanwhile by another thread never holds them and hides this one's EOF.
  if (::pipe2(out, O_CLOEXEC) != 0) fail("cannot make a pipe: {}", std::strerror(errno));
  if (options.pipe_stdin && ::pipe2(in, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(out[0]);
    ::close(out[1]);
    fail("cannot make a pipe: {}", std::strerror(error));
  }
  SpawnSetup setup;
  posix_spawn_file_actions_t* actions = &setup.actions;
  if (options.pipe_stdin) {
    posix_spawn_file_actions_adddup2(actions, in[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(actions, out[1], STDOUT_FILENO);
  switch (options.stderr_mode) {
    case SpawnOptions::Stderr::kMerged:
      posix_spawn_file_actions_adddup2(actions, out[1], STDERR_FILENO);
      break;
    case SpawnOptions::Stderr::kDiscard:
      posix_spawn_file_actions_addopen(actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
      break;
    case SpawnOptions::Stderr::kInherit:
      break;
  }
  // Everything else the server has open (listening sockets, the model file) stays behind:
  // a child that outlives the server must not keep its port.
  posix_spawn_file_actions_addclosefrom_np(actions, STDERR_FILENO + 1);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(actions, options.cwd.c_str());

  // A group of its own, so kill() reaches what the child starts too; default dispositions and
  // an empty mask, since the server ignores SIGPIPE and its threads may block signals.
  posix_spawnattr_setpgroup(&setup.attributes, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&setup.attributes, &none);
  posix_spawnattr_setsigdefault(&setup.attributes, &all);
  posix_spawnattr_setflags(&setup.attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  if (!options.env.empty()) {
    env_strings = child_environment(options.env);
    for (std::string& entry : env_strings) envp.push_back(entry.data());
    envp.push_back(nullptr);
  }
  // glibc's posix_spawn reports a failed chdir or exec as its return value. The program is
  // looked up in the server's PATH.
  const int error = ::posix_spawnp(&pid_, argv[0], actions, &setup.attributes, argv.data(),
                                   envp.empty() ? environ : envp.data());
  ::close(out[1]);
  if (options.pipe_stdin) ::close(in[0]);
  if (error != 0) {
    ::close(out[0]);
    if (options.pipe_stdin) ::close(in[1]);
    pid_ = -1;
    if (!options.cwd.empty() && ::access(options.cwd.c_str(), X_OK) != 0)
      fail("cannot run '{}' in '{}': {}", options.argv[0], options.cwd, std::strerror(error));
    fail("cannot run '{}': {}", options.argv[0], std::strerror(error));
  }
  stdout_fd_ = out[0];
  stdin_fd_ = options.pipe_stdin ? in[1] : -1;
  ::fcntl(stdout_fd_, F_SETFL, ::fcntl(stdout_fd_, F_GETFL) | O_NONBLOCK);
  if (stdin_fd_ >= 0) ::fcntl(stdin_fd_, F_SETFL, ::fcntl(stdin_fd_, F_GETFL) | O_NONBLOCK);
}

Subprocess::~Subprocess() {
  if (!status_ && pid_ > 0) kill();
  close_fd(stdin_fd_);
  close_fd(stdout_fd_);
}

bool Subprocess::write_stdin(std::string_view data, Clock::time_point deadline) {
  if (stdin_fd_ < 0) return false;
  // A child that closed its stdin would raise SIGPIPE on this thread: block it around the
  // write and take back a pending one, so the write fails with EPIPE instead.
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
  bool ok = true;
  bool raised = false;
  while (!data.empty()) {
    const ssize_t n = ::write(stdin_fd_, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{stdin_fd_, POLLOUT, 0};
      const int timeout = poll_timeout(deadline);
      if (timeout == 0 || ::poll(&p, 1, timeout) == 0) {
        ok = false;
        break;
      }
      continue;
    }
    raised = n < 0 && errno == EPIPE;
    ok = false;
    break;
  }
  if (raised) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe_only, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return ok;
}

void Subprocess::close_stdin() {
  close_fd(stdin_fd_);
}

Subprocess::Read Subprocess::read_stdout(std::string& out, Clock::time_point deadline) {
  if (stdout_fd_ < 0) return Read::kEof;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(stdout_fd_, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
      return Read::kData;
    }
    if (n == 0) return Read::kEof;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return Read::kEof;
    pollfd p{stdout_fd_, POLLIN, 0};
    const int timeout = poll_timeout(deadline);
    if (timeout == 0) return Read::kTimeout;
    const int ready = ::poll(&p, 1, timeout);
    if (ready == 0) return Read::kTimeout;
    if (ready < 0 && errno != EINTR) return Read::kEof;
  }
}

std::optional<int> Subprocess::try_wait() {
  if (status_ || pid_ <= 0) return status_;
  int raw = 0;
  const pid_t done = ::waitpid(pid_, &raw, WNOHANG);
  if (done == pid_) status_ = exit_status(raw);
  return status_;
}

std::optional<int> Subprocess::wait_until(Clock::time_point deadline) {
  // No portable wait with a timeout on a pid: poll in short steps (children end in
  // milliseconds, or they are killed).
  for (;;) {
    if (try_wait()) return status_;
    if (Clock::now() >= deadline) return std::nullopt;
    ::usleep(2000);
  }
}

void Subprocess::kill() {
  if (pid_ <= 0 || status_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);  // in case it left its group
  int raw = 0;
  while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
  }
  status_ = exit_status(raw);
}

}  // namespace inferd::util
