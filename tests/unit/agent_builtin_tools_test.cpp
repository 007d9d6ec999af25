// The built-in agent tools (src/agent/builtin_tools.h) in temporary directories: the tool list
// and its entries; read_file, write_file and edit_file (unique, overlap, not found); the glob
// matcher; file_glob_search (type, max_depth, limit, junk directories) and grep_search; shell
// commands (exit code, streaming, timeouts that kill the whole group, UTF-8 kept whole across
// chunks); runtime specs and the command lines they make; and the container and ssh runtimes
// end to end through stand-in `docker` and `ssh` scripts that run the command here.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "agent/builtin_tools.h"
#include "agent/tool_runtime.h"
#include "util/error.h"
#include "util/utf8.h"

namespace inferd::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using std::chrono::steady_clock;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// A fresh directory per test, removed after.
class AgentTools : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "agent-tools-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static ojson call(std::string_view tool, const json& params, std::string cwd = "",
                    std::string runtime = "") {
    auto tools = make_builtin_tools(tool);
    EXPECT_EQ(tools.size(), 1u);
    ToolCall call;
    call.params = params;
    call.cwd = std::move(cwd);
    call.runtime = std::move(runtime);
    return tools.at(0)->invoke(call);
  }

  static std::string text_of(const ojson& answer) {
    EXPECT_FALSE(answer.contains("error")) << answer.dump();
    return answer.value("plain_text_response", "");
  }

  static std::string error_of(const ojson& answer) {
    EXPECT_TRUE(answer.contains("error")) << answer.dump();
    return answer.value("error", "");
  }

  static std::vector<std::string> entry_paths(const ojson& answer) {
    std::vector<std::string> paths;
    for (const auto& entry : answer.at("entries")) paths.push_back(entry.at("path"));
    return paths;
  }

  fs::path dir_;
};

// --- the list of tools ----------------------------------------------------------------------

TEST(AgentToolList, AllInOrderSubsetsAndUnknownNames) {
  const auto all = make_builtin_tools("all");
  ASSERT_EQ(all.size(), 7u);
  const std::vector<std::string> expected = {
      "read_file",  "file_glob_search", "grep_search", "exec_shell_command",
      "write_file", "edit_file",        "get_info"};
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]->name(), expected[i]);

  const auto some = make_builtin_tools(" edit_file, read_file ,edit_file");
  ASSERT_EQ(some.size(), 2u);
  EXPECT_EQ(some[0]->name(), "read_file");
  EXPECT_EQ(some[1]->name(), "edit_file");
  EXPECT_TRUE(make_builtin_tools("").empty());

  try {
    make_builtin_tools("read_file,web_search");
    FAIL() << "an unknown tool was accepted";
  } catch (const inferd::Error& e) {
    EXPECT_TRUE(contains(e.what(), "web_search")) << e.what();
    EXPECT_TRUE(contains(e.what(), "exec_shell_command")) << e.what();
  }
}

TEST(AgentToolList, EntriesDescribeEachTool) {
  for (const auto& tool : make_builtin_tools("all")) {
    const ojson info = tool->info();
    EXPECT_EQ(info.at("tool"), tool->name());
    EXPECT_EQ(info.at("type"), "server");
    EXPECT_FALSE(info.at("display_name").get<std::string>().empty());
    const bool writes = tool->name() == "write_file" || tool->name() == "edit_file" ||
                        tool->name() == "exec_shell_command";
    EXPECT_EQ(info.at("permissions").at("write"), writes) << tool->name();
    const ojson& function = info.at("definition").at("function");
    EXPECT_EQ(info.at("definition").at("type"), "function");
    EXPECT_EQ(function.at("name"), tool->name());
    EXPECT_FALSE(function.at("description").get<std::string>().empty());
    const ojson& parameters = function.at("parameters");
    EXPECT_EQ(parameters.at("type"), "object");
    EXPECT_TRUE(parameters.at("properties").is_object());
    for (const auto& required : parameters.at("required")) {
      EXPECT_TRUE(parameters.at("properties").contains(required.get<std::string>()));
    }
    EXPECT_EQ(tool->can_stream(), tool->name() == "exec_shell_command");
  }
  const ojson read = make_builtin_tools("read_file")[0]->info();
  EXPECT_EQ(read["definition"]["function"]["parameters"]["required"], ojson::array({"path"}));
}

// --- read_file, write_file, edit_file -------------------------------------------------------

TEST_F(AgentTools, WriteThenReadGivesTheSameBytes) {
  const std::string file = (dir_ / "deep/er/test.log").string();
  const ojson written = call("write_file", {{"path", file}, {"content", "line1\nline2\nline3\n"}});
  EXPECT_EQ(written.at("result"), "file written successfully");
  EXPECT_EQ(read_text(file), "line1\nline2\nline3\n");
  EXPECT_EQ(text_of(call("read_file", {{"path", file}})), "line1\nline2\nline3\n");

  // No final newline is added either.
  write_text(dir_ / "bare.txt", "a\n\nb");
  EXPECT_EQ(text_of(call("read_file", {{"path", (dir_ / "bare.txt").string()}})), "a\n\nb");
}

