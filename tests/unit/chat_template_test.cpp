// Chat templates: every golden rendering made by Python's jinja2 with Hugging Face's settings
// (tests/golden/chat_templates) must come out byte for byte; bad templates give errors with a
// line and column; hostile templates stop at the limits.
#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

nlohmann::json load_golden() {
  std::ifstream in(std::string(INFERD_SOURCE_DIR) + "/tests/golden/chat_templates/golden.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

std::string error_of(const std::string& source,
                     const std::vector<ChatMessage>& messages = {{"user", "x"}}) {
  try {
    ChatTemplate(source).render(messages, true, "<s>", "</s>");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, MatchesJinja2OnEveryGoldenCase) {
  const nlohmann::json golden = load_golden();
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["template"];
    ChatTemplate tmpl(golden["templates"][name].get<std::string>());
    std::vector<ChatMessage> messages;
    for (const auto& m : golden["message_sets"][c["messages"].get<std::string>()]) {
      messages.push_back({m["role"], m["content"]});
    }
    const std::string label = name + "/" + c["messages"].get<std::string>() +
                              " add_generation_prompt=" + c["add_generation_prompt"].dump();
    if (c.contains("error")) {
      // raise_exception's message reaches the user.
      try {
        tmpl.render(messages, c["add_generation_prompt"], "<BOS>", "<EOS>");
        ADD_FAILURE() << label << ": expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos)
            << label << ": " << e.what();
      }
    } else {
      EXPECT_EQ(tmpl.render(messages, c["add_generation_prompt"], "<BOS>", "<EOS>"),
                c["expected"].get<std::string>())
          << label;
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
  // The real templates are among them.
  EXPECT_TRUE(golden["templates"].contains("smollm2"));
  EXPECT_TRUE(golden["templates"].contains("gemma3"));
}

TEST(ChatTemplate, BuiltinChatML) {
  auto chatml = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(chatml.has_value());
  EXPECT_EQ(chatml->render({{"user", "hi"}}, true, "", ""),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chatml->render({{"system", "s"}, {"user", "hi"}}, false, "", ""),
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_FALSE(ChatTemplate::builtin("nope").has_value());
}

TEST(ChatTemplate, SmolLM2TemplateIsChatML) {
  // SmolLM2's own template adds a default system message; ChatML is its shape otherwise.
  const nlohmann::json golden = load_golden();
  ChatTemplate smol(golden["templates"]["smollm2"].get<std::string>());
  const std::string prompt = smol.render({{"system", "S"}, {"user", "hi"}}, true, "", "");
  EXPECT_EQ(prompt, ChatTemplate::builtin("chatml")->render({{"system", "S"}, {"user", "hi"}}, true,
                                                            "", ""));
}

TEST(ChatTemplate, SyntaxErrorsNameLineColumnAndWhatWasExpected) {
  auto parse_error = [](const std::string& source) {
    try {
      ChatTemplate t(source);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(parse_error("line one\n{% for x in %}{% endfor %}"),
            "chat template line 2, column 13: expected an expression, found the end of the tag");
  EXPECT_EQ(parse_error("{% if x %}\n  never closed"),
            "chat template line 1, column 1: missing {% endif %} for the block opened here");
  EXPECT_EQ(parse_error("ab\n  {{ 'open"),
            "chat template line 2, column 3: tag is never closed "
            "(expected '}}')");
  EXPECT_EQ(parse_error("{{ x"),
            "chat template line 1, column 1: tag is never closed (expected '}}')");
  EXPECT_EQ(parse_error("{{ f(1 }}"),
            "chat template line 1, column 8: expected ',', found the end of the tag");
  EXPECT_EQ(parse_error("{{ x y }}"),
            "chat template line 1, column 6: expected the end of the tag, found 'y'");
  EXPECT_NE(parse_error("\n\n{% frobnicate %}")
                .find("line 3, column 1: unknown or misplaced "
                      "statement 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(parse_error("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'a' $ 'b' }}").find("column 8: unexpected character '$'"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ 99999999999999999999 }}").find("too large"), std::string::npos);
}

TEST(ChatTemplate, FromGguf) {
  gguf::GgufWriter with;
  with.set_string("general.architecture", "llama");
  with.set_string("tokenizer.chat_template", "{{ messages[0].content | upper }}");
  const std::vector<uint8_t> bytes = with.build();
  const auto file = gguf::GgufFile::parse(bytes, "with.gguf");
  EXPECT_EQ(ChatTemplate::from_gguf(file).render({{"user", "hi"}}, true, "", ""), "HI");

  gguf::GgufWriter without;
  without.set_string("general.architecture", "llama");
  const std::vector<uint8_t> bytes2 = without.build();
  const auto bare = gguf::GgufFile::parse(bytes2, "bare.gguf");
  try {
    ChatTemplate::from_gguf(bare);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("bare.gguf has no chat template"), std::string::npos) << message;
    EXPECT_NE(message.find("--chat-template"), std::string::npos) << message;
  }

  // A Gemma or Qwen file without a template gets its family's built-in one.
  for (const auto& [arch, marker] :
       {std::pair{"gemma3", "<start_of_turn>user"}, std::pair{"qwen2", "<|im_start|>user"}}) {
    gguf::GgufWriter family;
    family.set_string("general.architecture", arch);
    const std::vector<uint8_t> family_bytes = family.build();
    const auto family_file = gguf::GgufFile::parse(family_bytes, "family.gguf");
    const std::string rendered =
        ChatTemplate::from_gguf(family_file).render({{"user", "hi"}}, true, "<bos>", "");
    EXPECT_NE(rendered.find(marker), std::string::npos) << arch << ": " << rendered;
  }

  gguf::GgufWriter broken;
  broken.set_string("tokenizer.chat_template", "{% if %}");
  const std::vector<uint8_t> bytes3 = broken.build();
  const auto bad = gguf::GgufFile::parse(bytes3, "bad.gguf");
  try {
    ChatTemplate::from_gguf(bad);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("line 1, column 7"), std::string::npos) << message;
    EXPECT_NE(message.find("--chat-template"), std::string::npos) << message;
  }
}

TEST(ChatTemplate, RuntimeErrorsAreClear) {
  EXPECT_NE(error_of("{{ raise_exception('roles must alternate') }}").find("roles must alternate"),
            std::string::npos);
  EXPECT_NE(error_of("{{ messages | nosuchfilter }}").find("unknown filter 'nosuchfilter'"),
            std::string::npos);
  EXPECT_NE(error_of("\n{{ 1 / 0 }}").find("line 2, column 6: division by zero"),
            std::string::npos);
  EXPECT_NE(error_of("{% set x.y = 1 %}").find("not a namespace"), std::string::npos);
  EXPECT_NE(error_of("{{ nope.role }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(ChatTemplate, GlobalsMatchApplyChatTemplate) {
  // tools and documents are None (defined), bos/eos are passed, strftime_now exists.
  EXPECT_EQ(
      ChatTemplate("{{ tools is none }}{{ documents is defined }}{{ bos_token }}{{ eos_token }}")
          .render({}, false, "<s>", "</s>"),
      "TrueTrue<s></s>");
  EXPECT_EQ(ChatTemplate("{{ strftime_now('%Y') | length }}").render({}, false, "", ""), "4");
  EXPECT_EQ(ChatTemplate("{{ messages | length }}{{ messages[0].role }}{{ add_generation_prompt }}")
                .render({{"user", "x"}}, true, "", ""),
            "1userTrue");
}

TEST(ChatTemplate, JsonInputsReachTheTemplateAsApplyChatTemplatePassesThem) {
  // Tool calls with object arguments, tools, extra variables, key order as given, and a
  // fixed clock; the expected text is what jinja2 renders.
  ChatInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": {"zone": "Paris", "unit": "c"}}}]},
    {"role": "tool", "tool_call_id": "1", "content": "sunny"}])");
  inputs.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"b": 1, "a": 2}}}])");
  inputs.extra = {{"enable_thinking", false}};
  inputs.add_generation_prompt = false;
  std::tm date{};
  date.tm_year = 125;
  date.tm_mon = 2;
  date.tm_mday = 7;
  inputs.now = date;
  const ChatTemplate t(
      "{{ strftime_now('%d %b %Y') }}|{{ tools[0].function.parameters | tojson }}|"
      "{% for m in messages %}{{ m.role }}:{{ m.content }}"
      "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments | tojson }}"
      "{{ c.function.arguments is mapping }}]{% endfor %};{% endfor %}"
      "{{ enable_thinking }}{{ add_generation_prompt }}{{ documents }}");
  EXPECT_EQ(t.render(inputs),
            "07 Mar 2025|{\"b\": 1, \"a\": 2}|user:weather?;assistant:None"
            "[get_weather {\"zone\": \"Paris\", \"unit\": \"c\"}True];tool:sunny;"
            "FalseFalseNone");
  inputs.tools.reset();
  EXPECT_EQ(ChatTemplate("{{ tools }}").render(inputs), "None");
  // Plain messages convert from JSON too (the server's tests build them so).
  ChatMessage m = nlohmann::json{{"role", "user"}, {"content", nullptr}};
  EXPECT_EQ(m.role, "user");
  EXPECT_EQ(m.content, "");
}

