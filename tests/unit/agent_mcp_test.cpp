// MCP servers as agent tools (src/agent/mcp_*.h): the config's checks, then real stdio servers
// (a Python script written below) that answer, fail, crash, hang, chatter and leave
// grandchildren behind, to check that every call ends with an answer and shutdown is prompt.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent/mcp_client.h"
#include "agent/mcp_config.h"
#include "util/error.h"

namespace inferd::agent {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

testing::AssertionResult has_text(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "\"" << text << "\" does not hold \"" << part << "\"";
}

testing::AssertionResult has_name(const std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) != names.end())
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << name << " is not among " << names.size() << " tools";
}

// ---------------------------------------------------------------------------------------------
// The config

std::string config_error(const std::string& text) {
  try {
    parse_mcp_config(text, "--mcp-servers-json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(McpConfig, ReadsEveryField) {
  const auto configs = parse_mcp_config(R"({"mcpServers": {
      "files": {"command": "npx", "args": ["-y", "server-files"], "env": {"A": "1", "-B": "2"},
                "cwd": "/tmp", "timeout_ms": 1500, "type": "stdio"},
      "plain": {"command": "/bin/tool"}}})",
                                        "test");
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].name, "files");
  EXPECT_EQ(configs[0].command, "npx");
  EXPECT_EQ(configs[0].args, (std::vector<std::string>{"-y", "server-files"}));
  EXPECT_EQ(configs[0].env.at("A"), "1");
  EXPECT_EQ(configs[0].env.at("-B"), "2");
  EXPECT_EQ(configs[0].cwd, "/tmp");
  EXPECT_EQ(configs[0].timeout, milliseconds(1500));
  EXPECT_EQ(configs[1].name, "plain");
  EXPECT_TRUE(configs[1].args.empty());
  EXPECT_EQ(configs[1].timeout, milliseconds(30000));
}

TEST(McpConfig, LeavesOutRemoteServers) {
  const auto configs = parse_mcp_config(
      R"({"mcpServers": {"remote": {"url": "https://example.com/mcp"}, "local": {"command": "x"}}})",
      "test");
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].name, "local");
}

TEST(McpConfig, NamesWhatIsWrong) {
  EXPECT_TRUE(has_text(config_error("not valid json"), "not valid JSON"));
  EXPECT_TRUE(has_text(config_error("not valid json"), "--mcp-servers-json"));
  EXPECT_TRUE(has_text(config_error("[]"), "mcpServers"));
  EXPECT_TRUE(has_text(config_error(R"({"servers": {}})"), "mcpServers"));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": []})"), "mcpServers"));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": "python3"}})"), "\"a\""));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": 3}}})"),
                       "\"command\" must be a string"));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": ""}}})"), "empty"));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": "x", "args": "y"}}})"),
                       "\"args\""));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": "x", "args": [1]}}})"),
                       "\"args\""));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}})"),
                       "\"K\""));
  EXPECT_TRUE(
      has_text(config_error(R"({"mcpServers": {"a": {"command": "x", "env": {"K=V": "1"}}}})"),
               "variable name"));
  EXPECT_TRUE(has_text(config_error(R"({"mcpServers": {"a": {"command": "x", "cwd": false}}})"),
                       "\"cwd\""));
  for (const char* timeout : {"0", "-5", "1.5", "\"100\"", "1e12"}) {
    EXPECT_TRUE(has_text(
        config_error(fmt::format(
            R"({{"mcpServers": {{"a": {{"command": "x", "timeout_ms": {}}}}}}})", timeout)),
        "timeout_ms"))
        << timeout;
  }
}

