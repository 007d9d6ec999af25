#include "agent/tool_runtime.h"

#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "util/comma_list.h"
#include "util/subprocess.h"
#include "util/utf8.h"

namespace inferd::agent {

namespace fs = std::filesystem;
using Clock = util::Subprocess::Clock;

namespace {

// How often a wait looks at ToolCall::stopping.
constexpr auto kPollStep = std::chrono::milliseconds(100);
// Budgets of one directory listing, so a huge tree costs seconds and megabytes, not more.
constexpr auto kListTimeout = std::chrono::seconds(15);
constexpr size_t kMaxListEntries = 200000;
constexpr size_t kMaxListOutput = 8 * 1024 * 1024;
// Small helper commands in a runtime (stat, mkdir + write, uname).
constexpr auto kHelperTimeout = std::chrono::seconds(30);
// Extra time the host side of a runtime command gets over the command's own timeout, so the
// `timeout` run inside the runtime ends it (killing the local docker or ssh client would leave
// the command running over there).
constexpr auto kRemoteGrace = std::chrono::seconds(5);
// How long `docker run` may take to start a container (pulling the image included).
constexpr auto kContainerStartTimeout = std::chrono::seconds(120);
constexpr auto kContainerStopTimeout = std::chrono::seconds(15);

bool is_alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

// Each first character below is alphanumeric, so nothing can read as an option.
// Docker's rule for container names (ids are hex): [a-zA-Z0-9][a-zA-Z0-9_.-]*.
bool valid_container_id(std::string_view id) {
  if (id.empty() || !is_alnum(id[0])) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; });
}

// [user@]host: no spaces, quotes or anything a shell or ssh would read more into.
bool valid_ssh_target(std::string_view target) {
  if (target.empty() || !is_alnum(target[0])) return false;
  return std::all_of(target.begin(), target.end(), [](char c) {
    return is_alnum(c) || c == '_' || c == '.' || c == '-' || c == '@';
  });
}

// registry/name:tag@digest
bool valid_image(std::string_view image) {
  if (image.empty() || !is_alnum(image[0])) return false;
  return std::all_of(image.begin(), image.end(), [](char c) {
    return is_alnum(c) || std::string_view("_.-/:@").find(c) != std::string_view::npos;
  });
}

// Length of `text` without an unfinished UTF-8 sequence at its end: the rest of it is still in
// the pipe, and a client decoding each chunk on its own would make two bad characters of it.
size_t complete_utf8_prefix(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    const size_t length = utf8_sequence_length(c);
    return length > back ? text.size() - back : text.size();
  }
  return text.size();
}

std::string trim(std::string_view text) {
  return std::string(trim_space(text));
}

bool is_junk_dir(std::string_view name) {
  const auto& junk = junk_dir_names();
  return std::find(junk.begin(), junk.end(), name) != junk.end();
}

void sort_entries(Listing& listing) {
  std::sort(listing.entries.begin(), listing.entries.end(),
            [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
}

}  // namespace

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return lines;
}

RuntimeSpec parse_runtime_spec(std::string_view spec) {
  RuntimeSpec out;
  if (spec.empty()) return out;
  for (std::string_view engine : {"docker", "podman"}) {
    const std::string attach = fmt::format("{}-container:", engine);
    const std::string image = fmt::format("{}:", engine);
    if (spec.starts_with(attach)) {
      out = {RuntimeSpec::Kind::kContainer, std::string(engine),
             std::string(spec.substr(attach.size()))};
      if (!valid_container_id(out.target))
        throw ToolFailure(fmt::format("invalid container id: '{}'", out.target));
      return out;
    }
    if (spec.starts_with(image)) {
      out = {RuntimeSpec::Kind::kImage, std::string(engine),
             std::string(spec.substr(image.size()))};
      if (!valid_image(out.target))
        throw ToolFailure(fmt::format("invalid image name: '{}'", out.target));
      return out;
    }
  }
  if (spec.starts_with("ssh:")) {
    out = {RuntimeSpec::Kind::kSsh, "ssh", std::string(spec.substr(4))};
    if (!valid_ssh_target(out.target))
      throw ToolFailure(fmt::format("invalid ssh target: '{}'", out.target));
    return out;
  }
  // Never the host instead: whoever named a runtime wanted the tools kept off it.
  throw ToolFailure(fmt::format(
      "unknown tool runtime: '{}' (expected docker-container:ID, podman-container:ID or "
      "ssh:TARGET)",
      spec));
}