TEST(ChatTemplate, ErrorsNameTheLineOfTheStatement) {
  // Errors raised by values and filters carry the place of the statement that hit them.
  EXPECT_NE(error_of("a\n{{ messages | map('upper') }}").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("{% set x = [1] %}\n{{ x.append(2) }}").find("line 2"), std::string::npos);
  EXPECT_NE(error_of("{{ '{:,}'.format(1) }}").find("not supported"), std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesHitLimits) {
  EXPECT_NE(error_of("{% set s = 'xxxxxxxxxxxxxxxx' %}{{ s * 100000000 }}").find("size limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='xx') %}{% for i in range(40) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("size limit"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").find("nested too deeply"),
      std::string::npos);
  // Exponential recursion within the depth limit, and nested loops with no output: both are
  // stopped by the step budget rather than running for ever.
  EXPECT_NE(error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                     "{% endmacro %}{{ f(60) }}")
                .find("too many steps"),
            std::string::npos);
  EXPECT_NE(error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                     "{% endfor %}")
                .find("too many steps"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000) | length }}").find("too big"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}").find("namespace"),
            std::string::npos);
  // Deep nesting of every kind is refused at parse time, before it can exhaust the stack.
  const std::string deep(5000, '(');
  EXPECT_THROW(ChatTemplate("{{ " + deep + "1" + std::string(5000, ')') + " }}"), Error);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_THROW(ChatTemplate(nots + "x }}"), Error);
  EXPECT_THROW(ChatTemplate("{{ " + std::string(5000, '-') + "1 }}"), Error);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_THROW(ChatTemplate(chain + " }}"), Error);
  std::string attrs = "{{ x";
  for (int i = 0; i < 5000; ++i) attrs += ".a";
  EXPECT_THROW(ChatTemplate(attrs + " }}"), Error);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if x %}";
  EXPECT_THROW(ChatTemplate{ifs}, Error);
}

