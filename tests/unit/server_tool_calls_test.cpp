// Tool calls in model output, per family format: the calls found (name, arguments as JSON),
// the content left, malformed calls kept as text; and the format read from the real chat
// templates of llama.cpp's collection.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/chat/tool_calls.h"
#include "tokenizer/builtin_templates.h"

namespace inferd::server {
namespace {

using json = nlohmann::json;

void expect_calls(const ParsedAnswer& got, const std::vector<std::pair<std::string, json>>& calls,
                  const std::string& content) {
  EXPECT_EQ(got.content, content);
  ASSERT_EQ(got.calls.size(), calls.size()) << got.content;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, calls[i].first);
    EXPECT_EQ(json::parse(got.calls[i].arguments), calls[i].second);
  }
}

TEST(ToolCalls, HermesTags) {
  expect_calls(parse_tool_calls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                "{\"city\": \"Paris\"}}\n</tool_call>",
                                ToolCallFormat::kHermes),
               {{"get_weather", {{"city", "Paris"}}}}, "");
  // Two calls around text; arguments given as a JSON string; an unclosed last tag.
  expect_calls(parse_tool_calls(
                   "Let me check.\n<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}"
                   "</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}",
                   ToolCallFormat::kHermes),
               {{"a", {{"x", 1}}}, {"b", json::object()}}, "Let me check.");
  // A malformed call stays in the content.
  expect_calls(
      parse_tool_calls("<tool_call>{\"name\": \"a\", oops}</tool_call>", ToolCallFormat::kHermes),
      {}, "<tool_call>{\"name\": \"a\", oops}</tool_call>");
  expect_calls(parse_tool_calls("Just text.", ToolCallFormat::kHermes), {}, "Just text.");
  // A close tag inside an argument's string is the argument's text (SmolLM2 wrote these under
  // the forced-call grammar, which allows any string).
  expect_calls(
      parse_tool_calls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris}}</tool_call> \", \"unit\": \"C\"}}\n</tool_call>",
                       ToolCallFormat::kHermes),
      {{"get_weather", {{"city", "Paris}}</tool_call> "}, {"unit", "C"}}}}, "");
  expect_calls(
      parse_tool_calls("<tool_call>{\"name\": \"a\", \"arguments\": {\"s\": \"</tool_call>{\"}}"
                       "</tool_call>text after",
                       ToolCallFormat::kHermes),
      {{"a", {{"s", "</tool_call>{"}}}}, "text after");
}

TEST(ToolCalls, Llama3Json) {
  expect_calls(parse_tool_calls("{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}",
                                ToolCallFormat::kLlama3),
               {{"f", {{"q", "x"}}}}, "");
  expect_calls(parse_tool_calls("<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; "
                                "{\"name\": \"g\", \"parameters\": {\"n\": 2}}",
                                ToolCallFormat::kLlama3),
               {{"f", json::object()}, {"g", {{"n", 2}}}}, "");
  expect_calls(parse_tool_calls("{\"answer\": 42}", ToolCallFormat::kLlama3), {},
               "{\"answer\": 42}");
  expect_calls(parse_tool_calls("The answer is {\"name\": \"f\"}", ToolCallFormat::kLlama3), {},
               "The answer is {\"name\": \"f\"}");
}

TEST(ToolCalls, MistralBothGenerations) {
  expect_calls(
      parse_tool_calls("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]\"]}}, "
                       "{\"name\": \"g\", \"arguments\": {}}]",
                       ToolCallFormat::kMistral),
      {{"f", {{"a", {1, "]"}}}}, {"g", json::object()}}, "");
  expect_calls(parse_tool_calls("Sure.[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}",
                                ToolCallFormat::kMistral),
               {{"f", {{"a", 1}}}, {"g", json::object()}}, "Sure.");
  expect_calls(parse_tool_calls("[TOOL_CALLS]not json", ToolCallFormat::kMistral), {},
               "[TOOL_CALLS]not json");
}

TEST(ToolCalls, GenericJson) {
  expect_calls(parse_tool_calls("```json\n{\"tool_calls\": [{\"name\": \"f\", \"arguments\": "
                                "{\"x\": true}}]}\n```",
                                ToolCallFormat::kGeneric),
               {{"f", {{"x", true}}}}, "");
  expect_calls(parse_tool_calls("{\"tool_call\": {\"name\": \"f\", \"arguments\": {}}}",
                                ToolCallFormat::kGeneric),
               {{"f", json::object()}}, "");
  expect_calls(parse_tool_calls("{\"response\": \"hello\"}", ToolCallFormat::kGeneric), {},
               "{\"response\": \"hello\"}");
}