std::string shell_quote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";  // a quote cannot appear inside '...': close, add \', open again
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::vector<std::string> runtime_argv(const RuntimeSpec& spec,
                                      const std::vector<std::string>& inner,
                                      const std::string& cwd) {
  if (spec.kind == RuntimeSpec::Kind::kSsh) {
    std::string remote = cwd.empty() ? "" : "cd " + shell_quote(cwd) + " && ";
    for (size_t i = 0; i < inner.size(); ++i) {
      if (i > 0) remote += ' ';
      remote += shell_quote(inner[i]);
    }
    // BatchMode: there is nobody to answer a password or host key prompt.
    return {"ssh", "-o", "BatchMode=yes", spec.target, remote};
  }
  if (spec.kind != RuntimeSpec::Kind::kContainer)
    throw ToolFailure("runtime_argv: not a container or ssh runtime");
  std::vector<std::string> argv = {spec.engine, "exec", "-i"};
  if (!cwd.empty()) {
    argv.push_back("-w");
    argv.push_back(cwd);
  }
  argv.push_back(spec.target);
  argv.insert(argv.end(), inner.begin(), inner.end());
  return argv;
}

CommandResult run_command(const CommandOptions& options, const OutputSink& sink,
                          const std::atomic<bool>* stopping) {
  util::SpawnOptions spawn;
  spawn.argv = options.argv;
  spawn.cwd = options.cwd;
  spawn.pipe_stdin = options.pipe_stdin;
  spawn.stderr_mode = options.merge_stderr ? util::SpawnOptions::Stderr::kMerged
                                           : util::SpawnOptions::Stderr::kDiscard;
  std::unique_ptr<util::Subprocess> child;
  try {
    child = std::make_unique<util::Subprocess>(spawn);
  } catch (const ToolFailure&) {
    throw;
  } catch (const inferd::Error& e) {
    throw ToolFailure(e.what());
  }

  const auto deadline = Clock::now() + options.timeout;
  CommandResult result;
  if (options.pipe_stdin) {
    // A command that stops reading early fails on its own; its exit code tells.
    child->write_stdin(options.stdin_data, deadline);
    child->close_stdin();
  }

  std::string pending;  // kept output the sink has not had yet
  std::string chunk;
  bool eof = false;
  while (!eof) {
    if (stopping != nullptr && stopping->load()) {
      result.cancelled = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      break;
    }
    chunk.clear();
    const auto read = child->read_stdout(chunk, std::min(deadline, now + kPollStep));
    if (read == util::Subprocess::Read::kEof) eof = true;
    if (read != util::Subprocess::Read::kData) continue;
    // Past the cap the output is still read (else the command blocks on a full pipe), and
    // dropped.
    const size_t room = options.max_output - result.output.size();
    if (chunk.size() > room) result.truncated = true;
    const std::string_view kept(chunk.data(), std::min(room, chunk.size()));
    result.output.append(kept);
    if (sink && !kept.empty()) {
      pending.append(kept);
      const size_t ready = complete_utf8_prefix(pending);
      if (ready > 0 && !sink(std::string_view(pending).substr(0, ready))) {
        result.cancelled = true;
        break;
      }
      pending.erase(0, ready);
    }
    if (result.truncated && options.stop_at_cap) break;
  }

  // A command can close its output and go on running: it gets the rest of its time. Whatever is
  // still running then (or after a timeout or cancel above) is killed with its whole group.
  while (eof && !child->try_wait()) {
    if (stopping != nullptr && stopping->load()) {
      result.cancelled = true;
      break;
    }
    if (Clock::now() >= deadline) {
      result.timed_out = true;
      break;
    }
    child->wait_until(std::min(deadline, Clock::now() + kPollStep));
  }
  if (!child->try_wait()) child->kill();
  result.exit_code = child->try_wait().value_or(-1);
  // An unfinished sequence at the very end stays unfinished: hand it over as it is.
  if (sink && !pending.empty() && !result.cancelled) sink(pending);
  return result;
}

