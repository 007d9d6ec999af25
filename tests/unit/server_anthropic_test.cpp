// Anthropic's Messages API over the chat path: requests translated into OpenAI chat bodies (and
// parsed by parse_completion), answers written as messages and as stream events, without a
// model or a socket.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/api/anthropic.h"
#include "toy_server_context.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

class ServerAnthropic : public ::testing::Test {
 protected:
  ToyServerContext toy_;
  ParseContext ctx() const { return toy_.context_showing_messages(4096); }
  static json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
  // The ApiError a body's translation (and parsing) fails with.
  ApiError rejection(const json& body) const {
    try {
      parse_completion(anthropic_to_openai(body), true, ctx());
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << body.dump();
    return ApiError(0, "");
  }
  // Each event as "type@index:kind" (the delta's or the new block's kind).
  static std::vector<std::string> types(const std::vector<json>& events) {
    std::vector<std::string> out;
    for (const json& e : events) {
      const std::string type = e["type"].get<std::string>();
      std::string kind;
      if (type == "content_block_delta") kind = e["delta"]["type"].get<std::string>();
      if (type == "content_block_start") kind = e["content_block"]["type"].get<std::string>();
      if (!e.contains("index")) {
        out.push_back(type);
      } else if (kind.empty()) {
        out.push_back(fmt::format("{}@{}", type, e["index"].get<int>()));
      } else {
        out.push_back(fmt::format("{}@{}:{}", type, e["index"].get<int>(), kind));
      }
    }
    return out;
  }
};

TEST_F(ServerAnthropic, SystemAndBlocksBecomeOpenAiMessages) {
  const json body = {
      {"model", "claude-x"},
      {"max_tokens", 50},
      {"system", json::array({{{"type", "text"}, {"text", "Be brief. "}},
                              {{"type", "text"}, {"text", "Be kind."}}})},
      {"messages",
       json::array({{{"role", "user"},
                     {"content", json::array({{{"type", "text"}, {"text", "What is"}},
                                              {{"type", "text"}, {"text", " the weather?"}}})}},
                    {{"role", "assistant"},
                     {"content", json::array({{{"type", "thinking"}, {"thinking", "Ask the tool."}},
                                              {{"type", "text"}, {"text", "Checking."}},
                                              {{"type", "tool_use"},
                                               {"id", "t1"},
                                               {"name", "weather"},
                                               {"input", {{"city", "Paris"}}}}})}},
                    {{"role", "user"},
                     {"content",
                      json::array({{{"type", "text"}, {"text", "Here:"}},
                                   {{"type", "tool_result"},
                                    {"tool_use_id", "t1"},
                                    {"content", json::array({{{"type", "text"}, {"text", "Sun"}},
                                                             {{"type", "text"}, {"text", "ny"}}})}},
                                   {{"type", "tool_result"},
                                    {"tool_use_id", "t2"},
                                    {"is_error", true},
                                    {"content", "no such city"}}})}}})}};
  const json expected = {
      {"model", "claude-x"},
      {"messages",
       json::array(
           {{{"role", "system"}, {"content", "Be brief. Be kind."}},
            {{"role", "user"}, {"content", "What is the weather?"}},
            {{"role", "assistant"},
             {"content", "Checking."},
             {"tool_calls",
              json::array(
                  {{{"id", "t1"},
                    {"type", "function"},
                    {"function", {{"name", "weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})},
             {"reasoning_content", "Ask the tool."}},
            // Tool results first: they answer the assistant turn just before.
            {{"role", "tool"}, {"tool_call_id", "t1"}, {"content", "Sunny"}},
            {{"role", "tool"}, {"tool_call_id", "t2"}, {"content", "Error: no such city"}},
            {{"role", "user"}, {"content", "Here:"}}})},
      {"max_tokens", 50}};
  EXPECT_EQ(anthropic_to_openai(body), expected);
}

TEST_F(ServerAnthropic, ToolsChoiceStopsAndSamplingKeepTheirMeaning) {
  const json tools = json::array(
      {{{"name", "calc"}, {"description", "Calculate"}, {"input_schema", {{"type", "object"}}}}});
  const json body = {{"messages", json::array({user("2+2")})},
                     {"tools", tools},
                     {"tool_choice", {{"type", "tool"}, {"name", "calc"}}},
                     {"stop_sequences", json::array({"\n", "END"})},
                     {"temperature", 0.5},
                     {"top_p", 0.9},
                     {"top_k", 40},
                     {"stream", true},
                     {"metadata", {{"user_id", "u1"}}},
                     {"thinking", {{"type", "enabled"}, {"budget_tokens", 50}}}};
  const json oai = anthropic_to_openai(body);
  EXPECT_EQ(oai["tools"], json::array({{{"type", "function"},
                                        {"function",
                                         {{"name", "calc"},
                                          {"description", "Calculate"},
                                          {"parameters", {{"type", "object"}}}}}}}));
  EXPECT_EQ(oai["tool_choice"], json({{"type", "function"}, {"function", {{"name", "calc"}}}}));
  EXPECT_EQ(oai["stop"], json::array({"\n", "END"}));
  EXPECT_FALSE(oai.contains("metadata") || oai.contains("thinking"));

  // A named tool is forced by a grammar, as the chat path forces a named function.
  const structured::GrammarCompiler grammars(toy_.tokenizer(), toy_.tokenizer().vocab().size(), 1);
  ParseContext c = ctx();
  c.grammars = &grammars;
  const CompletionRequest r = parse_completion(oai, true, c);
  EXPECT_NE(r.request.grammar, nullptr);
  EXPECT_EQ(r.tools.name, "calc");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.request.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_FLOAT_EQ(r.request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.request.sampling.top_p, 0.9f);
  EXPECT_EQ(r.request.sampling.top_k, 40);
  EXPECT_TRUE(r.tools.active());
  EXPECT_NE(r.prompt_text.find("tools: [{\"type\":\"function\""), std::string::npos);

  json any = body;
  any["tool_choice"] = {{"type", "any"}, {"disable_parallel_tool_use", true}};
  const json oai_any = anthropic_to_openai(any);
  EXPECT_EQ(oai_any["tool_choice"], "required");
  EXPECT_EQ(oai_any["parallel_tool_calls"], false);
  // Without max_tokens (optional here) the chat default applies: the rest of the context.
  EXPECT_EQ(
      parse_completion(anthropic_to_openai({{"messages", json::array({user("hi")})}}), true, ctx())
          .request.max_tokens,
      4096 - static_cast<int64_t>(
                 parse_completion(anthropic_to_openai({{"messages", json::array({user("hi")})}}),
                                  true, ctx())
                     .request.prompt.size()));
}

TEST_F(ServerAnthropic, ConversationsRenderThroughTheChatTemplate) {
  const json body = {{"system", "You help."},
                     {"max_tokens", 10},
                     {"messages", json::array({user("Hello"),
                                               {{"role", "assistant"}, {"content", "Hi!"}},
                                               user("How are you?")})}};
  EXPECT_EQ(parse_completion(anthropic_to_openai(body), true, ctx()).prompt_text,
            "system: You help.\nuser: Hello\nassistant: Hi!\nuser: How are you?\nassistant:");
  // An empty conversation is answered, as llama-server answers it: one empty user turn.
  EXPECT_EQ(
      parse_completion(anthropic_to_openai({{"messages", json::array()}}), true, ctx()).prompt_text,
      "user: \nassistant:");
  // Claude Code's per-request stamp is made steady, so the prefix cache can reuse the prompt.
  const json stamped = {
      {"system", "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are Claude Code."},
      {"messages", json::array({user("hi")})}};
  EXPECT_EQ(anthropic_to_openai(stamped)["messages"][0]["content"],
            "x-anthropic-billing-header: cc_version=2.1; cch=00000;You are Claude Code.");
}

TEST_F(ServerAnthropic, WhatCannotBeTranslatedIsA400NamingWhere) {
  EXPECT_EQ(rejection({{"max_tokens", 5}}).param, "messages");
  EXPECT_EQ(rejection({{"messages", "hi"}}).param, "messages");
  EXPECT_EQ(rejection({{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}}).param,
            "messages.0.role");
  EXPECT_EQ(rejection({{"messages", json::array({{{"role", "user"}}})}}).param,
            "messages.0.content");
  const json tool_use = {{"type", "tool_use"}, {"id", "a"}, {"name", "f"}};
  EXPECT_EQ(rejection({{"messages",
                        json::array({{{"role", "user"}, {"content", json::array({tool_use})}}})}})
                .param,
            "messages.0.content.0.type");
  EXPECT_EQ(
      rejection({{"messages", json::array({{{"role", "user"},
                                            {"content", json::array({{{"type", "document"}}})}}})}})
          .param,
      "messages.0.content.0.type");
  EXPECT_EQ(rejection({{"messages", json::array({user("x")})},
                       {"tools", json::array({{{"type", "web_search_20250305"}, {"name", "w"}}})}})
                .param,
            "tools.0.type");
  EXPECT_EQ(rejection({{"messages", json::array({user("x")})}, {"tool_choice", "auto"}}).param,
            "tool_choice");
  EXPECT_EQ(
      rejection({{"messages", json::array({user("x")})}, {"thinking", {{"type", "on"}}}}).param,
      "thinking.type");
  // Values are parse_completion's to check, under the names both APIs share.
  EXPECT_EQ(rejection({{"messages", json::array({user("x")})}, {"max_tokens", 0}}).param,
            "max_tokens");

  const ApiError e = rejection({{"max_tokens", 5}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(anthropic_error_body(e),
            json({{"type", "error"},
                  {"error", {{"type", "invalid_request_error"}, {"message", e.what()}}}}));
  EXPECT_EQ(anthropic_error_type(401), "authentication_error");
  EXPECT_EQ(anthropic_error_type(429), "rate_limit_error");
  EXPECT_EQ(anthropic_error_type(500), "api_error");
}

// Images (in a message or a tool result) arrive as OpenAI image_url parts and get the chat
// path's answer for a text-only model.
TEST_F(ServerAnthropic, ImagesAreAnsweredAsTheChatPathAnswersThem) {
  const json image = {
      {"type", "image"},
      {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}}}};
  const json in_message = {
      {"messages",
       json::array({{{"role", "user"},
                     {"content", json::array({image, {{"type", "text"}, {"text", "What?"}}})}}})}};
  EXPECT_EQ(anthropic_to_openai(in_message)["messages"][0]["content"][0],
            json({{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}));
  const json in_result = {
      {"messages",
       json::array(
           {user("Look"),
            {{"role", "assistant"},
             {"content", json::array({{{"type", "tool_use"}, {"id", "t"}, {"name", "read"}}})}},
            {{"role", "user"},
             {"content", json::array({{{"type", "tool_result"},
                                       {"tool_use_id", "t"},
                                       {"content", json::array({image})}}})}}})}};
  for (const json& body : {in_message, in_result}) {
    const ApiError e = rejection(body);
    EXPECT_EQ(e.status, 400);  // the client's error (llama-server answers 500)
    EXPECT_NE(std::string(e.what()).find("image input is not supported"), std::string::npos);
  }
}

TEST_F(ServerAnthropic, CountTokensIsThePromptATurnWouldCompute) {
  const json body = {{"system", "You help."}, {"messages", json::array({user("Hello world")})}};
  json with_max = body;
  with_max["max_tokens"] = 5;
  const size_t prompt =
      parse_completion(anthropic_to_openai(with_max), true, ctx()).request.prompt.size();
  EXPECT_EQ(anthropic_count_tokens(body, ctx()), json({{"input_tokens", prompt}}));
  // Thoughts of earlier turns are kept, so they count.
  const json tool_use = {
      {"type", "tool_use"}, {"id", "c1"}, {"name", "ls"}, {"input", json::object()}};
  json plain = {
      {"messages", json::array({user("Fix it"),
                                {{"role", "assistant"}, {"content", json::array({tool_use})}}})}};
  json thinking = plain;
  thinking["messages"][1]["content"].insert(
      thinking["messages"][1]["content"].begin(),
      json{{"type", "thinking"}, {"thinking", "Look around first."}});
  EXPECT_GT(anthropic_count_tokens(thinking, ctx())["input_tokens"].get<int>(),
            anthropic_count_tokens(plain, ctx())["input_tokens"].get<int>());
}

TEST_F(ServerAnthropic, MessagesCarryBlocksStopReasonsAndUsage) {
  const CompletionRequest r = parse_completion(
      anthropic_to_openai({{"max_tokens", 5}, {"messages", json::array({user("hi")})}}), true,
      ctx());
  ChoiceOutput c;
  c.text = "Hello!";
  c.finish_reason = "stop";
  c.prompt_tokens = 12;
  c.cached_tokens = 4;
  c.completion_tokens = 3;
  EXPECT_EQ(anthropic_message(r, c, "msg_7"),
            json({{"id", "msg_7"},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", "toy"},
                  {"content", json::array({{{"type", "text"}, {"text", "Hello!"}}})},
                  {"stop_reason", "end_turn"},
                  {"stop_sequence", nullptr},
                  {"usage",
                   {{"input_tokens", 8},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", 4},
                    {"output_tokens", 3}}}}));
  c.stop_word = "END";
  EXPECT_EQ(anthropic_message(r, c, "msg_7")["stop_reason"], "stop_sequence");
  EXPECT_EQ(anthropic_message(r, c, "msg_7")["stop_sequence"], "END");
  c.stop_word.clear();
  c.finish_reason = "length";
  EXPECT_EQ(anthropic_message(r, c, "msg_7")["stop_reason"], "max_tokens");
  // Thoughts come first, signed with nothing; an answer of nothing is one empty text block.
  c.reasoning = "Greet back.";
  c.text.clear();
  EXPECT_EQ(anthropic_message(r, c, "msg_7")["content"],
            json::array({{{"type", "thinking"}, {"thinking", "Greet back."}, {"signature", ""}}}));
  c.reasoning.clear();
  EXPECT_EQ(anthropic_message(r, c, "msg_7")["content"],
            json::array({{{"type", "text"}, {"text", ""}}}));
}

TEST_F(ServerAnthropic, ToolCallsBecomeToolUseBlocksWithParsedInput) {
  const json body = {
      {"max_tokens", 50},
      {"tools", json::array({{{"name", "weather"}, {"input_schema", {{"type", "object"}}}}})},
      {"messages", json::array({user("Weather in Paris?")})}};
  const CompletionRequest r = parse_completion(anthropic_to_openai(body), true, ctx());
  ASSERT_EQ(r.tool_format, ToolCallFormat::kGeneric);
  ChoiceOutput c;
  c.text = R"({"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]})";
  c.finish_reason = "stop";
  const json m = anthropic_message(r, c, "msg_3");
  EXPECT_EQ(m["content"], json::array({{{"type", "tool_use"},
                                        {"id", "toolu_3_0"},
                                        {"name", "weather"},
                                        {"input", {{"city", "Paris"}}}}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");

  // Streamed: nothing of the answer's text until it is known to be a call.
  AnthropicStreamWriter w(r, "msg_3");
  EXPECT_TRUE(w.delta({}, c.text).empty());
  const std::vector<json> end = w.finish(c);
  EXPECT_EQ(types(end),
            (std::vector<std::string>{"content_block_start@0:tool_use",
                                      "content_block_delta@0:input_json_delta",
                                      "content_block_stop@0", "message_delta", "message_stop"}));
  EXPECT_EQ(end[0]["content_block"]["id"], "toolu_3_0");
  EXPECT_EQ(end[0]["content_block"]["name"], "weather");
  EXPECT_EQ(json::parse(end[1]["delta"]["partial_json"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(end[3]["delta"]["stop_reason"], "tool_use");

  // Text beside a call: its own block before the call's.
  AnthropicStreamWriter w2(r, "msg_4");
  c.text = R"({"tool_calls": [{"name": "weather", "arguments": {}}], "response": "Let me check."})";
  EXPECT_EQ(
      types(w2.finish(c)),
      (std::vector<std::string>{"content_block_start@0:text", "content_block_delta@0:text_delta",
                                "content_block_stop@0", "content_block_start@1:tool_use",
                                "content_block_delta@1:input_json_delta", "content_block_stop@1",
                                "message_delta", "message_stop"}));
}

TEST_F(ServerAnthropic, StreamNumbersBlocksInOrderAndClosesEachBeforeTheNext) {
  const CompletionRequest r = parse_completion(
      anthropic_to_openai({{"max_tokens", 30}, {"messages", json::array({user("2+2?")})}}), true,
      ctx());
  AnthropicStreamWriter w(r, "msg_1");
  const json start = w.start();
  EXPECT_EQ(start["type"], "message_start");
  EXPECT_EQ(start["message"]["content"], json::array());
  EXPECT_EQ(start["message"]["usage"]["input_tokens"], r.request.prompt.size());
  EXPECT_GT(start["message"]["usage"]["input_tokens"].get<int>(), 0);

  std::vector<json> events;
  for (auto [reasoning, content] : std::vector<std::pair<std::string, std::string>>{
           {"Add", ""}, {" them.", ""}, {"", "4"}, {"", "."}, {"", ""}}) {
    for (json& e : w.delta(reasoning, content)) events.push_back(std::move(e));
  }
  ChoiceOutput c;
  c.reasoning = "Add them.";
  c.text = "4.";
  c.finish_reason = "stop";
  c.prompt_tokens = 9;
  c.completion_tokens = 6;
  for (json& e : w.finish(c)) events.push_back(std::move(e));
  EXPECT_EQ(types(events),
            (std::vector<std::string>{
                "content_block_start@0:thinking", "content_block_delta@0:thinking_delta",
                "content_block_delta@0:thinking_delta", "content_block_delta@0:signature_delta",
                "content_block_stop@0", "content_block_start@1:text",
                "content_block_delta@1:text_delta", "content_block_delta@1:text_delta",
                "content_block_stop@1", "message_delta", "message_stop"}));
  EXPECT_EQ(events[1]["delta"]["thinking"], "Add");
  EXPECT_EQ(events[6]["delta"]["text"], "4");
  EXPECT_EQ(events[9]["delta"], json({{"stop_reason", "end_turn"}, {"stop_sequence", nullptr}}));
  EXPECT_EQ(events[9]["usage"]["output_tokens"], 6);

  // An answer of nothing still has its one (empty) text block.
  AnthropicStreamWriter empty(r, "msg_2");
  c.reasoning.clear();
  c.text.clear();
  EXPECT_EQ(types(empty.finish(c)),
            (std::vector<std::string>{"content_block_start@0:text", "content_block_stop@0",
                                      "message_delta", "message_stop"}));
}

TEST_F(ServerAnthropic, EventsAreWrittenWithTheirTypeAsTheEventName) {
  EXPECT_EQ(anthropic_sse({{"type", "message_stop"}}),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  EXPECT_EQ(anthropic_sse(AnthropicStreamWriter::ping()),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n");
  EXPECT_EQ(anthropic_sse(anthropic_error_body(ApiError(500, "boom"))),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
            "\"message\":\"boom\"}}\n\n");
}

}  // namespace
}  // namespace inferd::server