TEST(McpConfig, FilesAndBothOptions) {
  EXPECT_THROW(read_mcp_config_file("/nonexistent/mcp.json"), Error);
  try {
    load_mcp_config("/nonexistent/mcp.json", "");
    ADD_FAILURE() << "a missing file must throw";
  } catch (const Error& e) {
    EXPECT_TRUE(has_text(e.what(), "/nonexistent/mcp.json"));
  }
  const std::string path = testing::TempDir() + "agent_mcp_config_test.json";
  std::ofstream(path) << R"({"mcpServers": {"a": {"command": "x"}}})";
  const auto both = load_mcp_config(path, R"({"mcpServers": {"b": {"command": "y"}}})");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].name, "a");
  EXPECT_EQ(both[1].name, "b");
  EXPECT_THROW(load_mcp_config(path, R"({"mcpServers": {"a": {"command": "y"}}})"), Error);
  std::ofstream(path) << "{";
  EXPECT_THROW(load_mcp_config(path, ""), Error);
  std::filesystem::remove(path);
  EXPECT_TRUE(load_mcp_config("", "").empty());
}

// ---------------------------------------------------------------------------------------------
// Servers: one Python script, its behaviour picked by flags and by the tool called.

constexpr const char* kFixture = R"PY(
import json, os, subprocess, sys, time

args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1] if name in args else None

if opt("--log"):
    with open(opt("--log"), "a") as f:
        f.write(f"{os.getpid()}\n")
if opt("--grandchild"):
    # Inherits stdin, stdout and stderr: the pipes stay open after this process is gone.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(opt("--grandchild"), "w") as f:
        f.write(str(child.pid))
if "--silent" in args:
    time.sleep(60)

CALLABLE = ["echo", "fail", "is_error", "multi", "sleep", "crash", "die", "die_once", "notify",
            "burst", "split", "stale", "ping", "huge", "env", "cwd", "id", "pid"]
TOOLS = [{"name": n, "description": "the " + n + " tool",
          "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}
         for n in CALLABLE]
TOOLS += [{"name": "bare"}, {"name": "loose", "description": "", "inputSchema": {"type": "object"}}]
if "--empty" in args:
    TOOLS = []

def send(*messages):
    # One write: several messages can reach the client in one read.
    data = "".join(json.dumps(m) + "\n" for m in messages).encode()
    while data:
        data = data[os.write(1, data):]

def text(rid, *texts, **extra):
    return {"jsonrpc": "2.0", "id": rid,
            "result": {"content": [{"type": "text", "text": t} for t in texts], **extra}}

def note():
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}

def call(name, a, rid):
    if name == "echo":
        return text(rid, "echo: " + a.get("message", ""))
    if name == "fail":
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "transient error"}}
    if name == "is_error":
        return text(rid, "it broke", isError=True)
    if name == "multi":
        r = text(rid, "one", "two")
        r["result"]["content"].insert(1, {"type": "image", "data": "AAAA", "mimeType": "image/png"})
        return r
    if name == "sleep":
        if a.get("marker"):
            open(a["marker"], "w").close()
        time.sleep(a.get("seconds", 1))
        return text(rid, "slept")
    if name == "crash":
        send(text(rid, "crashing..."))
        os._exit(1)
    if name == "die":
        os._exit(1)
    if name == "die_once":
        if not os.path.exists(a["marker"]):
            open(a["marker"], "w").close()
            os._exit(1)
        return text(rid, "survived")
    if name == "notify":
        send(note())
        time.sleep(0.05)
        os.write(1, b"a log line that is not JSON\n")
        time.sleep(0.05)
        return text(rid, "after notes")
    if name == "burst":
        send(note(), note(), text(rid, "burst"), note())
        return None
    if name == "split":
        data = (json.dumps(text(rid, "in two parts")) + "\n").encode()
        os.write(1, data[:10])
        time.sleep(0.1)
        os.write(1, data[10:])
        return None
    if name == "stale":
        send(text(rid - 1, "late"), text("other", "not ours"))
        return text(rid, "fresh")
    if name == "ping":
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"},
             {"jsonrpc": "2.0", "id": "srv-2", "method": "sampling/createMessage", "params": {}})
        answers = [json.loads(sys.stdin.readline()) for _ in range(2)]
        return text(rid, json.dumps([answers[0].get("id"), answers[0].get("result"),
                                     answers[1].get("id"), "error" in answers[1]]))
    if name == "huge":
        sys.stdout.buffer.write(b'{"x": "' + b"x" * (17 << 20))
        sys.stdout.buffer.flush()
        time.sleep(60)
    if name == "env":
        return text(rid, os.environ.get(a["name"], "<unset>"))
    if name == "cwd":
        return text(rid, os.getcwd())
    if name == "id":
        return text(rid, str(rid))
    if name == "pid":
        return text(rid, str(os.getpid()))
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no tool " + name}}