const std::vector<std::string_view>& junk_dir_names() {
  static const std::vector<std::string_view> names = {
      ".git", ".svn",  ".hg",    "node_modules", "__pycache__", ".venv",  "venv",
      "dist", "build", "target", ".cache",       ".idea",       ".vscode"};
  return names;
}

namespace {

// The tools acting on the server's own machine, with its rights.
class HostWorkspace final : public Workspace {
 public:
  explicit HostWorkspace(std::string cwd) : cwd_(std::move(cwd)) {}

  std::string resolve(std::string_view path) const override {
    std::string text(path);
    if (!text.empty() && text[0] == '~' && (text.size() == 1 || text[1] == '/')) {
      static const std::string home = [] {
        const char* value = std::getenv("HOME");
        return std::string(value != nullptr ? value : "");
      }();
      if (!home.empty()) text = home + text.substr(1);
    }
    fs::path full(text);
    if (!full.is_absolute()) full = base_dir() / full;
    std::string out = full.lexically_normal().string();
    // "dir/" and "dir/.." normalize with a trailing '/', which would end up in messages.
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    return out;
  }

  FileInfo stat(const std::string& path) override {
    FileInfo info;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) return info;
    if (fs::is_directory(status)) {
      info.type = FileInfo::Type::kDir;
    } else if (fs::is_regular_file(status)) {
      info.type = FileInfo::Type::kFile;
      info.size = fs::file_size(path, ec);
      if (ec) info.size = 0;
    } else {
      info.type = FileInfo::Type::kOther;
    }
    return info;
  }

  ReadResult read(const std::string& path, size_t max_bytes) override {
    ReadResult result;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      result.error = fmt::format("cannot open {}: {}", path, std::strerror(errno));
      return result;
    }
    // In pieces, so a small file costs a small buffer whatever max_bytes is.
    std::vector<char> buffer(64 * 1024);
    for (;;) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto got = static_cast<size_t>(in.gcount());
      if (got == 0) break;
      const size_t room = max_bytes - result.data.size();
      if (got > room) {
        result.data.append(buffer.data(), room);
        result.truncated = true;
        break;
      }
      result.data.append(buffer.data(), got);
    }
    if (in.bad()) {
      result.error = fmt::format("cannot read {}", path);
      result.data.clear();
      return result;
    }
    result.ok = true;
    return result;
  }

  std::string write(const std::string& path, std::string_view content) override {
    const fs::path file(path);
    std::error_code ec;
    if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
    if (ec) return fmt::format("cannot create {}: {}", file.parent_path().string(), ec.message());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    if (!out) return fmt::format("cannot open {} for writing: {}", path, std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) return fmt::format("cannot write {}", path);
    return {};
  }

  Listing list(const std::string& dir, int max_depth, EntryKind kind) override {
    Listing listing;
    const auto deadline = Clock::now() + kListTimeout;
    struct Pending {
      fs::path dir;
      std::string rel;
      int depth;  // of `dir` below the listed directory
    };
    std::vector<Pending> stack = {{dir, "", 0}};
    while (!stack.empty() && !listing.incomplete) {
      const Pending current = std::move(stack.back());
      stack.pop_back();
      std::error_code ec;
      fs::directory_iterator it(current.dir, fs::directory_options::skip_permission_denied, ec);
      if (ec) listing.incomplete = true;
      // The non-throwing increment: a directory may vanish under the walk.
      for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
        if (listing.entries.size() >= kMaxListEntries || Clock::now() >= deadline) {
          listing.incomplete = true;
          break;
        }
        const fs::directory_entry& entry = *it;
        const std::string name = entry.path().filename().string();
        std::string rel = current.rel.empty() ? name : current.rel + "/" + name;
        std::error_code type_ec;
        if (entry.is_directory(type_ec)) {
          // A link to a directory is listed but not followed: it may lead back up the tree.
          const bool walk = !is_junk_dir(name) && !entry.is_symlink(type_ec) &&
                            (max_depth == 0 || current.depth + 1 < max_depth);
          if (walk) stack.push_back({entry.path(), rel, current.depth + 1});
          if (kind != EntryKind::kFiles) listing.entries.push_back({std::move(rel), true});
        } else if (entry.is_regular_file(type_ec) && kind != EntryKind::kDirs) {
          listing.entries.push_back({std::move(rel), false});
        }
      }
      if (ec) listing.incomplete = true;
    }
    sort_entries(listing);
    return listing;
  }

  CommandResult shell(const std::string& command, std::chrono::seconds timeout, size_t max_output,
                      const OutputSink& sink, const std::atomic<bool>* stopping) override {
    CommandOptions options;
    options.argv = {"sh", "-c", command};
    options.cwd = base_dir().string();
    options.timeout = timeout;
    options.max_output = max_output;
    return run_command(options, sink, stopping);
  }

  nlohmann::ordered_json describe() override {
    std::string os = "unknown";
    utsname names{};
    if (::uname(&names) == 0) {
      os = fmt::format("{} {} {} {} {}", names.sysname, names.nodename, names.release,
                       names.version, names.machine);
    }
    return {{"os", os}, {"cwd", base_dir().string()}, {"runtime", "host"}};
  }

 private:
  fs::path base_dir() const {
    std::error_code ec;
    if (!cwd_.empty()) return fs::absolute(cwd_, ec).lexically_normal();
    return fs::current_path(ec);
  }

  std::string cwd_;
};

