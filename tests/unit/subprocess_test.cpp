// util::Subprocess: pipes, exit codes, deadlines, killing a group, a child that left early.
#include "util/subprocess.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace inferd::util {
namespace {

using namespace std::chrono_literals;

Subprocess::Clock::time_point in(std::chrono::milliseconds ms) {
  return Subprocess::Clock::now() + ms;
}

SpawnOptions command(std::string shell_line) {
  SpawnOptions options;
  options.argv = {"sh", "-c", std::move(shell_line)};
  return options;
}

std::string read_all(Subprocess& child) {
  std::string out;
  while (child.read_stdout(out, in(5000ms)) == Subprocess::Read::kData) {
  }
  return out;
}

TEST(Subprocess, MergesStderrAndReportsTheExitCode) {
  Subprocess child(command("echo out; echo err >&2; exit 3"));
  EXPECT_EQ(read_all(child), "out\nerr\n");
  EXPECT_EQ(child.wait_until(in(5000ms)), 3);
}

TEST(Subprocess, DiscardsStderrWhenAsked) {
  SpawnOptions options = command("echo out; echo err >&2");
  options.stderr_mode = SpawnOptions::Stderr::kDiscard;
  Subprocess child(options);
  EXPECT_EQ(read_all(child), "out\n");
}

TEST(Subprocess, RunsInTheGivenDirectory) {
  SpawnOptions options;
  options.argv = {"pwd"};
  options.cwd = std::string("/");  // (= "/" trips GCC 12's false -Wrestrict)
  Subprocess child(options);
  EXPECT_EQ(read_all(child), "/\n");
}

TEST(Subprocess, SetsVariablesOverTheServersEnvironment) {
  SpawnOptions options = command("echo \"$INFERD_TEST_A|$HOME\"");
  options.env = {{"INFERD_TEST_A", "a=b"}, {"HOME", "/elsewhere"}};
  Subprocess child(options);
  EXPECT_EQ(read_all(child), "a=b|/elsewhere\n");
  // Unset ones are the server's.
  Subprocess plain(command("echo \"$PATH\""));
  EXPECT_EQ(read_all(plain), std::string(std::getenv("PATH")) + "\n");
}

TEST(Subprocess, NamesAProgramThatCannotStart) {
  SpawnOptions options;
  options.argv = {"inferd-no-such-program"};
  try {
    Subprocess child(options);
    FAIL() << "started";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inferd-no-such-program"), std::string::npos) << e.what();
  }
  options.argv = {"pwd"};
  options.cwd = "/inferd-no-such-directory";
  EXPECT_THROW(Subprocess child(options), Error);
}

TEST(Subprocess, EchoesThroughStdinAndSeesEndOfFile) {
  SpawnOptions options;
  options.argv = {"cat"};
  options.pipe_stdin = true;
  Subprocess child(options);
  ASSERT_TRUE(child.write_stdin("line\n", in(1000ms)));
  std::string out;
  while (out.size() < 5 && child.read_stdout(out, in(5000ms)) == Subprocess::Read::kData) {
  }
  EXPECT_EQ(out, "line\n");
  child.close_stdin();
  EXPECT_EQ(child.read_stdout(out, in(5000ms)), Subprocess::Read::kEof);
  EXPECT_EQ(child.wait_until(in(5000ms)), 0);
}

TEST(Subprocess, ReadTimesOutAndKillReachesTheWholeGroup) {
  // The background sleep holds the pipe too: only killing the group ends the read.
  Subprocess child(command("sleep 30 & sleep 30"));
  std::string out;
  const auto started = Subprocess::Clock::now();
  EXPECT_EQ(child.read_stdout(out, in(100ms)), Subprocess::Read::kTimeout);
  child.kill();
  EXPECT_EQ(child.try_wait(), 128 + 9);
  EXPECT_EQ(child.read_stdout(out, in(5000ms)), Subprocess::Read::kEof);
  EXPECT_LT(Subprocess::Clock::now() - started, 4s);
}

TEST(Subprocess, WritingToAChildThatLeftFailsWithoutASignal) {
  SpawnOptions options;
  options.argv = {"true"};
  options.pipe_stdin = true;
  Subprocess child(options);
  ASSERT_EQ(child.wait_until(in(5000ms)), 0);
  // More than a pipe holds, to a reader that is gone: EPIPE, not SIGPIPE (which would end
  // this test binary).
  EXPECT_FALSE(child.write_stdin(std::string(1 << 20, 'x'), in(1000ms)));
}

TEST(Subprocess, WriteTimesOutOnAChildThatDoesNotRead) {
  SpawnOptions options = command("sleep 30");
  options.pipe_stdin = true;
  Subprocess child(options);
  EXPECT_FALSE(child.write_stdin(std::string(1 << 20, 'x'), in(100ms)));
}

}  // namespace
}  // namespace inferd::util
