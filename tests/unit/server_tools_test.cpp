// Function calling: tools and tool_choice parsed and checked; the grammar of a forced call, in
// every family's syntax, only ever writes calls that the same family's parser reads back with
// a declared name and arguments of the declared shape; the history's arguments made objects;
// the response's tool_calls, whole and as stream chunks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar_walk.h"
#include "server/api/openai_request.h"
#include "server/api/openai_response.h"
#include "server/chat/reasoning.h"
#include "server/chat/tools.h"
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

// Gemma 4's forced calls: whatever the grammar lets a model write, with or without thoughts
// first, reads back as calls of the declared tools; its own writing walks the grammar.
TEST_F(ForcedCalls, Gemma4GrammarWritesCallsTheParserReadsBack) {
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    const ToolRequest tools = parse_tools({{"tools", kTools}, {"tool_choice", choice}});
    const structured::GrammarSpec spec = tool_call_grammar(tools, ToolCallFormat::kGemma4);
    // Free text (thoughts, strings) makes many random walks run past their length.
    int walks = 0;
    for (uint32_t seed = 0; seed < 48; ++seed) {
      const auto text = structured::random_walk(compiler_, *tok_, spec, seed, 800);
      if (!text) continue;
      ++walks;
      ReasoningSplitter split = ReasoningSplitter::gemma4();
      ReasoningSplitter::Pieces p = split.push(*text);
      const ReasoningSplitter::Pieces tail = split.flush();
      const ParsedAnswer parsed =
          parse_tool_calls(p.content + tail.content, ToolCallFormat::kGemma4);
      ASSERT_FALSE(parsed.calls.empty()) << *text;
      EXPECT_EQ(parsed.content, "") << *text;
      for (const ToolCall& call : parsed.calls) {
        EXPECT_TRUE(json::parse(call.arguments).is_object()) << *text;
        if (tools.choice == ToolChoice::kNamed) {
          EXPECT_EQ(call.name, "get_weather");
        } else {
          EXPECT_TRUE(call.name == "get_weather" || call.name == "now") << *text;
        }
      }
    }
    EXPECT_GE(walks, 4);
  }
  const ToolRequest tools = parse_tools({{"tools", kTools}, {"tool_choice", "required"}});
  const std::string q = "<|\"|>";
  for (const std::string& text : std::vector<std::string>{
           "<|tool_call>call:get_weather{city:" + q + "Oslo" + q + ",days:2}<tool_call|>",
           "<|channel>thought\nThe user asks about "
           "Oslo.<channel|><|tool_call>call:now{}<tool_call|>"}) {
    structured::GrammarMatcher m(
        compiler_.compile(tool_call_grammar(tools, ToolCallFormat::kGemma4)));
    for (const int32_t id : tok_->encode(text, false, true)) ASSERT_TRUE(m.accept(id)) << text;
    ASSERT_TRUE(m.accept(tok_->vocab().find("</s>"))) << text;  // the end of the answer
    EXPECT_TRUE(m.terminated()) << text;
  }
}

// gpt-oss's vocabulary: the harmony frame as tokens, <|return|> and <|call|> ending the turn.
std::unique_ptr<tokenizer::Tokenizer> harmony_tokenizer() {
  return tokenizer::Tokenizer::from_vocab(tokenizer::Vocab(tokenizer::make_toy_vocab(
      {.pre = "gpt-4o",
       .control = {"<s>", "</s>", "<|return|>", "<|call|>", "<|start|>", "<|channel|>",
                   "<|message|>", "<|constrain|>", "<|end|>"}})));
}

// What the server makes of a harmony answer: the channels split as it streams, the calls parsed
// from the content at the end.
ParsedAnswer harmony_answer(const std::string& text, std::string* reasoning = nullptr) {
  ReasoningSplitter split = ReasoningSplitter::harmony("<|start|>assistant", true);
  ReasoningSplitter::Pieces p = split.push(text);
  const ReasoningSplitter::Pieces tail = split.flush();
  if (reasoning != nullptr) *reasoning = p.reasoning + tail.reasoning;
  return parse_tool_calls(p.content + tail.content, ToolCallFormat::kHarmony);
}

