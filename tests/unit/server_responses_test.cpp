// OpenAI's Responses API over the chat path: requests translated into OpenAI chat bodies (and
// parsed by parse_completion), answers written as response objects and as stream events,
// without a model or a socket.
#include <gtest/gtest.h>

#include "server/api/responses.h"
#include "toy_server_context.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

class ResponsesApi : public ::testing::Test {
 protected:
  ToyServerContext toy_;
  ParseContext ctx() const { return toy_.context_showing_messages(4096); }
  static json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }
  static json body(const json& input) { return {{"input", input}}; }
  // The ApiError a body's translation and parsing fail with.
  ApiError rejection(const json& request) const {
    try {
      parse_responses(request, ctx());
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "accepted: " << request.dump();
    return ApiError(0, "");
  }
  CompletionRequest parsed(const json& request) const { return parse_responses(request, ctx()); }
  static std::vector<std::string> types(const std::vector<json>& events) {
    std::vector<std::string> out;
    for (const json& e : events) out.push_back(e["type"].get<std::string>());
    return out;
  }
  static void append(std::vector<json>& to, std::vector<json> events) {
    for (json& e : events) to.push_back(std::move(e));
  }
};

TEST_F(ResponsesApi, StringInputAndInstructionsBecomeChatMessages) {
  const json request = {{"model", "gpt-4.1"},
                        {"instructions", "Be brief."},
                        {"input", "What is the best book?"},
                        {"max_output_tokens", 8},
                        {"temperature", 0.5},
                        {"top_p", 0.9},
                        {"stream", true},
                        {"store", false},
                        {"metadata", {{"k", "v"}}}};
  EXPECT_EQ(responses_to_openai(request),
            json({{"model", "gpt-4.1"},
                  {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                            user("What is the best book?")})},
                  {"max_tokens", 8},
                  {"temperature", 0.5},
                  {"top_p", 0.9},
                  {"stream", true}}));
  const CompletionRequest r = parsed(request);
  EXPECT_EQ(r.prompt_text, "system: Be brief.\nuser: What is the best book?\nassistant:");
  EXPECT_EQ(r.request.max_tokens, 8);
  EXPECT_FLOAT_EQ(r.request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.request.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "toy");  // any name means the one model served
}

