#include "server/api/vertex.h"

#include <gtest/gtest.h>

#include <mutex>

#include "server/api/openai_request.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

TEST(VertexPredict, FormatsAreCamelCasePaths) {
  EXPECT_EQ(vertex_format_of("/v1/chat/completions"), "chatCompletions");
  EXPECT_EQ(vertex_format_of("/apply-template"), "applyTemplate");
  EXPECT_EQ(vertex_format_of("/completion"), "completion");
  EXPECT_EQ(vertex_format_of("/v1/messages/count_tokens"), "messagesCountTokens");
}

TEST(VertexPredict, EachInstanceGoesToItsRouteInOrder) {
  const std::vector<std::string> paths = {"/v1/chat/completions", "/v1/completions", "/completions",
                                          "/tokenize"};
  std::mutex mu;
  std::vector<std::string> called;
  const VertexCall call = [&](const std::string& path, json request) {
    std::lock_guard lock(mu);
    called.push_back(path);
    EXPECT_FALSE(request.contains("@requestFormat"));
    return json{{"path", path}, {"stream", request.value("stream", true)}};
  };
  const json body = {
      {"instances",
       json::array({{{"@requestFormat", "chatCompletions"}, {"stream", true}},
                    {{"@requestFormat", "completions"}},  // the /v1 route wins the name
                    {{"@requestFormat", "/tokenize"}},    // a path works too
                    {{"@requestFormat", "nope"}},
                    json(3)})}};
  const json out = vertex_predict(body, paths, call);
  ASSERT_EQ(out["predictions"].size(), 5u);
  EXPECT_EQ(out["predictions"][0]["path"], "/v1/chat/completions");
  EXPECT_EQ(out["predictions"][0]["stream"], false);  // answered whole
  EXPECT_EQ(out["predictions"][1]["path"], "/v1/completions");
  EXPECT_EQ(out["predictions"][2]["path"], "/tokenize");
  EXPECT_TRUE(out["predictions"][3].contains("error"));
  EXPECT_TRUE(out["predictions"][4].contains("error"));
  EXPECT_EQ(called.size(), 3u);
}

TEST(VertexPredict, ABadBodyIsA400) {
  const VertexCall call = [](const std::string&, json) { return json(); };
  for (const json& body : {json::array(), json{{"instances", 1}}, json::object()}) {
    try {
      vertex_predict(body, {}, call);
      FAIL() << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
    }
  }
  json many = {{"instances", json::array()}};
  for (int i = 0; i < 129; ++i) many["instances"].push_back({{"@requestFormat", "x"}});
  EXPECT_THROW(vertex_predict(many, {}, call), ApiError);
}

}  // namespace
}  // namespace inferd::server
