// Function calling: tools and tool_choice parsed and checked; the grammar of a forced call, in
// every family's syntax, only ever writes calls that the same family's parser reads back with
// a declared name and arguments of the declared shape; the history's arguments made objects;
// the response's tool_calls, whole and as stream chunks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar_walk.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/tools.h"
#include "tokenizer/toy_vocab.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

const json kTools =
    json::array({{{"type", "function"},
                  {"function",
                   {{"name", "get_weather"},
                    {"parameters",
                     {{"type", "object"},
                      {"properties",
                       {{"city", {{"type", "string"}, {"maxLength", 8}}},
                        {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}}}},
                      {"required", {"city", "days"}}}}}}},
                 {{"type", "function"}, {"function", {{"name", "now"}}}}});

std::string param_of(const json& body) {
  try {
    parse_tools(body);
  } catch (const ApiError& e) {
    return e.param;
  }
  return "(accepted)";
}

TEST(Tools, ParsedAndChecked) {
  EXPECT_EQ(parse_tools(json::object()).choice, ToolChoice::kNone);
  EXPECT_EQ(parse_tools({{"tools", kTools}}).choice, ToolChoice::kAuto);
  EXPECT_EQ(parse_tools({{"tools", kTools}, {"tool_choice", "required"}}).choice,
            ToolChoice::kRequired);
  const ToolRequest named =
      parse_tools({{"tools", kTools},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}}});
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.name, "now");
  EXPECT_EQ(parse_tools({{"tools", kTools}, {"tool_choice", "none"}}).choice, ToolChoice::kNone);
  EXPECT_EQ(param_of({{"tools", "x"}}), "tools");
  EXPECT_EQ(param_of({{"tools", {{{"type", "function"}, {"function", json::object()}}}}}),
            "tools[0].function.name");
  EXPECT_EQ(param_of({{"tool_choice", "required"}}), "tool_choice");
  EXPECT_EQ(param_of({{"tools", kTools},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
            "tool_choice");
  EXPECT_EQ(param_of({{"tools", kTools}, {"parallel_tool_calls", 1}}), "parallel_tool_calls");
}

class ForcedCalls : public ::testing::Test {
 protected:
  std::unique_ptr<tokenizer::Tokenizer> tok_ = tokenizer::Tokenizer::from_vocab(
      tokenizer::Vocab(tokenizer::make_toy_vocab({.control = {"<s>", "</s>"}})));
  structured::GrammarCompiler compiler_{*tok_, tok_->vocab().size(), 1};
};

TEST_F(ForcedCalls, EveryFormatParsesBackToDeclaredCalls) {
  for (const ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                      ToolCallFormat::kMistral, ToolCallFormat::kGeneric}) {
    for (const json& choice :
         {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
      const ToolRequest tools = parse_tools({{"tools", kTools}, {"tool_choice", choice}});
      int walks = 0;
      for (uint32_t seed = 0; seed < 12; ++seed) {
        const auto text =
            structured::random_walk(compiler_, *tok_, tool_call_grammar(tools, format), seed, 600);
        if (!text) continue;
        ++walks;
        const ParsedAnswer parsed = parse_tool_calls(*text, format);
        ASSERT_FALSE(parsed.calls.empty()) << int(format) << ": " << *text;
        EXPECT_EQ(parsed.content, "") << *text;
        for (const ToolCall& call : parsed.calls) {
          const json args = json::parse(call.arguments);
          if (tools.choice == ToolChoice::kNamed) {
            EXPECT_EQ(call.name, "get_weather");
          }
          if (call.name == "get_weather") {
            EXPECT_TRUE(args.at("city").is_string()) << *text;
            EXPECT_TRUE(args.at("days").get<int>() >= 1 && args["days"].get<int>() <= 7) << *text;
          } else {
            EXPECT_EQ(call.name, "now") << *text;
          }
        }
      }
      EXPECT_GE(walks, 6) << int(format);
    }
  }
}

TEST(Tools, HistoryArgumentsBecomeObjects) {
  json messages = {
      {{"role", "user"}, {"content", "weather?"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "c1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}};
  prepare_tool_history(messages);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"], json({{"city", "Oslo"}}));
  messages[1]["tool_calls"][0]["function"]["arguments"] = "{broken";
  try {
    prepare_tool_history(messages);
    ADD_FAILURE() << "accepted arguments that are not JSON";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.arguments");
  }
}

TEST(Tools, ResponsesCarryToolCalls) {
  auto tok = tokenizer::Tokenizer::from_vocab(
      tokenizer::Vocab(tokenizer::make_toy_vocab({.control = {"<s>", "</s>"}})));
  CompletionRequest request;
  request.chat = true;
  request.model = "toy";
  request.tools = parse_tools({{"tools", kTools}});
  request.tool_format = ToolCallFormat::kHermes;
  const ResponseWriter writer(request, *tok, "chatcmpl-7", 0);
  ChoiceOutput c;
  c.text =
      "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call><tool_call>{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}</tool_call>";
  c.finish_reason = "stop";
  const json full = writer.full({c});
  const json& message = full["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][1]["function"]["arguments"].get<std::string>()),
            json({{"city", "Rome"}, {"days", 2}}));
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  const std::vector<json> chunks = writer.final_tool_chunks(0, c);
  ASSERT_EQ(chunks.size(), 3u);  // one per call, then the finish
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
  // No call in the answer: plain content, the finish reason unchanged.
  c.text = "It is sunny.";
  const json plain = writer.full({c});
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "It is sunny.");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace inferd::server