initialized = False
for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if rid is None:
        initialized = initialized or method == "notifications/initialized"
        continue
    if method == "initialize":
        ok = params.get("protocolVersion") and "clientInfo" in params
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
            "serverInfo": {"name": "fixture", "version": "1"}}} if ok else
             {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "bad initialize"}})
    elif not initialized:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32002, "message": "not initialized"}})
    elif method == "tools/list":
        if "--pages" in args:
            first = params.get("cursor") != "page2"
            half = len(TOOLS) // 2
            result = {"tools": TOOLS[:half], "nextCursor": "page2"} if first else {"tools": TOOLS[half:]}
        else:
            result = {"tools": TOOLS}
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/call":
        answer = call(params["name"], params.get("arguments") or {}, rid)
        if answer is not None:
            send(answer)
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no " + method}})
)PY";

// Whether a process is running (not gone, not a zombie nobody reaped).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(") ");
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' &&
         line[paren + 2] != 'X';
}

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

long lines_in(const std::string& path) {
  const std::string text = read_file(path);
  return std::count(text.begin(), text.end(), '\n');
}

// SIGKILL takes a moment to land: whether the process is gone within `limit`.
bool ends_within(pid_t pid, milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (alive(pid)) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

bool wait_for_file(const std::string& path, milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (!std::filesystem::exists(path)) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

json answer(Tool& tool, json params) {
  ToolCall call;
  call.params = std::move(params);
  return json(tool.invoke(call));
}

class McpServersTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = testing::TempDir() + "agent_mcp_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    std::ofstream(dir_ + "/server.py") << kFixture;
  }
  void TearDown() override {
    if (servers_) servers_->shutdown();
    std::filesystem::remove_all(dir_);
  }

  McpServerConfig server(const std::string& name, std::vector<std::string> flags = {},
                         milliseconds timeout = milliseconds(10000)) {
    McpServerConfig config;
    config.name = name;
    config.command = "python3";
    config.args = {dir_ + "/server.py"};
    config.args.insert(config.args.end(), flags.begin(), flags.end());
    config.timeout = timeout;
    return config;
  }

  // Starts the servers, warms them up and keeps their tools.
  void start(std::vector<McpServerConfig> configs, McpOptions options = {}) {
    servers_ = std::make_unique<McpServers>(std::move(configs), options);
    servers_->warm_up();
    tools_ = servers_->tools();
  }

  Tool& tool(const std::string& name) {
    for (auto& tool : tools_) {
      if (tool->name() == name) return *tool;
    }
    throw std::runtime_error("no tool " + name);
  }

  std::vector<std::string> tool_names() const {
    std::vector<std::string> names;
    for (const auto& tool : tools_) names.push_back(tool->name());
    return names;
  }

  std::string text(const std::string& tool_name, json params = json::object()) {
    const json result = answer(tool(tool_name), std::move(params));
    EXPECT_FALSE(result.contains("error")) << result.dump();
    return result.value("plain_text_response", std::string("<none>"));
  }

  std::string error(const std::string& tool_name, json params = json::object()) {
    const json result = answer(tool(tool_name), std::move(params));
    EXPECT_FALSE(result.contains("plain_text_response")) << result.dump();
    return result.value("error", std::string("<no error>"));
  }

  std::string dir_;
  std::unique_ptr<McpServers> servers_;
  std::vector<std::unique_ptr<Tool>> tools_;
};