// The tools acting in a container or over ssh: each operation is a command run there.
class RemoteWorkspace final : public Workspace {
 public:
  RemoteWorkspace(RuntimeSpec spec, std::string cwd, std::string spec_text)
      : spec_(std::move(spec)), cwd_(std::move(cwd)), spec_text_(std::move(spec_text)) {}

  // No normalizing: the paths are the runtime's, which the host's file system knows nothing of.
  std::string resolve(std::string_view path) const override {
    if (!path.empty() && path[0] == '/') return std::string(path);
    // "./" keeps a relative path from reading as an option of the commands it is given to.
    const std::string base = cwd_.empty() ? "." : cwd_;
    return path.empty() || path == "." ? base : base + "/" + std::string(path);
  }

  FileInfo stat(const std::string& path) override {
    const CommandResult result = helper(
        {"sh", "-c",
         "if [ -d \"$1\" ]; then echo dir; elif [ -f \"$1\" ]; then echo file; wc -c < \"$1\"; "
         "elif [ -e \"$1\" ]; then echo other; else echo missing; fi",
         "sh", path},
        4096);
    const std::vector<std::string_view> lines = split_lines(result.output);
    FileInfo info;
    const std::string kind = lines.empty() ? "" : trim(lines[0]);
    if (kind == "dir") {
      info.type = FileInfo::Type::kDir;
    } else if (kind == "file") {
      info.type = FileInfo::Type::kFile;
      info.size = lines.size() > 1 ? std::strtoull(trim(lines[1]).c_str(), nullptr, 10) : 0;
    } else if (kind == "other") {
      info.type = FileInfo::Type::kOther;
    } else if (kind != "missing") {
      // Not an answer from the script: the runtime itself failed (no such container, ssh
      // refused). That is the server's side, not the model's.
      throw ToolFailure(fmt::format("tool runtime {} failed: {}", spec_text_,
                                    trim(std::string_view(result.output).substr(0, 500))));
    }
    return info;
  }

  ReadResult read(const std::string& path, size_t max_bytes) override {
    CommandOptions options = helper_options({"cat", path}, max_bytes);
    options.merge_stderr = false;  // a warning must not land among the file's bytes
    options.stop_at_cap = true;
    CommandResult result = run_command(options);
    ReadResult read;
    if (!result.truncated && (result.exit_code != 0 || result.timed_out)) {
      read.error = fmt::format("cannot read {}", path);
      return read;
    }
    read.ok = true;
    read.data = std::move(result.output);
    read.truncated = result.truncated;
    return read;
  }

