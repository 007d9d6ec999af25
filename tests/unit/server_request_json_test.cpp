#include "server/json/request_json.h"

#include <gtest/gtest.h>

#include <string>

#include "server/api/openai_request.h"

namespace inferd::server {
namespace {

// The ApiError a body gets (status 400 expected), or nullopt when it parses.
std::optional<ApiError> rejection(const std::string& text) {
  try {
    parse_request_json(text);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    return e;
  }
  return std::nullopt;
}

TEST(RequestJson, ANumberBeyondADoubleNamesItsField) {
  EXPECT_EQ(rejection(R"({"prompt":"x","max_tokens":1e400})")->param, "max_tokens");
  EXPECT_EQ(rejection(R"({"temperature":-1e999,"prompt":"x"})")->param, "temperature");
  EXPECT_EQ(rejection(R"({"a":{"b":[1,2,{"c":1e400}]}})")->param, "a.b[2].c");
  EXPECT_EQ(rejection(R"({"stop":[1, 2, 3e999]})")->param, "stop[2]");
  EXPECT_EQ(rejection(R"({"messages":[{"role":"user"},{"x":[7e500]}]})")->param,
            "messages[1].x[0]");
  EXPECT_EQ(rejection("1e400")->param, "");
  const std::string message = rejection(R"({"n":1e400})")->what();
  EXPECT_NE(message.find("'n'"), std::string::npos) << message;
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
}

TEST(RequestJson, NotJsonAndTooDeepAreClearErrors) {
  EXPECT_NE(std::string(rejection(R"({"prompt": )")->what()).find("not valid JSON"),
            std::string::npos);
  EXPECT_TRUE(rejection("{} trailing"));
  EXPECT_TRUE(rejection("\"\xff\""));  // invalid UTF-8
  EXPECT_TRUE(rejection("NaN"));
  const std::string deep(kMaxJsonDepth + 1, '[');
  const std::string message = rejection(deep + std::string(kMaxJsonDepth + 1, ']'))->what();
  EXPECT_NE(message.find("deeper than"), std::string::npos) << message;
  EXPECT_TRUE(rejection(std::string(100000, '[')));  // never closed: rejected, not a crash
  // Within the limit, nesting is fine, and values come back as they were.
  const std::string ok(kMaxJsonDepth - 1, '[');
  EXPECT_FALSE(rejection(ok + std::string(kMaxJsonDepth - 1, ']')));
  EXPECT_EQ(parse_request_json(R"({"a":[1,{"b":"c"}],"d":1.5})").dump(),
            R"({"a":[1,{"b":"c"}],"d":1.5})");
}

}  // namespace
}  // namespace inferd::server
