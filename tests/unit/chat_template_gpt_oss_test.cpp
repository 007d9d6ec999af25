// gpt-oss's chat template (the harmony format) from the llama.cpp sources: every conversation of
// tests/golden/chat_templates/gpt_oss.json (reasoning in `thinking`, tools as a TypeScript
// namespace, a tool call and its result, developer messages, reasoning_effort, builtin tools)
// must render byte for byte as Python's jinja2 renders it with Hugging Face's settings. The
// template is read from the sources, not copied: the test skips where they are not unpacked.
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/chat/reasoning.h"
#include "server/chat/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"
#include "util/paths.h"

namespace inferd::tokenizer {
namespace {

using json = nlohmann::ordered_json;

// The llama-cpp-python release scripts/fetch-llama-src unpacks by default.
constexpr const char* kSdistFolder = "llama_cpp_python-0.3.36/vendor/llama.cpp";

json load_golden() {
  std::ifstream in(std::string(INFERD_SOURCE_DIR) + "/tests/golden/chat_templates/gpt_oss.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

// The template's text from $INFERD_LLAMA_SRC or the cache; "" when neither has it.
std::string read_template(const std::string& relative) {
  std::vector<std::string> roots;
  if (const char* src = std::getenv("INFERD_LLAMA_SRC")) roots.emplace_back(src);
  roots.push_back(cache_dir() + "/llama.cpp/" + kSdistFolder);
  for (const std::string& root : roots) {
    std::ifstream in(root + "/" + relative, std::ios::binary);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  return "";
}

std::tm parse_now(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  return tm;
}

ChatInputs inputs_of(const json& golden, const json& c) {
  ChatInputs inputs;
  inputs.messages = c["messages"];
  if (!c["tools"].is_null()) inputs.tools = c["tools"];
  inputs.extra = c["extra"];
  inputs.add_generation_prompt = c["add_generation_prompt"];
  inputs.bos_token = golden["bos_token"];
  inputs.eos_token = golden["eos_token"];
  inputs.now = parse_now(golden["now"]);
  return inputs;
}

TEST(ChatTemplateGptOss, MatchesJinja2OnEveryGoldenCase) {
  const json golden = load_golden();
  const std::string source = read_template(golden["template"]);
  if (source.empty())
    GTEST_SKIP() << "the llama.cpp sources are not unpacked (scripts/fetch-llama-src)";
  if (source.size() != golden["template_bytes"].get<size_t>())
    GTEST_SKIP() << "the template differs from the one gpt_oss.json was made from";
  const ChatTemplate tmpl(source);
  int rendered = 0, raised = 0;
  for (const json& c : golden["cases"]) {
    const std::string label = c["name"].get<std::string>() +
                              " add_generation_prompt=" + c["add_generation_prompt"].dump();
    const ChatInputs inputs = inputs_of(golden, c);
    if (c.contains("error")) {
      try {
        tmpl.render(inputs);
        ADD_FAILURE() << label << ": expected an error";
      } catch (const Error& e) {  // raise_exception's message reaches the user
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos)
            << label << ": " << e.what();
      }
      ++raised;
      continue;
    }
    try {
      EXPECT_EQ(tmpl.render(inputs), c["expected"].get<std::string>()) << label;
    } catch (const Error& e) {
      ADD_FAILURE() << label << ": " << e.what();
    }
    ++rendered;
  }
  EXPECT_GE(rendered, 18);
  EXPECT_GE(raised, 2);
}

TEST(ChatTemplateGptOss, TheServerReadsTheAnswerItsPromptAsksFor) {
  const json golden = load_golden();
  const std::string source = read_template(golden["template"]);
  if (source.empty())
    GTEST_SKIP() << "the llama.cpp sources are not unpacked (scripts/fetch-llama-src)";
  EXPECT_EQ(server::detect_tool_call_format(source), server::ToolCallFormat::kHarmony);
  // The generation prompt opens the assistant's message and leaves the channel to the model.
  ChatInputs inputs = inputs_of(golden, golden["cases"][0]);
  const std::string prompt = ChatTemplate(source).render(inputs);
  ASSERT_TRUE(prompt.ends_with("<|start|>assistant"));
  server::ReasoningSplitter split = server::ReasoningSplitter::harmony(prompt, false);
  server::ReasoningSplitter::Pieces p = split.push(
      "<|channel|>analysis<|message|>Short answer.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Sunny.");
  EXPECT_EQ(p.reasoning, "Short answer.");
  EXPECT_EQ(p.content, "Sunny.");
}

}  // namespace
}  // namespace inferd::tokenizer