TEST_F(AgentTools, ReadFileLineRangeAndNumbers) {
  write_text(dir_ / "f.txt", "a\nb\nc\nd\n");
  const std::string path = (dir_ / "f.txt").string();
  EXPECT_EQ(text_of(call("read_file", {{"path", path}, {"start_line", 2}, {"end_line", 3}})),
            "b\nc\n");
  EXPECT_EQ(text_of(call("read_file", {{"path", path}, {"start_line", "3"}, {"append_loc", true}})),
            "3\u2192c\n4\u2192d\n");
  EXPECT_EQ(text_of(call("read_file", {{"path", path}, {"end_line", 1}})), "a\n");
}

TEST_F(AgentTools, ReadFileErrorsAreAnswers) {
  EXPECT_TRUE(contains(error_of(call("read_file", {{"path", (dir_ / "nope").string()}})), "nope"));
  EXPECT_TRUE(contains(error_of(call("read_file", {{"path", dir_.string()}})), "directory"));
  EXPECT_TRUE(contains(error_of(call("read_file", json::object())), "path"));
  EXPECT_TRUE(
      contains(error_of(call("read_file", {{"path", "x"}, {"start_line", "ten"}})), "start_line"));
  EXPECT_TRUE(contains(error_of(call("read_file", json::array({1}))), "object"));
}

TEST_F(AgentTools, ReadFileCapsBigFiles) {
  std::string big;
  for (int i = 1; i <= 5000; ++i) big += "line " + std::to_string(i) + "\n";
  ASSERT_GT(big.size(), 16u * 1024);
  write_text(dir_ / "big.txt", big);
  const std::string path = (dir_ / "big.txt").string();
  EXPECT_TRUE(contains(error_of(call("read_file", {{"path", path}})), "too large"));
  EXPECT_EQ(text_of(call("read_file", {{"path", path}, {"start_line", 4999}})),
            "line 4999\nline 5000\n");
  const std::string head = text_of(call("read_file", {{"path", path}, {"start_line", 1}}));
  EXPECT_TRUE(contains(head, "[output truncated]"));
  EXPECT_LE(head.size(), 16u * 1024 + 64);
}

TEST_F(AgentTools, ReadFileBase64) {
  write_text(dir_ / "bin", std::string("\x00\xff\x10hi", 5));
  const ojson answer =
      call("read_file", {{"path", (dir_ / "bin").string()}, {"resp_type", "base64"}});
  EXPECT_EQ(answer.at("base64"), "AP8QaGk=");
  EXPECT_EQ(answer.at("size_bytes"), 5);
}

TEST_F(AgentTools, RelativePathsFollowTheCallCwdNotTheModelsParam) {
  write_text(dir_ / "work/rel.txt", "relative-content");
  const std::string work = (dir_ / "work").string();
  EXPECT_EQ(
      text_of(call("read_file", {{"path", "rel.txt"}, {"cwd", "/definitely/not/here"}}, work)),
      "relative-content");
  call("write_file", {{"path", "sub/out.txt"}, {"content", "written"}}, work);
  EXPECT_EQ(read_text(dir_ / "work/sub/out.txt"), "written");
  // An absolute path does not care about the cwd.
  write_text(dir_ / "other/abs.txt", "absolute");
  EXPECT_EQ(text_of(call("read_file", {{"path", (dir_ / "other/abs.txt").string()}}, work)),
            "absolute");
  EXPECT_EQ(text_of(call("read_file", {{"path", "../other/abs.txt"}}, work)), "absolute");
}

TEST_F(AgentTools, EditFileAppliesAllEditsAgainstTheOriginal) {
  const std::string path = (dir_ / "test.log").string();
  write_text(path, "line1\nline2\nline3\n");
  const ojson answer =
      call("edit_file", {{"path", path},
                         {"edits",
                          {{{"old_text", "line2"}, {"new_text", "line2-edited"}},
                           {{"old_text", "line3\n"}, {"new_text", "line3\nline4\n"}}}}});
  EXPECT_EQ(answer.at("result"), "file edited successfully");
  EXPECT_EQ(answer.at("edits_applied"), 2);
  EXPECT_EQ(read_text(path), "line1\nline2-edited\nline3\nline4\n");

  // A new_text that contains another edit's old_text does not feed it: all match the original.
  write_text(path, "a b");
  call("edit_file",
       {{"path", path},
        {"edits",
         {{{"old_text", "a"}, {"new_text", "b"}}, {{"old_text", "b"}, {"new_text", "c"}}}}});
  EXPECT_EQ(read_text(path), "b c");
}