TEST_F(McpServersTest, ListsToolsAsServerUnderscoreTool) {
  start({server("fx")});
  const auto names = tool_names();
  EXPECT_EQ(names.size(), 20u);
  EXPECT_TRUE(has_name(names, "fx_echo"));
  EXPECT_TRUE(has_name(names, "fx_bare"));
  const json info = json(tool("fx_echo").info());
  EXPECT_EQ(info["tool"], "fx_echo");
  EXPECT_EQ(info["type"], "mcp");
  EXPECT_EQ(info["permissions"]["write"], true);
  EXPECT_EQ(info["definition"]["type"], "function");
  EXPECT_EQ(info["definition"]["function"]["name"], "fx_echo");
  EXPECT_EQ(info["definition"]["function"]["description"], "the echo tool");
  EXPECT_EQ(info["definition"]["function"]["parameters"]["properties"]["message"]["type"],
            "string");
  // No schema, or one without properties: an empty object schema.
  const json empty = {{"type", "object"}, {"properties", json::object()}};
  EXPECT_EQ(json(tool("fx_bare").info())["definition"]["function"]["parameters"], empty);
  EXPECT_EQ(json(tool("fx_loose").info())["definition"]["function"]["parameters"], empty);
  EXPECT_FALSE(tool("fx_echo").can_stream());
}

TEST_F(McpServersTest, FollowsPagesAndStartsLazilyThenKeepsTheProcess) {
  const std::string log = dir_ + "/spawns";
  start({server("paged", {"--pages", "--log", log})});
  EXPECT_EQ(tool_names().size(), 20u);
  EXPECT_TRUE(has_name(tool_names(), "paged_loose"));  // from the second page
  EXPECT_EQ(lines_in(log), 1);                         // the warm-up's process only
  const std::string pid = text("paged_pid");
  EXPECT_EQ(text("paged_pid"), pid);  // the same process answers again
  EXPECT_EQ(lines_in(log), 2);
  // Request ids grow on a session.
  const int first = std::stoi(text("paged_id"));
  EXPECT_GT(std::stoi(text("paged_id")), first);
}

TEST_F(McpServersTest, CallsAnswerTheirText) {
  start({server("fx")});
  EXPECT_EQ(text("fx_echo", {{"message", "hello world"}}), "echo: hello world");
  EXPECT_EQ(text("fx_echo", json()), "echo: ");  // no parameters: {}
  EXPECT_EQ(text("fx_multi"), "one\ntwo");       // text items only
  EXPECT_TRUE(has_text(error("fx_echo", json::array({1})), "JSON object"));
}

TEST_F(McpServersTest, ErrorsAnswerTheirMessageAndKeepTheProcess) {
  start({server("fx")});
  const std::string pid = text("fx_pid");
  EXPECT_EQ(error("fx_fail"), "transient error");
  EXPECT_EQ(error("fx_is_error"), "it broke");
  EXPECT_EQ(text("fx_pid"), pid);
}

TEST_F(McpServersTest, SkipsNotificationsStrayLinesAndOtherIds) {
  start({server("fx")});
  EXPECT_EQ(text("fx_notify"), "after notes");                // notes in writes of their own
  EXPECT_EQ(text("fx_burst"), "burst");                       // notes and the answer in one write
  EXPECT_EQ(text("fx_echo", {{"message", "x"}}), "echo: x");  // the note after it is skipped
  EXPECT_EQ(text("fx_split"), "in two parts");                // a line in two reads
  EXPECT_EQ(text("fx_stale"), "fresh");                       // answers to other ids
}

TEST_F(McpServersTest, AnswersTheServersOwnRequests) {
  start({server("fx")});
  EXPECT_EQ(json::parse(text("fx_ping")), json::parse(R"(["srv-1", {}, "srv-2", true])"));
}

TEST_F(McpServersTest, RestartsAServerThatCrashed) {
  start({server("fx")});
  const std::string pid = text("fx_pid");
  EXPECT_EQ(text("fx_crash"), "crashing...");  // answered, then exited
  const std::string respawned = text("fx_pid");
  EXPECT_NE(respawned, pid);
  // Dies while answering: started again and asked once more.
  EXPECT_EQ(text("fx_die_once", {{"marker", dir_ + "/died"}}), "survived");
  // Dies every time: an error, not a loop.
  EXPECT_TRUE(has_text(error("fx_die"), "exited"));
  EXPECT_EQ(text("fx_echo", {{"message", "back"}}), "echo: back");
}