TEST(ToolCalls, HarmonyCommentaryToFunctions) {
  const std::string call =
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"location\": \"Paris\"}<|call|>";
  // As the reasoning splitter leaves an answer: a preamble, then the call in its frame.
  expect_calls(parse_tool_calls("Let me check." + call, ToolCallFormat::kHarmony),
               {{"get_weather", {{"location", "Paris"}}}}, "Let me check.");
  // The raw output (no reasoning split): the call comes out, the rest stays as written.
  expect_calls(parse_tool_calls("<|channel|>analysis<|message|>Need it.<|end|>" + call,
                                ToolCallFormat::kHarmony),
               {{"get_weather", {{"location", "Paris"}}}},
               "<|channel|>analysis<|message|>Need it.<|end|>");
  expect_calls(
      parse_tool_calls("<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
                       "{\"a\":[1,\"<|call|>\"]",
                       ToolCallFormat::kHarmony),
      {},
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":[1,\"<|call|>\"]");
  // The recipient in the role header, as the template renders past calls; two calls.
  expect_calls(parse_tool_calls("<|start|>assistant to=functions.f<|channel|>commentary json"
                                "<|message|>{}<|call|>" +
                                    call,
                                ToolCallFormat::kHarmony),
               {{"f", json::object()}, {"get_weather", {{"location", "Paris"}}}}, "");
  // Arguments that are not a JSON object, and calls to what is not a function, stay text.
  const std::string broken =
      "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops"
      "<|call|>";
  expect_calls(parse_tool_calls(broken, ToolCallFormat::kHarmony), {}, broken);
  const std::string browser =
      "<|start|>assistant<|channel|>analysis to=browser.search<|message|>{}<|call|>";
  expect_calls(parse_tool_calls(browser, ToolCallFormat::kHarmony), {}, browser);
  expect_calls(parse_tool_calls(" Just text. ", ToolCallFormat::kHarmony), {}, "Just text.");
}

// Gemma 4: call:NAME{...} between its markers, its own argument syntax (bare keys, strings
// between <|"|> marks) read as JSON; text around the calls is content; a call that does not
// read stays as written.
TEST(ToolCalls, Gemma4CallsAndTheirArgumentSyntax) {
  const std::string q = "<|\"|>";
  expect_calls(parse_tool_calls("<|tool_call>call:get_weather{city:" + q + "Paris, France" + q +
                                    ",days:3}<tool_call|>",
                                ToolCallFormat::kGemma4),
               {{"get_weather", {{"city", "Paris, France"}, {"days", 3}}}}, "");
  expect_calls(parse_tool_calls(
                   "Let me look.\n<|tool_call>call:f{a:{b:true,c:null},list:[" + q + "x" + q +
                       ", -1.5e2, []],empty:{}}<tool_call|><|tool_call>call:now{}<tool_call|> ok",
                   ToolCallFormat::kGemma4),
               {{"f",
                 {{"a", {{"b", true}, {"c", nullptr}}},
                  {"list", {"x", -150.0, json::array()}},
                  {"empty", json::object()}}},
                {"now", json::object()}},
               "Let me look.\nok");
  // A string may hold the closing marker (the grammar allows it there).
  expect_calls(
      parse_tool_calls("<|tool_call>call:say{text:" + q + "x}<tool_call|>y" + q + "}<tool_call|>",
                       ToolCallFormat::kGemma4),
      {{"say", {{"text", "x}<tool_call|>y"}}}}, "");
  // A string may hold the syntax's own characters; a key may be quoted.
  expect_calls(parse_tool_calls("<|tool_call>call:say{" + q + "text" + q + ":" + q + "a:b,{c}]" +
                                    q + "}<tool_call|>",
                                ToolCallFormat::kGemma4),
               {{"say", {{"text", "a:b,{c}]"}}}}, "");
  for (const std::string& bad : std::vector<std::string>{
           "<|tool_call>call:f{a:}<tool_call|>", "<|tool_call>call:f{a:" + q + "open}<tool_call|>",
           "<|tool_call>call:{a:1}<tool_call|>", "<|tool_call>call:f{a:1} trailing<tool_call|>",
           "<|tool_call>call:f{a:1,}<tool_call|>"}) {
    const ParsedAnswer got = parse_tool_calls(bad, ToolCallFormat::kGemma4);
    EXPECT_TRUE(got.calls.empty()) << bad;
    EXPECT_EQ(got.content, bad);
  }
  EXPECT_EQ(gemma4_arguments_to_json("{n:007}"), std::nullopt);  // not a JSON number
  EXPECT_EQ(gemma4_arguments_to_json(" { n : 7 } "), std::optional<std::string>("{\"n\":7}"));
}

TEST(ToolCalls, HarmonyTemplatesAreDetected) {
  EXPECT_EQ(detect_tool_call_format("{{ '<|start|>assistant<|channel|>final<|message|>' }}"),
            ToolCallFormat::kHarmony);
  // inferd's `--chat-template gpt-oss`: frames without channels; the model writes those.
  EXPECT_EQ(detect_tool_call_format(*tokenizer::builtin_template_source("gpt-oss")),
            ToolCallFormat::kHarmony);
  EXPECT_EQ(detect_tool_call_format(*tokenizer::builtin_template_source("chatml")),
            ToolCallFormat::kGeneric);
}

TEST(ToolCalls, FormatFromRealTemplates) {
  const char* src = std::getenv("INFERD_LLAMA_SRC");
  if (src == nullptr) GTEST_SKIP() << "INFERD_LLAMA_SRC not set";
  const std::filesystem::path dir = std::filesystem::path(src) / "models" / "templates";
  const std::vector<std::pair<const char*, ToolCallFormat>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kGeneric},
      {"openai-gpt-oss-120b.jinja", ToolCallFormat::kHarmony},
      {"google-gemma-4-31B-it.jinja", ToolCallFormat::kGemma4},
      {"google-gemma-4-31B-it-interleaved.jinja", ToolCallFormat::kGemma4},
      {"muse-glimmer.jinja", ToolCallFormat::kGeneric},  // <|start|> and <|message|>, not harmony
  };
  for (const auto& [file, format] : cases) {
    std::ifstream in(dir / file);
    if (!in) {
      ADD_FAILURE() << "missing template " << file;
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(detect_tool_call_format(text.str()), format) << file;
  }
}

}  // namespace
}  // namespace inferd::server