TEST_F(AgentTools, EditFileRefusesAmbiguousMissingAndOverlappingEdits) {
  const std::string path = (dir_ / "test.log").string();
  write_text(path, "dup\ndup\n");
  const std::string twice = error_of(
      call("edit_file", {{"path", path}, {"edits", {{{"old_text", "dup"}, {"new_text", "x"}}}}}));
  EXPECT_TRUE(contains(twice, "unique")) << twice;
  EXPECT_TRUE(contains(twice, "2 times")) << twice;

  write_text(path, "line1\nline2\n");
  const std::string overlap =
      error_of(call("edit_file", {{"path", path},
                                  {"edits",
                                   {{{"old_text", "line1\nline2"}, {"new_text", "a"}},
                                    {{"old_text", "line2"}, {"new_text", "b"}}}}}));
  EXPECT_TRUE(contains(overlap, "overlap")) << overlap;

  const std::string missing =
      error_of(call("edit_file", {{"path", path},
                                  {"edits",
                                   {{{"old_text", "line1"}, {"new_text", "one"}},
                                    {{"old_text", "line9"}, {"new_text", "nine"}}}}}));
  EXPECT_TRUE(contains(missing, "edits[1]")) << missing;
  EXPECT_TRUE(contains(missing, "not found")) << missing;
  // All or nothing: the edit that did match was not written either.
  EXPECT_EQ(read_text(path), "line1\nline2\n");

  EXPECT_TRUE(
      contains(error_of(call("edit_file", {{"path", path}, {"edits", json::array()}})), "edits"));
  EXPECT_TRUE(contains(
      error_of(call("edit_file",
                    {{"path", path}, {"edits", {{{"old_text", "line1"}, {"new_text", "line1"}}}}})),
      "change nothing"));
  EXPECT_TRUE(
      contains(error_of(call("edit_file", {{"path", (dir_ / "none").string()},
                                           {"edits", {{{"old_text", "a"}, {"new_text", "b"}}}}})),
               "no such file"));
}

TEST_F(AgentTools, EditFileTakesEditsWrittenAsAString) {
  const std::string path = (dir_ / "s.txt").string();
  write_text(path, "hello world");
  const ojson answer = call(
      "edit_file", {{"path", path}, {"edits", R"([{"old_text": "world", "new_text": "there"}])"}});
  EXPECT_EQ(answer.value("edits_applied", 0), 1) << answer.dump();
  EXPECT_EQ(read_text(path), "hello there");
}

// --- globs ---------------------------------------------------------------------------------

TEST(AgentGlob, Matching) {
  EXPECT_TRUE(glob_match("*.cpp", "a.cpp"));
  EXPECT_FALSE(glob_match("*.cpp", "a/b.cpp"));
  EXPECT_FALSE(glob_match("*.cpp", "a.cppx"));
  EXPECT_TRUE(glob_match("**", "a/b/c"));
  EXPECT_TRUE(glob_match("**/*.cpp", "b.cpp"));
  EXPECT_TRUE(glob_match("**/*.cpp", "a/b/c.cpp"));
  EXPECT_TRUE(glob_match("src/**/*.h", "src/a.h"));
  EXPECT_TRUE(glob_match("src/**/*.h", "src/x/y/a.h"));
  EXPECT_FALSE(glob_match("src/**/*.h", "lib/src/a.h"));
  EXPECT_TRUE(glob_match("a?c", "abc"));
  EXPECT_FALSE(glob_match("a?c", "a/c"));
  EXPECT_TRUE(glob_match("[a-c]x", "bx"));
  EXPECT_FALSE(glob_match("[a-c]x", "dx"));
  EXPECT_TRUE(glob_match("[!a-c]x", "dx"));
  EXPECT_TRUE(glob_match("[]]", "]"));
  EXPECT_TRUE(glob_match("a\\*", "a*"));
  EXPECT_FALSE(glob_match("a\\*", "ab"));
  EXPECT_TRUE(glob_match("[x", "[x"));
  // Many stars against a long near miss: linear, not exponential.
  const auto start = steady_clock::now();
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*b", std::string(5000, 'a')));
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(AgentGlob, PathRules) {
  EXPECT_TRUE(path_glob_match("*.py", "deep/er/test.py"));  // a name at any depth
  EXPECT_TRUE(path_glob_match("test.py", "tools/test.py"));
  EXPECT_TRUE(path_glob_match("src/*.cpp", "src/a.cpp"));  // "**/" in front
  EXPECT_TRUE(path_glob_match("src/*.cpp", "lib/src/a.cpp"));
  EXPECT_FALSE(path_glob_match("src/*.cpp", "src/x/a.cpp"));
  EXPECT_TRUE(path_glob_match("/src/*.cpp", "src/a.cpp"));  // anchored
  EXPECT_FALSE(path_glob_match("/src/*.cpp", "lib/src/a.cpp"));
  EXPECT_TRUE(path_glob_match("./src/*.cpp", "src/a.cpp"));
  EXPECT_FALSE(path_glob_match("./src/*.cpp", "lib/src/a.cpp"));
  EXPECT_TRUE(path_glob_match("", "anything/at/all"));
}

// --- file_glob_search ----------------------------------------------------------------------

TEST_F(AgentTools, GlobSearchDirectories) {
  write_text(dir_ / "project-alpha/README.md", "alpha");
  write_text(dir_ / "project-alpha/src/main.cpp", "int main() {}");
  write_text(dir_ / "project-beta/notes.txt", "beta");

  const ojson dirs = call("file_glob_search", {{"path", dir_.string()}, {"type", "dir"}});
  const std::string text = text_of(dirs);
  EXPECT_TRUE(contains(text, "project-alpha/\n"));
  EXPECT_TRUE(contains(text, "project-beta/\n"));
  EXPECT_TRUE(contains(text, "project-alpha/src/\n"));
  EXPECT_FALSE(contains(text, "README.md"));
  EXPECT_TRUE(contains(text, "Total matches: 3"));
  for (const auto& entry : dirs.at("entries")) EXPECT_EQ(entry.at("type"), "dir");
  EXPECT_EQ(dirs.at("base"), dir_.string());

  const ojson all =
      call("file_glob_search", {{"path", dir_.string()}, {"type", "all"}, {"include", "*proj*"}});
  EXPECT_EQ(entry_paths(all), (std::vector<std::string>{"project-alpha", "project-beta"}));

  const ojson files = call("file_glob_search", {{"path", dir_.string()}});
  EXPECT_EQ(entry_paths(files),
            (std::vector<std::string>{"project-alpha/README.md", "project-alpha/src/main.cpp",
                                      "project-beta/notes.txt"}));
  for (const auto& entry : files.at("entries")) EXPECT_EQ(entry.at("type"), "file");
  EXPECT_EQ(
      entry_paths(call("file_glob_search",
                       {{"path", dir_.string()}, {"include", "*.cpp"}, {"exclude", "src/*"}})),
      std::vector<std::string>{});
}

TEST_F(AgentTools, GlobSearchDepthAndLimit) {
  write_text(dir_ / "top.txt", "top");
  write_text(dir_ / "a/mid.txt", "mid");
  write_text(dir_ / "a/b/deep.txt", "deep");
  fs::create_directories(dir_ / "a/b/c");

  const std::string one =
      text_of(call("file_glob_search", {{"path", dir_.string()}, {"max_depth", 1}}));
  EXPECT_TRUE(contains(one, "top.txt"));
  EXPECT_FALSE(contains(one, "mid.txt"));
  const std::string two =
      text_of(call("file_glob_search", {{"path", dir_.string()}, {"max_depth", 2}}));
  EXPECT_TRUE(contains(two, "mid.txt"));
  EXPECT_FALSE(contains(two, "deep.txt"));

  const ojson limited = call("file_glob_search", {{"path", dir_.string()}, {"limit", 1}});
  EXPECT_EQ(limited.at("entries").size(), 1u);
  EXPECT_TRUE(contains(text_of(limited), "Total matches: 3"));
  EXPECT_TRUE(contains(error_of(call("file_glob_search", {{"path", dir_.string()}, {"limit", 0}})),
                       "invalid limit"));
}

TEST_F(AgentTools, GlobSearchListsJunkDirectoriesButDoesNotWalkThem) {
  write_text(dir_ / "build/artifact.txt", "built");
  fs::create_directories(dir_ / "build/nested");
  write_text(dir_ / "node_modules/x/index.js", "js");
  write_text(dir_ / "src/main.cpp", "int main() {}");

  const ojson top =
      call("file_glob_search", {{"path", dir_.string()}, {"type", "dir"}, {"max_depth", 1}});
  const auto dirs = entry_paths(top);
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), "build"), dirs.end());

  const auto all =
      entry_paths(call("file_glob_search", {{"path", dir_.string()}, {"type", "all"}}));
  EXPECT_NE(std::find(all.begin(), all.end(), "src/main.cpp"), all.end());
  EXPECT_NE(std::find(all.begin(), all.end(), "node_modules"), all.end());
  for (const std::string& path : all) {
    EXPECT_FALSE(path.rfind("build/", 0) == 0) << path;
    EXPECT_FALSE(path.rfind("node_modules/", 0) == 0) << path;
  }
  // Searching inside a junk directory itself works.
  EXPECT_EQ(entry_paths(call("file_glob_search", {{"path", (dir_ / "build").string()}})),
            std::vector<std::string>{"artifact.txt"});
}