TEST_F(McpServersTest, TimesOutKillsAndRestarts) {
  start({server("slow", {}, milliseconds(300))});
  const std::string pid = text("slow_pid");
  const auto begin = Clock::now();
  const std::string message = error("slow_sleep", {{"seconds", 30}});
  EXPECT_LT(seconds_since(begin), 2.0);
  EXPECT_TRUE(has_text(message, "timed out"));
  EXPECT_TRUE(has_text(message, "300 ms"));
  EXPECT_TRUE(ends_within(std::stoi(pid), milliseconds(1000)));  // killed, not left sleeping
  EXPECT_NE(text("slow_pid"), pid);
}

TEST_F(McpServersTest, CapsTheLengthOfALine) {
  start({server("fx")});
  EXPECT_TRUE(has_text(error("fx_huge"), "MiB"));
  EXPECT_EQ(text("fx_echo", {{"message", "after"}}), "echo: after");
}

TEST_F(McpServersTest, ShutdownEndsASlowCallPromptly) {
  start({server("slow")});
  const std::string marker = dir_ + "/sleeping";
  json result;
  std::thread caller([&] {
    result = answer(tool("slow_sleep"), {{"seconds", 30}, {"marker", marker}});
  });
  ASSERT_TRUE(wait_for_file(marker, milliseconds(10000)));
  const auto begin = Clock::now();
  servers_->shutdown();
  EXPECT_LT(seconds_since(begin), 0.5);
  caller.join();
  EXPECT_TRUE(result.contains("error")) << result.dump();
  // Later calls answer at once, without starting anything.
  const auto later = Clock::now();
  EXPECT_TRUE(has_text(error("slow_echo"), "shutting down"));
  EXPECT_LT(seconds_since(later), 0.2);
}

TEST_F(McpServersTest, GrandchildHoldingThePipesBlocksNothing) {
  const std::string grandchild = dir_ + "/grandchild";
  const auto begin = Clock::now();
  start({server("gc", {"--grandchild", grandchild}, milliseconds(20000))});
  EXPECT_LT(seconds_since(begin), 3.0);
  ASSERT_TRUE(wait_for_file(grandchild, milliseconds(1000)));
  // The warm-up ended the whole process group.
  EXPECT_TRUE(ends_within(std::stoi(read_file(grandchild)), milliseconds(1000)));

  EXPECT_EQ(text("gc_echo", {{"message", "hi"}}), "echo: hi");
  // The server exits while a grandchild keeps its stdout open: no end of file ever comes, yet
  // the call ends long before its 20 s timeout.
  const auto dying = Clock::now();
  EXPECT_TRUE(has_text(error("gc_die"), "exited"));
  EXPECT_LT(seconds_since(dying), 3.0);

  const std::string marker = dir_ + "/sleeping";
  json result;
  std::thread caller([&] {
    result = answer(tool("gc_sleep"), {{"seconds", 30}, {"marker", marker}});
  });
  ASSERT_TRUE(wait_for_file(marker, milliseconds(10000)));
  const pid_t last_grandchild = std::stoi(read_file(grandchild));
  EXPECT_TRUE(alive(last_grandchild));
  const auto stopping = Clock::now();
  servers_->shutdown();
  EXPECT_LT(seconds_since(stopping), 0.5);
  caller.join();
  EXPECT_TRUE(result.contains("error"));
  EXPECT_TRUE(ends_within(last_grandchild, milliseconds(1000)));
}

TEST_F(McpServersTest, ConcurrentCallsAllGetTheirOwnAnswer) {
  start({server("fx")});
  constexpr int kThreads = 10;
  std::vector<std::string> answers(kThreads * 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        const json result = answer(tool("fx_echo"), {{"message", fmt::format("{}-{}", t, i)}});
        answers[t * 3 + i] = result.value("plain_text_response", result.dump());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(answers[t * 3 + i], fmt::format("echo: {}-{}", t, i));
  }
}