TEST_F(ResponsesApi, ItemsBecomeMessagesWithATurnsItemsInOneMessage) {
  const json input = json::array(
      {{{"role", "developer"}, {"content", "Use tools."}},
       {{"type", "message"},
        {"role", "user"},
        {"content", json::array({{{"type", "input_text"}, {"text", "Weather"}},
                                 {{"type", "input_text"}, {"text", "in Paris?"}}})}},
       // One assistant turn: thoughts, a word, a call.
       {{"type", "reasoning"},
        {"id", "rs_1"},
        {"summary", json::array({{{"type", "summary_text"}, {"text", "A summary."}}})},
        {"content", json::array({{{"type", "reasoning_text"}, {"text", "Ask the tool."}}})}},
       {{"type", "message"},
        {"role", "assistant"},
        {"status", "completed"},
        {"content",
         json::array({{{"type", "output_text"}, {"text", "Checking."}, {"annotations", {}}}})}},
       {{"type", "function_call"},
        {"call_id", "c1"},
        {"name", "weather"},
        {"arguments", "{\"city\":\"Paris\"}"}},
       {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "Sunny"}},
       {{"type", "function_call_output"},
        {"call_id", "c2"},
        {"output", json::array({{{"type", "input_text"}, {"text", "22C"}}})}},
       // Only a summary: it stands for the thoughts.
       {{"type", "reasoning"},
        {"summary", json::array({{{"type", "summary_text"}, {"text", "Report it."}}})}},
       {{"role", "assistant"}, {"content", "Sunny, 22C."}},
       user("Thanks")});
  const json expected = json::array(
      {{{"role", "system"}, {"content", "Be helpful."}},
       {{"role", "developer"}, {"content", "Use tools."}},
       {{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "Weather"}},
                                 {{"type", "text"}, {"text", "in Paris?"}}})}},
       {{"role", "assistant"},
        {"content", "Checking."},
        {"reasoning_content", "Ask the tool."},
        {"tool_calls",
         json::array(
             {{{"id", "c1"},
               {"type", "function"},
               {"function", {{"name", "weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "Sunny"}},
       {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "22C"}},
       {{"role", "assistant"}, {"content", "Sunny, 22C."}, {"reasoning_content", "Report it."}},
       user("Thanks")});
  json request = body(input);
  request["instructions"] = "Be helpful.";
  EXPECT_EQ(responses_to_openai(request)["messages"], expected);
  // Parts are joined as the chat path joins them; the calls reach the template as objects.
  EXPECT_EQ(parsed(request).prompt_text,
            "system: Be helpful.\ndeveloper: Use tools.\nuser: Weather\n\nin Paris?\n"
            "assistant: <think>Ask the tool.</think> Checking. calls=[{\"id\":\"c1\",\"type\":"
            "\"function\",\"function\":{\"name\":\"weather\",\"arguments\":{\"city\":\"Paris\"}}}]"
            "\ntool: Sunny\ntool: 22C\nassistant: <think>Report it.</think> Sunny, 22C.\n"
            "user: Thanks\nassistant:");
  // Two assistant messages in a row are one turn (the chat path refuses two at the end).
  const json two =
      body(json::array({user("Hi"),
                        {{"role", "assistant"}, {"content", "Hello"}},
                        {{"type", "message"},
                         {"role", "assistant"},
                         {"content", json::array({{{"type", "refusal"}, {"refusal", "No."}}})}}}));
  EXPECT_EQ(responses_to_openai(two)["messages"][1],
            json({{"role", "assistant"},
                  {"content", json::array({{{"type", "text"}, {"text", "Hello"}},
                                           {{"type", "text"}, {"text", "No."}}})}}));
}

TEST_F(ResponsesApi, FunctionToolsAreFlattenedIntoChatsShape) {
  const json request = {
      {"input", "2+2?"},
      {"tools", json::array({{{"type", "function"},
                              {"name", "calc"},
                              {"description", "Calculate"},
                              {"parameters", {{"type", "object"}}},
                              {"strict", true}},
                             {{"type", "function"}, {"name", "now"}, {"parameters", nullptr}}})},
      {"tool_choice", {{"type", "function"}, {"name", "calc"}}},
      {"parallel_tool_calls", false}};
  const json oai = responses_to_openai(request);
  EXPECT_EQ(oai["tools"], json::array({{{"type", "function"},
                                        {"function",
                                         {{"name", "calc"},
                                          {"description", "Calculate"},
                                          {"parameters", {{"type", "object"}}}}}},
                                       {{"type", "function"}, {"function", {{"name", "now"}}}}}));
  EXPECT_EQ(oai["tool_choice"], json({{"type", "function"}, {"function", {{"name", "calc"}}}}));
  EXPECT_EQ(oai["parallel_tool_calls"], false);

  // A named tool is forced by a grammar, as the chat path forces a named function.
  const structured::GrammarCompiler grammars(toy_.tokenizer(), toy_.tokenizer().vocab().size(), 1);
  ParseContext c = ctx();
  c.grammars = &grammars;
  const CompletionRequest r = parse_responses(request, c);
  EXPECT_TRUE(r.tools.active());
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.name, "calc");
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_NE(r.request.grammar, nullptr);
  EXPECT_NE(r.prompt_text.find("tools: [{\"type\":\"function\""), std::string::npos);

  json required = request;
  required["tool_choice"] = "required";
  EXPECT_EQ(responses_to_openai(required)["tool_choice"], "required");
  EXPECT_EQ(parse_responses(required, c).tools.choice, ToolChoice::kRequired);
}

TEST_F(ResponsesApi, TextFormatBecomesResponseFormat) {
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  json request = {
      {"input", "Give a"},
      {"text",
       {{"format", {{"type", "json_schema"}, {"name", "A"}, {"schema", schema}, {"strict", true}}},
        {"verbosity", "low"}}}};
  EXPECT_EQ(responses_to_openai(request)["response_format"],
            json({{"type", "json_schema"},
                  {"json_schema", {{"name", "A"}, {"schema", schema}, {"strict", true}}}}));
  const structured::GrammarCompiler grammars(toy_.tokenizer(), toy_.tokenizer().vocab().size(), 1);
  ParseContext c = ctx();
  c.grammars = &grammars;
  EXPECT_NE(parse_responses(request, c).request.grammar, nullptr);

  request["text"]["format"] = {{"type", "json_object"}};
  EXPECT_EQ(responses_to_openai(request)["response_format"], json({{"type", "json_object"}}));
  request["text"]["format"] = {{"type", "text"}};
  EXPECT_FALSE(responses_to_openai(request).contains("response_format"));
  EXPECT_EQ(parse_responses(request, c).request.grammar, nullptr);
  // Without a grammar compiler the chat path refuses constraints: named as the client sent it.
  request["text"]["format"] = {{"type", "json_object"}};
  EXPECT_EQ(rejection(request).param, "text.format");
}

// llama-server hands the chat path the whole body, so its own fields work here too; chat fields
// a response could not show are not passed on.
TEST_F(ResponsesApi, LlamaServerFieldsPassAndChatOnlyOnesDoNot) {
  const json request = {{"input", "This is a test"},
                        {"return_progress", true},
                        {"timings_per_token", true},
                        {"top_k", 7},
                        {"seed", 42},
                        {"stop", json::array({"END"})},
                        {"n", 3},
                        {"logprobs", true}};
  const json oai = responses_to_openai(request);
  EXPECT_FALSE(oai.contains("n") || oai.contains("logprobs") || oai.contains("input"));
  const CompletionRequest r = parsed(request);
  EXPECT_TRUE(r.request.report_progress);
  EXPECT_TRUE(r.timings_per_token);
  EXPECT_EQ(r.request.sampling.top_k, 7);
  EXPECT_EQ(r.request.sampling.seed, 42u);
  EXPECT_EQ(r.request.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
  // Accepted, without effect: nothing is stored either way, thinking follows the server's flags.
  EXPECT_NO_THROW(parsed({{"input", "x"},
                          {"store", true},
                          {"previous_response_id", ""},
                          {"background", false},
                          {"truncation", "auto"},
                          {"reasoning", {{"effort", "low"}}},
                          {"include", json::array({"reasoning.encrypted_content"})},
                          {"max_tool_calls", 3},
                          {"top_logprobs", 0}}));
}

TEST_F(ResponsesApi, WhatCannotBeTranslatedIsA400NamingTheField) {
  const auto param = [&](const json& request) {
    const ApiError e = rejection(request);
    EXPECT_EQ(e.status, 400) << request.dump();
    EXPECT_TRUE(std::string(e.what()).starts_with(e.param)) << e.what();
    return e.param;
  };
  const auto item = [&](const json& one) { return param(body(json::array({one}))); };
  EXPECT_EQ(param({{"model", "x"}}), "input");
  EXPECT_EQ(param(body(5)), "input");
  EXPECT_EQ(param(body(json::array())), "input");
  EXPECT_EQ(param({{"input", "x"}, {"instructions", json::array()}}), "instructions");
  EXPECT_EQ(item("hi"), "input[0]");
  EXPECT_EQ(item({{"content", "hi"}}), "input[0].role");
  EXPECT_EQ(item({{"role", "tool"}, {"content", "hi"}}), "input[0].role");
  EXPECT_EQ(item({{"role", "user"}}), "input[0].content");
  EXPECT_EQ(item({{"role", "user"}, {"content", 3}}), "input[0].content");
  EXPECT_EQ(item({{"role", "user"}, {"content", json::array({{{"type", "input_file"}}})}}),
            "input[0].content[0].type");
  EXPECT_EQ(item({{"role", "user"},
                  {"content", json::array({{{"type", "input_text"}, {"text", "a"}},
                                           {{"type", "input_text"}}})}}),
            "input[0].content[1].text");
  EXPECT_EQ(item({{"role", "user"},
                  {"content", json::array({{{"type", "input_image"}, {"file_id", "f1"}}})}}),
            "input[0].content[0].file_id");
  EXPECT_EQ(item({{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}),
            "input[0].call_id");
  EXPECT_EQ(item({{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", 1}}),
            "input[0].arguments");
  EXPECT_EQ(item({{"type", "function_call_output"}, {"call_id", "c"}}), "input[0].output");
  EXPECT_EQ(item({{"type", "item_reference"}, {"id", "msg_1"}}), "input[0].type");
  EXPECT_EQ(item({{"type", "web_search_call"}, {"id", "ws_1"}}), "input[0].type");
  EXPECT_EQ(param({{"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}}),
            "tools[0].type");
  EXPECT_EQ(param({{"input", "x"}, {"tools", json::array({{{"type", "function"}}})}}),
            "tools[0].name");
  EXPECT_EQ(param({{"input", "x"},
                   {"tools", json::array({{{"type", "function"}, {"name", "f"}}})},
                   {"tool_choice", {{"type", "allowed_tools"}, {"mode", "auto"}}}}),
            "tool_choice.type");
  EXPECT_EQ(param({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}}),
            "text.format.schema");
  EXPECT_EQ(param({{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}}), "text.format.type");
  // What needs state, or output a response here cannot carry.
  EXPECT_EQ(param({{"input", "x"}, {"previous_response_id", "resp_1"}}), "previous_response_id");
  EXPECT_EQ(param({{"input", "x"}, {"conversation", "conv_1"}}), "conversation");
  EXPECT_EQ(param({{"input", "x"}, {"prompt", {{"id", "pmpt_1"}}}}), "prompt");
  EXPECT_EQ(param({{"input", "x"}, {"background", true}}), "background");
  EXPECT_EQ(param({{"input", "x"}, {"top_logprobs", 3}}), "top_logprobs");
  EXPECT_EQ(param({{"input", "x"}, {"include", json::array({"message.output_text.logprobs"})}}),
            "include");
  EXPECT_EQ(param({{"input", "x"}, {"truncation", "middle"}}), "truncation");
  EXPECT_EQ(param({{"input", "x"}, {"reasoning", "high"}}), "reasoning");

  // Values are parse_completion's to check; its errors name the Responses field.
  const ApiError zero = rejection({{"input", "x"}, {"max_output_tokens", 0}});
  EXPECT_EQ(zero.param, "max_output_tokens");
  EXPECT_NE(std::string(zero.what()).find("'max_output_tokens'"), std::string::npos) << zero.what();
  EXPECT_EQ(std::string(zero.what()).find("'max_tokens'"), std::string::npos) << zero.what();
  const ApiError image = rejection(body(json::array(
      {{{"role", "user"},
        {"content",
         json::array({{{"type", "input_image"}, {"image_url", "data:image/png;base64,AA"}}})}}})));
  EXPECT_EQ(image.param, "input");
  EXPECT_NE(std::string(image.what()).find("image input is not supported"), std::string::npos);
  const ApiError long_prompt = rejection({{"input", std::string(5000, 'a')}});
  EXPECT_EQ(long_prompt.param, "input");
  EXPECT_EQ(long_prompt.code, "context_length_exceeded");
  EXPECT_EQ(long_prompt.details["n_ctx"], 4096);
}

TEST_F(ResponsesApi, InputTokensAreThePromptAResponseWouldCompute) {
  const json request = {{"instructions", "You help."}, {"input", "Hello world"}};
  const size_t prompt = parsed(request).request.prompt.size();
  EXPECT_GT(prompt, 0u);
  EXPECT_EQ(responses_input_tokens(request, ctx()),
            json({{"object", "response.input_tokens"}, {"input_tokens", prompt}}));
  EXPECT_THROW(responses_input_tokens({{"instructions", "x"}}, ctx()), ApiError);
}

TEST_F(ResponsesApi, ResponseCarriesIdsTextAndUsage) {
  const CompletionRequest r = parsed({{"input", "hi"}, {"max_output_tokens", 5}});
  ChoiceOutput c;
  c.text = "Hello!";
  c.finish_reason = "stop";
  c.prompt_tokens = 12;
  c.cached_tokens = 4;
  c.completion_tokens = 3;
  EXPECT_EQ(
      responses_response(r, c, "resp_7", 1700000000),
      json({{"id", "resp_7"},
            {"object", "response"},
            {"created_at", 1700000000},
            {"status", "completed"},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", "toy"},
            {"output", json::array({{{"type", "message"},
                                     {"id", "msg_7_0"},
                                     {"status", "completed"},
                                     {"role", "assistant"},
                                     {"content", json::array({{{"type", "output_text"},
                                                               {"text", "Hello!"},
                                                               {"annotations", json::array()},
                                                               {"logprobs", json::array()}}})}}})},
            {"output_text", "Hello!"},
            {"usage",
             {{"input_tokens", 12},
              {"input_tokens_details", {{"cached_tokens", 4}}},
              {"output_tokens", 3},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", 15}}}}));

  // Cut by max_output_tokens: incomplete, and said why.
  c.finish_reason = "length";
  const json cut = responses_response(r, c, "resp_7", 1700000000);
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");
  EXPECT_EQ(cut["output_text"], "Hello!");

  // Thoughts come first as a reasoning item; the message follows with the next place.
  c.finish_reason = "stop";
  c.reasoning = "Greet back.";
  const json thought = responses_response(r, c, "resp_7", 1700000000);
  ASSERT_EQ(thought["output"].size(), 2u);
  EXPECT_EQ(thought["output"][0],
            json({{"type", "reasoning"},
                  {"id", "rs_7_0"},
                  {"summary", json::array()},
                  {"content", json::array({{{"type", "reasoning_text"}, {"text", "Greet back."}}})},
                  {"status", "completed"}}));
  EXPECT_EQ(thought["output"][1]["id"], "msg_7_1");
  EXPECT_EQ(thought["output_text"], "Hello!");  // the thoughts are not the answer

  // An answer of nothing is still one (empty) message.
  c.reasoning.clear();
  c.text.clear();
  const json empty = responses_response(r, c, "resp_7", 1700000000);
  ASSERT_EQ(empty["output"].size(), 1u);
  EXPECT_EQ(empty["output"][0]["type"], "message");
  EXPECT_EQ(empty["output"][0]["content"][0]["text"], "");
}

TEST_F(ResponsesApi, ToolCallsBecomeFunctionCallItems) {
  const CompletionRequest r = parsed(
      {{"input", "Weather in Paris?"},
       {"tools",
        json::array(
            {{{"type", "function"}, {"name", "weather"}, {"parameters", {{"type", "object"}}}}})}});
  ASSERT_EQ(r.tool_format, ToolCallFormat::kGeneric);
  ChoiceOutput c;
  c.text = R"({"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]})";
  c.finish_reason = "stop";
  const json whole = responses_response(r, c, "resp_3", 1);
  ASSERT_EQ(whole["output"].size(), 1u);  // no message: the answer is all call
  const json& call = whole["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["id"], "fc_3_0");
  EXPECT_EQ(call["call_id"], "call_3_0");
  EXPECT_EQ(call["name"], "weather");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(whole["output_text"], "");

  // Streamed: nothing of the answer's text until it is known to be a call.
  ResponsesStreamWriter w(r, "resp_3", 1);
  w.start();
  EXPECT_TRUE(w.delta({}, c.text).empty());
  const std::vector<json> end = w.finish(c);
  EXPECT_EQ(types(end), (std::vector<std::string>{
                            "response.output_item.added", "response.function_call_arguments.delta",
                            "response.function_call_arguments.done", "response.output_item.done",
                            "response.completed"}));
  EXPECT_EQ(end[0]["item"]["status"], "in_progress");
  EXPECT_EQ(end[0]["item"]["arguments"], "");
  EXPECT_EQ(end[1]["item_id"], "fc_3_0");
  EXPECT_EQ(end[1]["delta"], call["arguments"]);
  EXPECT_EQ(end[2]["arguments"], call["arguments"]);
  EXPECT_EQ(end[3]["item"], call);
  EXPECT_EQ(end[4]["response"]["output"], whole["output"]);

  // Text beside a call: a message item before the call's, its text sent at the end.
  c.text = R"({"tool_calls": [{"name": "weather", "arguments": {}}], "response": "Checking."})";
  const json both = responses_response(r, c, "resp_4", 1);
  ASSERT_EQ(both["output"].size(), 2u);
  EXPECT_EQ(both["output"][0]["content"][0]["text"], "Checking.");
  EXPECT_EQ(both["output"][1]["id"], "fc_4_1");
  ResponsesStreamWriter w2(r, "resp_4", 1);
  w2.start();
  EXPECT_TRUE(w2.delta({}, c.text).empty());
  const std::vector<json> end2 = w2.finish(c);
  EXPECT_EQ(types(end2), (std::vector<std::string>{
                             "response.output_item.added", "response.content_part.added",
                             "response.output_text.delta", "response.output_text.done",
                             "response.content_part.done", "response.output_item.done",
                             "response.output_item.added", "response.function_call_arguments.delta",
                             "response.function_call_arguments.done", "response.output_item.done",
                             "response.completed"}));
  EXPECT_EQ(end2[2]["delta"], "Checking.");
  EXPECT_EQ(end2.back()["response"]["output"], both["output"]);
}

// What llama-server's suite and the openai client check of a stream: ids consistent from event to
// event, the text deltas adding up to the done text and to output_text, usage at the end.
TEST_F(ResponsesApi, StreamEventsComeInOrderWithConsistentIds) {
  const CompletionRequest r = parsed({{"input", "2+2?"}, {"max_output_tokens", 30}});
  ResponsesStreamWriter w(r, "resp_9", 1700000000);
  std::vector<json> events = w.start();
  EXPECT_EQ(events[0]["response"]["id"], "resp_9");
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[0]["response"]["output"], json::array());
  EXPECT_EQ(events[1]["response"]["id"], "resp_9");
  // Prompt progress goes on an in_progress event of its own, which the caller decorates.
  json progress = w.in_progress();
  progress["prompt_progress"] = {{"total", 10}};
  events.push_back(progress);
  for (auto [reasoning, content] : std::vector<std::pair<std::string, std::string>>{
           {"Add", ""}, {" them.", ""}, {"", "4"}, {"", ""}, {"", "."}}) {
    append(events, w.delta(reasoning, content));
  }
  ChoiceOutput c;
  c.reasoning = "Add them.";
  c.text = "4.";
  c.finish_reason = "stop";
  c.prompt_tokens = 9;
  c.completion_tokens = 6;
  append(events, w.finish(c));
  EXPECT_EQ(
      types(events),
      (std::vector<std::string>{
          "response.created", "response.in_progress", "response.in_progress",
          "response.output_item.added", "response.reasoning_text.delta",
          "response.reasoning_text.delta", "response.reasoning_text.done",
          "response.output_item.done", "response.output_item.added", "response.content_part.added",
          "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
          "response.content_part.done", "response.output_item.done", "response.completed"}));
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);

  // Every event of an item names the id its output_item.added gave, and its place.
  std::string item;
  int64_t index = -1;
  std::string gathered, reasoning;
  for (const json& e : events) {
    const std::string type = e["type"].get<std::string>();
    if (type == "response.output_item.added") {
      item = e["item"]["id"].get<std::string>();
      index = e["output_index"].get<int64_t>();
      continue;
    }
    if (!e.contains("output_index")) continue;
    EXPECT_EQ(e["output_index"], index) << e.dump();
    EXPECT_EQ(e.contains("item_id") ? e["item_id"] : e["item"]["id"], item) << e.dump();
    if (type == "response.output_text.delta") gathered += e["delta"].get<std::string>();
    if (type == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
  }
  EXPECT_EQ(events[3]["item"]["id"], "rs_9_0");
  EXPECT_EQ(events[8]["item"]["id"], "msg_9_1");
  EXPECT_EQ(events[8]["output_index"], 1);
  EXPECT_EQ(gathered, "4.");
  EXPECT_EQ(reasoning, "Add them.");
  EXPECT_EQ(events[6]["text"], "Add them.");
  EXPECT_EQ(events[12]["text"], gathered);
  EXPECT_EQ(events[13]["part"]["text"], gathered);
  EXPECT_EQ(events[14]["item"]["content"][0]["text"], gathered);

  // The completed response is the whole answer's, usage and all.
  const json& done = events.back()["response"];
  EXPECT_EQ(done["output_text"], gathered);
  EXPECT_EQ(done, responses_response(r, c, "resp_9", 1700000000));
  EXPECT_EQ(done["usage"]["total_tokens"], 15);
}

TEST_F(ResponsesApi, StreamEndsCompletedEvenWhenCutWithStatusIncomplete) {
  const CompletionRequest r = parsed({{"input", "Tell a story"}, {"max_output_tokens", 2}});
  ResponsesStreamWriter w(r, "resp_5", 1);
  std::vector<json> events = w.start();
  append(events, w.delta({}, "Once"));
  ChoiceOutput c;
  c.text = "Once upon";  // what was not streamed yet goes out before the end
  c.finish_reason = "length";
  append(events, w.finish(c));
  const json& last = events.back();
  EXPECT_EQ(last["type"], "response.completed");
  EXPECT_EQ(last["response"]["status"], "incomplete");
  EXPECT_EQ(last["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(last["response"]["output"][0]["status"], "incomplete");
  std::string gathered;
  for (const json& e : events) {
    if (e["type"] == "response.output_text.delta") gathered += e["delta"].get<std::string>();
  }
  EXPECT_EQ(gathered, "Once upon");
  EXPECT_EQ(last["response"]["output_text"], "Once upon");

  // An answer of nothing still has its one (empty) message, as a whole answer does.
  ResponsesStreamWriter empty(r, "resp_6", 1);
  empty.start();
  c.text.clear();
  c.finish_reason = "stop";
  EXPECT_EQ(types(empty.finish(c)),
            (std::vector<std::string>{"response.output_item.added", "response.content_part.added",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
}

TEST_F(ResponsesApi, AFailedStreamSaysSoAndEndsWithResponseFailed) {
  const CompletionRequest r = parsed({{"input", "hi"}});
  ResponsesStreamWriter w(r, "resp_2", 1);
  const std::vector<json> begun = w.start();
  const std::vector<json> text = w.delta({}, "Hel");
  const std::vector<json> end = w.failed(ApiError(500, "the engine failed"));
  EXPECT_EQ(types(end), (std::vector<std::string>{"error", "response.failed"}));
  EXPECT_EQ(end[0]["message"], "the engine failed");
  EXPECT_EQ(end[0]["sequence_number"], begun.size() + text.size());
  EXPECT_EQ(end[1]["response"]["status"], "failed");
  EXPECT_EQ(end[1]["response"]["error"],
            json({{"code", "server_error"}, {"message", "the engine failed"}}));
}

TEST_F(ResponsesApi, EventsAreWrittenWithTheirTypeAsTheEventName) {
  EXPECT_EQ(responses_sse({{"type", "response.output_text.delta"}, {"delta", "é"}}),
            "event: response.output_text.delta\n"
            "data: {\"type\":\"response.output_text.delta\",\"delta\":\"é\"}\n\n");
  // A piece that is not whole UTF-8 does not break the stream.
  EXPECT_EQ(responses_sse({{"type", "x"}, {"delta", "\xc3"}}),
            "event: x\ndata: {\"type\":\"x\",\"delta\":\"\xef\xbf\xbd\"}\n\n");
}

}  // namespace
}  // namespace inferd::server