TEST_F(AgentTools, GlobSearchSurvivesALinkLoopAndBadInput) {
  write_text(dir_ / "f.txt", "x");
  fs::create_directory_symlink(dir_, dir_ / "loop");
  const auto all =
      entry_paths(call("file_glob_search", {{"path", dir_.string()}, {"type", "all"}}));
  EXPECT_EQ(all, (std::vector<std::string>{"f.txt", "loop"}));

  EXPECT_TRUE(
      contains(error_of(call("file_glob_search", {{"path", dir_.string()}, {"type", "bogus"}})),
               "invalid type"));
  EXPECT_TRUE(contains(error_of(call("file_glob_search", {{"path", (dir_ / "f.txt").string()}})),
                       "not a directory"));
  // "." is the call's cwd.
  EXPECT_TRUE(contains(
      text_of(call("file_glob_search", {{"path", "."}, {"include", "*.txt"}}, dir_.string())),
      "f.txt"));
}

// --- grep_search ---------------------------------------------------------------------------

TEST_F(AgentTools, GrepIncludeMatchesNamesAtAnyDepth) {
  const std::string marker = "agent_tools_marker_for_grep";
  write_text(dir_ / "tools/server/tests/unit/test_tools.py", "x = 1\nM = '" + marker + "'\n");
  write_text(dir_ / "tools/other.py", marker + "\n");
  write_text(dir_ / "node_modules/test_tools.py", marker + "\n");
  write_text(dir_ / "bin/test_tools.py", std::string("\0", 1) + marker);

  const std::string text = text_of(call(
      "grep_search", {{"path", dir_.string()}, {"pattern", marker}, {"include", "test_tools.py"}}));
  EXPECT_TRUE(contains(text, "tools/server/tests/unit/test_tools.py:M = '" + marker + "'\n"))
      << text;
  EXPECT_TRUE(contains(text, "Total matches: 1")) << text;
  EXPECT_FALSE(contains(text, "node_modules")) << text;

  const std::string everywhere =
      text_of(call("grep_search", {{"path", dir_.string()}, {"pattern", marker}}));
  EXPECT_TRUE(contains(everywhere, "Total matches: 2")) << everywhere;
}