TEST(ForcedCallsHarmony, TheGrammarWritesCallsTheParserReadsBack) {
  const auto tok = harmony_tokenizer();
  const structured::GrammarCompiler compiler(*tok, tok->vocab().size(), 1);
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    const ToolRequest tools = parse_tools({{"tools", kTools}, {"tool_choice", choice}});
    const structured::GrammarSpec spec = tool_call_grammar(tools, ToolCallFormat::kHarmony);
    int walks = 0, reasoned = 0;
    for (uint32_t seed = 0; seed < 24; ++seed) {
      const auto text = structured::random_walk(compiler, *tok, spec, seed, 800);
      if (!text) continue;  // a walk lost in its reasoning
      ++walks;
      std::string reasoning;
      const ParsedAnswer parsed = harmony_answer(*text, &reasoning);
      reasoned += text->starts_with("<|channel|>analysis");
      ASSERT_EQ(parsed.calls.size(), 1u) << *text;
      EXPECT_EQ(parsed.content, "") << *text;
      const ToolCall& call = parsed.calls[0];
      const json args = json::parse(call.arguments);
      if (call.name == "get_weather") {
        EXPECT_TRUE(args.at("city").is_string()) << *text;
        EXPECT_TRUE(args.at("days").get<int>() >= 1 && args["days"].get<int>() <= 7) << *text;
      } else {
        EXPECT_EQ(tools.choice, ToolChoice::kRequired);
        EXPECT_EQ(call.name, "now") << *text;
        EXPECT_EQ(args, json::object());
      }
    }
    EXPECT_GE(walks, 8);
    EXPECT_GE(reasoned, 1);  // reasoning first is allowed, and split out
  }
}

TEST(ForcedCallsHarmony, TheModelsOwnWritingIsAccepted) {
  // What gpt-oss writes, token by token as its tokenizer splits it, walks the grammar to its end.
  const auto tok = harmony_tokenizer();
  const structured::GrammarCompiler compiler(*tok, tok->vocab().size(), 1);
  const ToolRequest tools = parse_tools({{"tools", kTools}, {"tool_choice", "required"}});
  const std::string call =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"city\": \"Oslo\", \"days\": 2}";
  for (const std::string& text :
       {call,
        "<|channel|>analysis<|message|>User asks about a < b.<|end|><|start|>assistant" + call}) {
    structured::GrammarMatcher m(
        compiler.compile(tool_call_grammar(tools, ToolCallFormat::kHarmony)));
    for (const int32_t id : tok->encode(text, false, true)) ASSERT_TRUE(m.accept(id)) << text;
    ASSERT_TRUE(m.accept(tok->vocab().find("<|call|>"))) << text;  // the end of the turn
    EXPECT_TRUE(m.terminated());
    std::string reasoning;
    const ParsedAnswer parsed = harmony_answer(text, &reasoning);
    ASSERT_EQ(parsed.calls.size(), 1u);
    EXPECT_EQ(json::parse(parsed.calls[0].arguments), json({{"city", "Oslo"}, {"days", 2}}));
  }
  // A plain answer is not a call.
  structured::GrammarMatcher m(
      compiler.compile(tool_call_grammar(tools, ToolCallFormat::kHarmony)));
  bool refused = false;
  for (const int32_t id : tok->encode("<|channel|>final<|message|>Hi", false, true))
    refused = refused || !m.accept(id);
  EXPECT_TRUE(refused);
}

TEST(Tools, HarmonyResponsesCarryReasoningAndToolCalls) {
  const auto tok = harmony_tokenizer();
  CompletionRequest request;
  request.chat = true;
  request.model = "gpt-oss";
  request.tools = parse_tools({{"tools", kTools}});
  request.tool_format = ToolCallFormat::kHarmony;
  request.prompt_text = "<|start|>user<|message|>Weather?<|end|><|start|>assistant";
  const ResponseWriter writer(request, *tok, "chatcmpl-9", 0);
  // The answer as the server collects it: split as it streams, in pieces.
  const std::string output =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\",\"days\":2}";
  ReasoningSplitter split = reasoning_splitter(request);
  ChoiceOutput c;
  for (size_t at = 0; at < output.size(); at += 7) {
    const ReasoningSplitter::Pieces p = split.push(std::string_view(output).substr(at, 7));
    c.reasoning += p.reasoning;
    c.text += p.content;
  }
  const ReasoningSplitter::Pieces tail = split.flush();
  c.reasoning += tail.reasoning;
  c.text += tail.content;
  c.finish_reason = "stop";
  const json full = writer.full({c});
  const json& message = full["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Need weather.");
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Rome"}, {"days", 2}}));
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  const std::vector<json> chunks = writer.final_tool_chunks(0, c);
  ASSERT_EQ(chunks.size(), 2u);  // the call, then the finish
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
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