  std::string write(const std::string& path, std::string_view content) override {
    // The content goes through stdin: no size limit of a command line, nothing re-parsed.
    CommandOptions options = helper_options(
        {"sh", "-c", "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"", "sh", path}, 4096);
    options.pipe_stdin = true;
    options.stdin_data = content;
    const CommandResult result = run_command(options);
    if (result.exit_code == 0 && !result.timed_out) return {};
    const std::string why = trim(result.output);
    return fmt::format("cannot write {}: {}", path,
                       why.empty() ? fmt::format("exit code {}", result.exit_code) : why);
  }

  Listing list(const std::string& dir, int max_depth, EntryKind kind) override {
    Listing listing;
    if (kind != EntryKind::kFiles) find_into(listing, dir, max_depth, true);
    if (kind != EntryKind::kDirs) find_into(listing, dir, max_depth, false);
    sort_entries(listing);
    return listing;
  }

  CommandResult shell(const std::string& command, std::chrono::seconds timeout, size_t max_output,
                      const OutputSink& sink, const std::atomic<bool>* stopping) override {
    // `timeout` where the runtime has one, so the command ends there too; plain sh otherwise.
    const std::string wrapper =
        "if command -v timeout >/dev/null 2>&1; then exec timeout \"$0\" sh -c \"$1\"; fi; "
        "exec sh -c \"$1\"";
    CommandOptions options;
    options.argv =
        runtime_argv(spec_, {"sh", "-c", wrapper, std::to_string(timeout.count()), command}, cwd_);
    options.timeout = timeout + kRemoteGrace;
    options.max_output = max_output;
    const auto start = Clock::now();
    CommandResult result = run_command(options, sink, stopping);
    // 124 is what `timeout` exits with when it ended the command.
    if (result.exit_code == 124 && Clock::now() - start >= timeout) result.timed_out = true;
    return result;
  }

  nlohmann::ordered_json describe() override {
    CommandOptions options;
    options.argv = runtime_argv(spec_, {"sh", "-c", "uname -a; pwd"}, cwd_);
    options.timeout = kHelperTimeout;
    options.max_output = 4096;
    const CommandResult result = run_command(options);
    const std::vector<std::string_view> lines = split_lines(result.output);
    const bool ok = result.exit_code == 0 && lines.size() >= 2;
    return {{"os", ok ? std::string(lines[0]) : "unknown"},
            {"cwd", ok ? std::string(lines[1]) : (cwd_.empty() ? "unknown" : cwd_)},
            {"runtime", spec_text_}};
  }

 private:
  CommandOptions helper_options(std::vector<std::string> inner, size_t max_output) const {
    CommandOptions options;
    options.argv = runtime_argv(spec_, inner, "");  // the paths are absolute already
    options.timeout = kHelperTimeout;
    options.max_output = max_output;
    return options;
  }

  CommandResult helper(std::vector<std::string> inner, size_t max_output) const {
    return run_command(helper_options(std::move(inner), max_output));
  }

  // One `find` pass for directories or files. -mindepth/-maxdepth are not POSIX but both GNU
  // and busybox find have them.
  void find_into(Listing& listing, const std::string& dir, int max_depth, bool dirs) {
    std::string junk;
    for (std::string_view name : junk_dir_names()) {
      junk += (junk.empty() ? "-name " : " -o -name ") + shell_quote(name);
    }
    std::string script = "cd \"$1\" && find . -mindepth 1";
    if (max_depth > 0) script += fmt::format(" -maxdepth {}", max_depth);
    script += dirs ? fmt::format(" -type d \\( \\( {} \\) -prune -print -o -print \\)", junk)
                   : fmt::format(" \\( -type d \\( {} \\) -prune \\) -o -type f -print", junk);
    CommandOptions options = helper_options({"sh", "-c", script, "sh", dir}, kMaxListOutput);
    options.merge_stderr = false;
    options.timeout = kListTimeout;
    const CommandResult result = run_command(options);
    // find exits 1 when some directory was unreadable; what it listed still counts.
    if (result.exit_code != 0 || result.truncated || result.timed_out) listing.incomplete = true;
    for (std::string_view line : split_lines(result.output)) {
      if (line.starts_with("./")) line.remove_prefix(2);
      if (!line.empty()) listing.entries.push_back({std::string(line), dirs});
    }
  }

  RuntimeSpec spec_;
  std::string cwd_;
  std::string spec_text_;
};

}  // namespace

std::unique_ptr<Workspace> open_workspace(const ToolCall& call) {
  const RuntimeSpec spec = parse_runtime_spec(call.runtime);
  switch (spec.kind) {
    case RuntimeSpec::Kind::kHost:
      return std::make_unique<HostWorkspace>(call.cwd);
    case RuntimeSpec::Kind::kContainer:
    case RuntimeSpec::Kind::kSsh:
      return std::make_unique<RemoteWorkspace>(spec, call.cwd, call.runtime);
    case RuntimeSpec::Kind::kImage:
      break;
  }
  // Starting a container is the server's business (--tools-runtime), not a request's.
  throw ToolFailure(fmt::format(
      "tool runtime '{}' names an image; a call needs a running container ({}-container:ID)",
      call.runtime, spec.engine));
}

ToolsRuntime::ToolsRuntime(std::string_view spec) : parsed_(parse_runtime_spec(spec)), spec_(spec) {
  if (parsed_.kind == RuntimeSpec::Kind::kImage) start_container();
}

ToolsRuntime::~ToolsRuntime() {
  stop_container();
}

std::string ToolsRuntime::spec() {
  if (parsed_.kind != RuntimeSpec::Kind::kImage) return spec_;
  std::lock_guard<std::mutex> lock(mutex_);
  // The container may have been stopped from outside: the next call gets a new one.
  if (container_ == nullptr || container_->try_wait()) {
    stop_container();
    start_container();
  }
  return fmt::format("{}-container:{}", parsed_.engine, container_id_);
}

void ToolsRuntime::start_container() {
  // The engine writes the new container's id into a file that must not exist yet.
  std::error_code ec;
  std::string dir_template = (fs::temp_directory_path(ec) / "inferd-tools-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr)
    throw ToolFailure(fmt::format("cannot make a temporary directory: {}", std::strerror(errno)));
  const fs::path dir(dir_template);
  const std::string cidfile = (dir / "cid").string();

  util::SpawnOptions options;
  // `sh` reading the stdin we hold keeps the container alive; --rm removes it once it ends.
  options.argv = {parsed_.engine, "run", "--rm", "-i", "--cidfile", cidfile, parsed_.target, "sh"};
  options.pipe_stdin = true;
  options.stderr_mode = util::SpawnOptions::Stderr::kInherit;  // pull progress, errors
  try {
    container_ = std::make_unique<util::Subprocess>(options);
  } catch (const inferd::Error& e) {
    fs::remove_all(dir, ec);
    throw ToolFailure(e.what());
  }

  std::string id;
  const auto deadline = Clock::now() + kContainerStartTimeout;
  while (Clock::now() < deadline && !container_->try_wait()) {
    std::ifstream in(cidfile);
    if (in && std::getline(in, id) && valid_container_id(trim(id))) break;
    id.clear();
    std::this_thread::sleep_for(kPollStep);
  }
  fs::remove_all(dir, ec);
  id = trim(id);
  if (id.empty()) {
    const std::optional<int> status = container_->try_wait();
    container_.reset();  // kills the client if it is still waiting
    throw ToolFailure(
        status ? fmt::format("{} run {} exited with code {} before its container started",
                             parsed_.engine, parsed_.target, *status)
               : fmt::format("{} run {}: no container after {} s", parsed_.engine, parsed_.target,
                             kContainerStartTimeout.count()));
  }
  container_id_ = id;
}

void ToolsRuntime::stop_container() {
  if (container_ == nullptr) return;
  container_->close_stdin();  // the shell reads end of file and exits
  if (!container_->wait_until(Clock::now() + kContainerStopTimeout) && !container_id_.empty()) {
    // It did not end: remove it by id, as killing the client would leave it running.
    CommandOptions remove;
    remove.argv = {parsed_.engine, "rm", "-f", container_id_};
    remove.timeout = kContainerStopTimeout;
    try {
      run_command(remove);
    } catch (const std::exception&) {
      // Nothing more to try from here; the engine's --rm still applies when it stops.
    }
  }
  container_.reset();
  container_id_.clear();
}

}  // namespace inferd::agent