TEST_F(AgentTools, GrepOptions) {
  write_text(dir_ / "a.txt", "one\nTwo a.b\nthree\naxb\n");
  const std::string file = (dir_ / "a.txt").string();
  const std::string numbered = text_of(call(
      "grep_search",
      {{"path", file}, {"pattern", "two"}, {"ignore_case", true}, {"return_line_numbers", true}}));
  EXPECT_TRUE(contains(numbered, file + ":2:Two a.b\n")) << numbered;

  const std::string context =
      text_of(call("grep_search", {{"path", file}, {"pattern", "^three$"}, {"context_lines", 1}}));
  EXPECT_TRUE(
      contains(context, file + "-2-Two a.b\n" + file + ":3:three\n" + file + "-4-axb\n--\n"))
      << context;

  const std::string regex = text_of(call("grep_search", {{"path", file}, {"pattern", "a.b"}}));
  EXPECT_TRUE(contains(regex, "Total matches: 2")) << regex;
  const std::string literal =
      text_of(call("grep_search", {{"path", file}, {"pattern", "a.b"}, {"literal", true}}));
  EXPECT_TRUE(contains(literal, "Total matches: 1")) << literal;

  EXPECT_TRUE(contains(error_of(call("grep_search", {{"path", file}, {"pattern", "(unclosed"}})),
                       "regular expression"));
  EXPECT_TRUE(contains(
      error_of(call("grep_search", {{"path", (dir_ / "none").string()}, {"pattern", "x"}})),
      "no such file"));
}

TEST_F(AgentTools, GrepCapsMatchesAndLongLines) {
  std::string many;
  for (int i = 0; i < 150; ++i) many += "hit\n";
  many += "hit " + std::string(5000, 'z') + "\n";
  write_text(dir_ / "many.txt", many);
  const std::string text =
      text_of(call("grep_search", {{"path", (dir_ / "many.txt").string()}, {"pattern", "hit"}}));
  EXPECT_TRUE(contains(text, "Total matches: 100")) << text.substr(text.size() - 200);
  EXPECT_TRUE(contains(text, "[stopped at 100 matches"));

  write_text(dir_ / "long.txt", "hit " + std::string(5000, 'z') + "\n");
  const std::string cut =
      text_of(call("grep_search", {{"path", (dir_ / "long.txt").string()}, {"pattern", "hit"}}));
  EXPECT_TRUE(contains(cut, "[line cut]"));
  EXPECT_LT(cut.size(), 1200u);
}

// --- exec_shell_command and get_info -------------------------------------------------------

TEST_F(AgentTools, ShellCommandOutputAndExitCode) {
  const std::string ok = text_of(call("exec_shell_command", {{"command", "echo hello"}}));
  EXPECT_EQ(ok, "hello\n[exit code: 0]");
  const std::string failed = text_of(
      call("exec_shell_command", {{"command", "echo out; echo err >&2; printf tail; exit 3"}}));
  EXPECT_EQ(failed, "out\nerr\ntail\n[exit code: 3]");
  // It runs in the call's cwd.
  const std::string pwd = text_of(call("exec_shell_command", {{"command", "pwd"}}, dir_.string()));
  EXPECT_EQ(pwd, fs::canonical(dir_).string() + "\n[exit code: 0]");
  call("exec_shell_command", {{"command", "echo hi > marker.txt"}}, dir_.string());
  EXPECT_EQ(read_text(dir_ / "marker.txt"), "hi\n");
  EXPECT_TRUE(contains(error_of(call("exec_shell_command", json::object())), "command"));
}

TEST_F(AgentTools, ShellCommandOutputIsCapped) {
  const std::string text =
      text_of(call("exec_shell_command", {{"command", "head -c 100000 /dev/zero | tr '\\0' x"},
                                          {"max_output_size", 100}}));
  EXPECT_EQ(text.find_first_not_of('x'), 100u);
  EXPECT_TRUE(contains(text, "[output cut at 100 bytes]")) << text;
  EXPECT_TRUE(contains(text, "[exit code: 0]")) << text;
}

TEST_F(AgentTools, ShellCommandTimeoutKillsTheWholeGroup) {
  const fs::path pid_file = dir_ / "pid";
  const auto start = steady_clock::now();
  const std::string text = text_of(
      call("exec_shell_command",
           {{"command", "sleep 30 & echo $! > " + pid_file.string() + "; echo started; wait"},
            {"timeout", 1}}));
  const auto took = steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_TRUE(contains(text, "started\n")) << text;
  EXPECT_TRUE(contains(text, "[exit code: 137]")) << text;
  EXPECT_TRUE(contains(text, "timed out after 1 s")) << text;
  // The background sleep was in the group, so it is dead too: gone, or a zombie where nothing
  // reaps orphans.
  const std::string sleeper = read_text(pid_file);
  const fs::path stat = "/proc/" + sleeper.substr(0, sleeper.find('\n')) + "/stat";
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    const std::string line = read_text(stat);
    const size_t paren = line.rfind(')');
    gone = line.empty() || (paren != std::string::npos && line.substr(paren + 2, 1) == "Z");
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << sleeper << " outlived its timeout";
}