TEST_F(McpServersTest, PassesEnvAndCwd) {
  // Set before any thread of this test runs.
  ::setenv("INFERD_MCP_INHERITED", "from the server", 1);
  ::setenv("INFERD_MCP_OVERRIDDEN", "from the server", 1);
  McpServerConfig config = server("fx");
  config.env = {{"INFERD_MCP_OVERRIDDEN", "from the config"}, {"INFERD_MCP_NEW", "new"}};
  config.cwd = dir_;
  start({config});
  EXPECT_EQ(text("fx_env", {{"name", "INFERD_MCP_NEW"}}), "new");
  EXPECT_EQ(text("fx_env", {{"name", "INFERD_MCP_OVERRIDDEN"}}), "from the config");
  EXPECT_EQ(text("fx_env", {{"name", "INFERD_MCP_INHERITED"}}), "from the server");
  EXPECT_EQ(std::filesystem::canonical(text("fx_cwd")), std::filesystem::canonical(dir_));
  ::unsetenv("INFERD_MCP_INHERITED");
  ::unsetenv("INFERD_MCP_OVERRIDDEN");
}

// env(1) would take a command with '=' for one more variable: it must still run as a command.
TEST_F(McpServersTest, EnvWithACommandThatHasAnEqualsSign) {
  const std::string script = dir_ + "/run=it.sh";
  std::ofstream(script) << "#!/bin/sh\nexec python3 \"$@\"\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  McpServerConfig config = server("fx");
  config.command = script;
  config.env = {{"INFERD_MCP_NEW", "through sh"}};
  start({config});
  EXPECT_EQ(text("fx_env", {{"name", "INFERD_MCP_NEW"}}), "through sh");
}

TEST_F(McpServersTest, EmptyToolList) {
  start({server("empty", {"--empty"})});
  EXPECT_TRUE(tools_.empty());
}

TEST_F(McpServersTest, ServersThatCannotStartAreLeftOut) {
  McpServerConfig missing = server("missing");
  missing.command = "this_executable_does_not_exist_12345";
  McpServerConfig missing_with_env = missing;
  missing_with_env.name = "missing_env";
  missing_with_env.env = {{"A", "1"}};
  McpServerConfig exits = server("exits");
  exits.command = "false";
  exits.args.clear();
  McpServerConfig bad_cwd = server("bad_cwd");
  bad_cwd.cwd = dir_ + "/nowhere";
  const auto begin = Clock::now();
  start({missing, missing_with_env, exits, bad_cwd, server("silent", {"--silent"}), server("good")},
        {.start_timeout = milliseconds(1500), .exit_grace = milliseconds(200)});
  // Side by side: the silent one's 1.5 s is not added to the others'.
  EXPECT_LT(seconds_since(begin), 4.0);
  for (const std::string& name : tool_names()) EXPECT_EQ(name.rfind("good_", 0), 0u) << name;
  EXPECT_EQ(tool_names().size(), 20u);
  EXPECT_EQ(text("good_echo", {{"message", "ok"}}), "echo: ok");
}

TEST_F(McpServersTest, ACallToAServerThatCannotStartAnswersAnError) {
  const std::string script = dir_ + "/server.py";
  start({server("fx")});
  std::filesystem::rename(script, dir_ + "/moved.py");  // the next start fails
  EXPECT_FALSE(error("fx_echo").empty());
  std::filesystem::rename(dir_ + "/moved.py", script);
  EXPECT_EQ(text("fx_echo", {{"message", "again"}}), "echo: again");
}

TEST_F(McpServersTest, ToolsOutliveTheirServers) {
  start({server("fx")});
  servers_.reset();
  EXPECT_TRUE(has_text(error("fx_echo"), "shutting down"));
}

}  // namespace
}  // namespace inferd::agent