// A template that writes "{{ bos_token }}" itself and one that does not both give one BOS
// once the prompt is encoded with add_special, when the vocabulary adds BOS; a vocabulary
// that does not add it keeps the template's text.
TEST(ChatTemplate, PromptLeavesTheAddedBosToTheTokenizer) {
  const ChatTemplate writes_bos("{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}");
  const ChatTemplate plain("[{{ messages[0].content }}]");
  ChatInputs inputs;
  inputs.messages = to_json({{"user", "hi"}});

  const auto adds = Tokenizer::from_vocab(
      Vocab(make_toy_vocab({.control = {"<s>", "</s>"}, .add_bos = true, .add_eos = false})));
  EXPECT_EQ(render_chat_prompt(writes_bos, *adds, inputs), "[hi]</s>");
  EXPECT_EQ(render_chat_prompt(plain, *adds, inputs), "[hi]");
  const int32_t bos = adds->vocab().special().bos;
  const std::vector<int32_t> ids =
      adds->encode(render_chat_prompt(writes_bos, *adds, inputs), true, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], bos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), 1);

  const auto keeps = Tokenizer::from_vocab(
      Vocab(make_toy_vocab({.control = {"<s>", "</s>"}, .add_bos = false, .add_eos = true})));
  EXPECT_EQ(render_chat_prompt(writes_bos, *keeps, inputs), "<s>[hi]");
}

}  // namespace
}  // namespace inferd::tokenizer