TEST_F(AgentTools, ShellCommandStreamsPiecesAsTheyCome) {
  auto tool = std::move(make_builtin_tools("exec_shell_command")[0]);
  ASSERT_TRUE(tool->can_stream());
  std::vector<std::string> chunks;
  std::vector<steady_clock::time_point> when;
  ToolCall call;
  call.params = {{"command", "echo one; sleep 0.5; echo two"}};
  call.on_output = [&](std::string_view chunk) {
    chunks.emplace_back(chunk);
    when.push_back(steady_clock::now());
    return true;
  };
  const ojson answer = tool->invoke(call);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front(), "one\n");
  // "one" came while the command still slept, not with the rest at its end.
  EXPECT_GT(when.back() - when.front(), std::chrono::milliseconds(300));
  EXPECT_EQ(chunks.back(), "[exit code: 0]");
  std::string joined;
  for (const auto& chunk : chunks) joined += chunk;
  EXPECT_EQ(joined, "one\ntwo\n[exit code: 0]");
  EXPECT_EQ(answer.at("plain_text_response"), joined);
}

TEST_F(AgentTools, ShellCommandStopsWhenTheClientLeavesOrTheServerStops) {
  auto tool = std::move(make_builtin_tools("exec_shell_command")[0]);
  int calls = 0;
  ToolCall call;
  call.params = {{"command", "echo hi; sleep 20; echo never"}, {"timeout", 30}};
  call.on_output = [&](std::string_view) {
    ++calls;
    return false;
  };
  auto start = steady_clock::now();
  tool->invoke(call);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(calls, 1);  // nothing more after it said no, not even the exit line

  std::atomic<bool> stopping{false};
  ToolCall quiet;
  quiet.params = {{"command", "sleep 20"}, {"timeout", 30}};
  quiet.stopping = &stopping;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stopping = true;
  });
  start = steady_clock::now();
  const std::string text = text_of(tool->invoke(quiet));
  stopper.join();
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(contains(text, "[stopped")) << text;
}

TEST_F(AgentTools, GetInfo) {
  const ojson info = call("get_info", json::object(), dir_.string());
  EXPECT_EQ(info.at("cwd"), dir_.string());
  EXPECT_TRUE(contains(info.at("os").get<std::string>(), "Linux"));
  EXPECT_EQ(info.at("runtime"), "host");
}

TEST(AgentRunCommand, KeepsUtf8SequencesWholeAcrossChunks) {
  CommandOptions options;
  options.argv = {"sh", "-c", "printf 'a\\303'; sleep 0.2; printf '\\251b'"};
  std::vector<std::string> chunks;
  const CommandResult result = run_command(options, [&](std::string_view chunk) {
    chunks.emplace_back(chunk);
    return true;
  });
  EXPECT_EQ(result.output,
            "a\xc3\xa9"
            "b");
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], "a");
  EXPECT_EQ(chunks[1],
            "\xc3\xa9"
            "b");
  for (const auto& chunk : chunks) EXPECT_TRUE(is_valid_utf8(chunk));
}

TEST(AgentRunCommand, StopAtCapAndStdinAndStartFailures) {
  CommandOptions head;
  head.argv = {"sh", "-c", "yes"};
  head.max_output = 10;
  head.stop_at_cap = true;
  const CommandResult cut = run_command(head);
  EXPECT_EQ(cut.output, "y\ny\ny\ny\ny\n");
  EXPECT_TRUE(cut.truncated);
  EXPECT_FALSE(cut.timed_out);

  CommandOptions echo;
  echo.argv = {"cat"};
  echo.pipe_stdin = true;
  echo.stdin_data = "through stdin";
  EXPECT_EQ(run_command(echo).output, "through stdin");

  CommandOptions missing;
  missing.argv = {"/definitely/not/a/program"};
  EXPECT_THROW(run_command(missing), ToolFailure);
}

// --- runtimes ------------------------------------------------------------------------------

std::string failure_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ToolFailure& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(AgentRuntimeSpec, ParsesAndRefusesWhatCouldBeAnOption) {
  EXPECT_EQ(parse_runtime_spec("").kind, RuntimeSpec::Kind::kHost);
  const RuntimeSpec docker = parse_runtime_spec("docker-container:abc123");
  EXPECT_EQ(docker.kind, RuntimeSpec::Kind::kContainer);
  EXPECT_EQ(docker.engine, "docker");
  EXPECT_EQ(docker.target, "abc123");
  EXPECT_EQ(parse_runtime_spec("podman-container:my_box.1").engine, "podman");
  const RuntimeSpec ssh = parse_runtime_spec("ssh:user@build-host.lan");
  EXPECT_EQ(ssh.kind, RuntimeSpec::Kind::kSsh);
  EXPECT_EQ(ssh.target, "user@build-host.lan");
  const RuntimeSpec image = parse_runtime_spec("podman:docker.io/library/busybox:1.36");
  EXPECT_EQ(image.kind, RuntimeSpec::Kind::kImage);
  EXPECT_EQ(image.target, "docker.io/library/busybox:1.36");

  EXPECT_TRUE(contains(failure_of([] { parse_runtime_spec("fake:does-not-exist"); }),
                       "unknown tool runtime"));
  EXPECT_TRUE(contains(failure_of([] { parse_runtime_spec("ssh:-oProxyCommand=touch /tmp/x"); }),
                       "invalid ssh target"));
  EXPECT_TRUE(contains(failure_of([] { parse_runtime_spec("ssh:"); }), "invalid ssh target"));
  EXPECT_TRUE(contains(failure_of([] { parse_runtime_spec("docker-container:--privileged"); }),
                       "invalid container id"));
  EXPECT_TRUE(contains(failure_of([] { parse_runtime_spec("podman-container:a b"); }),
                       "invalid container id"));
  EXPECT_TRUE(
      contains(failure_of([] { parse_runtime_spec("docker:-v/:/host"); }), "invalid image name"));
}

TEST(AgentRuntimeSpec, ToolCallsFailWithTheServersError) {
  for (const std::string tool : {"exec_shell_command", "read_file", "get_info"}) {
    auto tools = make_builtin_tools(tool);
    ToolCall call;
    call.params = {{"command", "echo hi"}, {"path", "x"}};
    call.runtime = "fake:does-not-exist";
    EXPECT_TRUE(contains(failure_of([&] { tools[0]->invoke(call); }), "unknown tool runtime"));
    call.runtime = "ssh:-oProxyCommand=touch /tmp/pwned";
    EXPECT_TRUE(contains(failure_of([&] { tools[0]->invoke(call); }), "invalid ssh target"));
    call.runtime = "podman-container:--privileged";
    EXPECT_TRUE(contains(failure_of([&] { tools[0]->invoke(call); }), "invalid container id"));
    call.runtime = "docker:busybox";  // --tools-runtime only
    EXPECT_TRUE(contains(failure_of([&] { tools[0]->invoke(call); }), "running container"));
  }
}

TEST(AgentRuntimeSpec, CommandLines) {
  const RuntimeSpec docker = parse_runtime_spec("docker-container:abc");
  EXPECT_EQ(runtime_argv(docker, {"sh", "-c", "ls -l"}, "/work dir"),
            (std::vector<std::string>{"docker", "exec", "-i", "-w", "/work dir", "abc", "sh", "-c",
                                      "ls -l"}));
  EXPECT_EQ(runtime_argv(parse_runtime_spec("podman-container:x1"), {"cat", "/f"}, ""),
            (std::vector<std::string>{"podman", "exec", "-i", "x1", "cat", "/f"}));
  EXPECT_EQ(runtime_argv(parse_runtime_spec("ssh:me@host"), {"sh", "-c", "echo 'hi'"}, "/tmp/a b"),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "me@host",
                                      "cd '/tmp/a b' && 'sh' '-c' 'echo '\\''hi'\\'''"}));

  // What the quoting makes, read back by a real shell.
  const std::string nasty = "it's $HOME `x` \"q\" \\ ;|&";
  CommandOptions options;
  options.argv = {"sh", "-c", "printf %s " + shell_quote(nasty)};
  EXPECT_EQ(run_command(options).output, nasty);
}

// Stand-ins for docker and ssh: `docker exec [-i] [-w DIR] ID CMD...` runs CMD here in DIR,
// `docker run ... --cidfile F IMAGE sh` writes an id to F and waits for its stdin to close, and
// `ssh ... TARGET STRING` runs STRING with sh. Each logs its arguments.
class AgentRemote : public AgentTools {
 protected:
  void SetUp() override {
    AgentTools::SetUp();
    const fs::path bin = dir_ / "bin";
    fs::create_directories(bin);
    log_ = (dir_ / "engine.log").string();
    write_script(bin / "docker",
                 "#!/bin/sh\n"
                 "echo \"$*\" >> \"$FAKE_ENGINE_LOG\"\n"
                 "case \"$1\" in\n"
                 "exec)\n"
                 "  shift\n"
                 "  [ \"$1\" = -i ] && shift\n"
                 "  if [ \"$1\" = -w ]; then cd \"$2\" || exit 126; shift 2; fi\n"
                 "  if [ \"$1\" = gone ]; then echo \"Error: No such container: gone\" >&2; "
                 "exit 1; fi\n"
                 "  shift\n"
                 "  exec \"$@\" ;;\n"
                 "run)\n"
                 "  while [ $# -gt 0 ]; do\n"
                 "    [ \"$1\" = --cidfile ] && echo fakecid42 > \"$2\"\n"
                 "    shift\n"
                 "  done\n"
                 "  cat > /dev/null\n"
                 "  echo stopped >> \"$FAKE_ENGINE_LOG\"\n"
                 "  exit 0 ;;\n"
                 "esac\n"
                 "exit 2\n");
    write_script(bin / "ssh",
                 "#!/bin/sh\n"
                 "echo \"$*\" >> \"$FAKE_ENGINE_LOG\"\n"
                 "for last; do :; done\n"
                 "exec sh -c \"$last\"\n");
    old_path_ = std::getenv("PATH");
    ::setenv("PATH", (bin.string() + ":" + old_path_).c_str(), 1);
    ::setenv("FAKE_ENGINE_LOG", log_.c_str(), 1);
    work_ = (dir_ / "work").string();
    fs::create_directories(work_);
  }
  void TearDown() override {
    ::setenv("PATH", old_path_.c_str(), 1);
    ::unsetenv("FAKE_ENGINE_LOG");
    AgentTools::TearDown();
  }

  static void write_script(const fs::path& path, std::string_view text) {
    write_text(path, text);
    fs::permissions(path, fs::perms::owner_all);
  }

  std::string log_;
  std::string old_path_;
  std::string work_;
};

TEST_F(AgentRemote, FileToolsActInsideTheContainer) {
  const std::string runtime = "docker-container:box1";
  const ojson written = call(
      "write_file", {{"path", "sub/test.log"}, {"content", "hello container\n"}}, work_, runtime);
  EXPECT_EQ(written.value("result", ""), "file written successfully") << written.dump();
  EXPECT_EQ(read_text(fs::path(work_) / "sub/test.log"), "hello container\n");
  // It went through `docker exec`, with the content on stdin, not on the command line.
  const std::string log = read_text(log_);
  EXPECT_TRUE(contains(log, "exec -i box1 sh -c")) << log;
  EXPECT_FALSE(contains(log, "hello container")) << log;

  EXPECT_EQ(text_of(call("read_file", {{"path", "sub/test.log"}}, work_, runtime)),
            "hello container\n");
  EXPECT_TRUE(contains(error_of(call("read_file", {{"path", "nope"}}, work_, runtime)), "nope"));
  call("edit_file",
       {{"path", "sub/test.log"}, {"edits", {{{"old_text", "hello"}, {"new_text", "bye"}}}}}, work_,
       runtime);
  EXPECT_EQ(read_text(fs::path(work_) / "sub/test.log"), "bye container\n");

  write_text(fs::path(work_) / "build/skip.txt", "bye");
  const ojson found = call("file_glob_search", {{"path", "."}, {"type", "all"}}, work_, runtime);
  EXPECT_EQ(entry_paths(found), (std::vector<std::string>{"build", "sub", "sub/test.log"}));
  const ojson deep = call("file_glob_search", {{"path", "."}, {"max_depth", 1}}, work_, runtime);
  EXPECT_EQ(entry_paths(deep), std::vector<std::string>{});
  const std::string grep =
      text_of(call("grep_search", {{"path", "."}, {"pattern", "bye"}}, work_, runtime));
  EXPECT_TRUE(contains(grep, "sub/test.log:bye container")) << grep;
  EXPECT_TRUE(contains(grep, "Total matches: 1")) << grep;
}

TEST_F(AgentRemote, ShellAndInfoRunInsideTheContainerInTheCwd) {
  const std::string runtime = "podman-container:box2";
  write_script(dir_ / "bin/podman", read_text(dir_ / "bin/docker"));
  const std::string text =
      text_of(call("exec_shell_command", {{"command", "pwd; echo 'quoted $x'"}}, work_, runtime));
  EXPECT_EQ(text, work_ + "\nquoted $x\n[exit code: 0]");
  EXPECT_TRUE(contains(read_text(log_), "exec -i -w " + work_ + " box2 sh -c"));

  const ojson info = call("get_info", json::object(), work_, runtime);
  EXPECT_EQ(info.at("cwd"), work_);
  EXPECT_EQ(info.at("runtime"), runtime);

  // A runtime that does not answer is the server's failure, not the model's.
  EXPECT_TRUE(contains(failure_of([&] {
                         call("read_file", {{"path", "x"}}, work_, "docker-container:gone");
                       }),
                       "No such container"));
  ::setenv("PATH", "/nonexistent", 1);
  EXPECT_TRUE(
      contains(failure_of([&] { call("get_info", {}, work_, "docker-container:box"); }), "docker"));
}

TEST_F(AgentRemote, SshQuotesTheCommandForTheRemoteShell) {
  const std::string runtime = "ssh:me@host";
  const std::string text = text_of(call(
      "exec_shell_command", {{"command", "pwd; echo \"it's\" 'a $b'; exit 4"}}, work_, runtime));
  EXPECT_EQ(text, work_ + "\nit's a $b\n[exit code: 4]");
  EXPECT_TRUE(contains(read_text(log_), "-o BatchMode=yes me@host cd '" + work_ + "'"));
  call("write_file", {{"path", "over ssh.txt"}, {"content", "x'y"}}, work_, runtime);
  EXPECT_EQ(read_text(fs::path(work_) / "over ssh.txt"), "x'y");
}

TEST_F(AgentRemote, ToolsRuntimeStartsAndEndsItsContainer) {
  {
    ToolsRuntime runtime("docker:busybox");
    EXPECT_EQ(runtime.spec(), "docker-container:fakecid42");
    EXPECT_EQ(runtime.spec(), "docker-container:fakecid42");  // the same one, not a new one
    const std::string log = read_text(log_);
    EXPECT_TRUE(contains(log, "run --rm -i --cidfile ")) << log;
    EXPECT_TRUE(contains(log, " busybox sh\n")) << log;
    EXPECT_FALSE(contains(log, "stopped")) << log;
  }
  EXPECT_TRUE(contains(read_text(log_), "stopped"));  // its stdin closed: the shell ended

  ToolsRuntime attach("docker-container:abc");
  EXPECT_EQ(attach.spec(), "docker-container:abc");
  ToolsRuntime host("");
  EXPECT_EQ(host.spec(), "");
  EXPECT_TRUE(contains(failure_of([] { ToolsRuntime bad("docker:"); }), "invalid image name"));
  EXPECT_TRUE(contains(failure_of([] { ToolsRuntime bad("vm:x"); }), "unknown tool runtime"));
  ::setenv("PATH", "/nonexistent", 1);
  EXPECT_TRUE(contains(failure_of([] { ToolsRuntime gone("podman:busybox"); }), "podman"));
}

}  // namespace
}  // namespace inferd::agent
