// Chat templates: every golden rendering made by Python's jinja2 with Hugging Face's settings
// (tests/golden/chat_templates) must come out byte for byte; bad templates give errors with a
// line and column; hostile templates stop at the limits.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
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
    const std::string label = name + "/" + c["messages"].get<std::string>();
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.render(messages, c["add_generation_prompt"], "<BOS>", "<EOS>"), Error)
          << label;
    } else {
      EXPECT_EQ(tmpl.render(messages, c["add_generation_prompt"], "<BOS>", "<EOS>"),
                c["expected"].get<std::string>())
          << label << " add_generation_prompt=" << c["add_generation_prompt"];
    }
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

TEST(ChatTemplate, BuiltinChatML) {
  auto chatml = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(chatml.has_value());
  EXPECT_EQ(chatml->render({{"user", "hi"}}, true, "", ""),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(ChatTemplate::builtin("nope").has_value());
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  std::string message;
  try {
    ChatTemplate("line one\n{% for x in %}{% endfor %}");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  try {
    ChatTemplate("{% if x %}never closed");
    message.clear();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("missing {% endif %}"), std::string::npos) << message;
  EXPECT_THROW(ChatTemplate("{{ 'open"), Error);
  EXPECT_THROW(ChatTemplate("{{ x"), Error);
  EXPECT_THROW(ChatTemplate("{% frobnicate %}"), Error);
}

TEST(ChatTemplate, RuntimeErrorsAreClear) {
  EXPECT_NE(error_of("{{ raise_exception('roles must alternate') }}").find("roles must alternate"),
            std::string::npos);
  EXPECT_NE(error_of("{{ messages | nosuchfilter }}").find("unknown filter"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{% set x.y = 1 %}").find("not a namespace"), std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesHitLimits) {
  // Output doubling past the limit, and unbounded macro recursion.
  EXPECT_NE(error_of("{% set s = 'xxxxxxxxxxxxxxxx' %}{{ s * 100000000 }}").find("size limit"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").find("nested too deeply"),
      std::string::npos);
  std::string deep(200, '(');
  EXPECT_THROW(ChatTemplate("{{ " + deep + "1" + std::string(200, ')') + " }}"), Error);
}

TEST(Jinja, ExpressionsAndWhitespaceControl) {
  auto render = [](const std::string& source) {
    jinja::Dict globals;
    globals.set("xs", jinja::Value(jinja::List{jinja::Value(3), jinja::Value(1), jinja::Value(2)}));
    return jinja::render(jinja::parse_template(source), globals);
  };
  EXPECT_EQ(render("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 0 if false else 'y' }}"), "7|9|y");
  EXPECT_EQ(render("{{ xs | length }} {{ xs[1:] | join('-') }} {{ xs[-1] }}"), "3 1-2 2");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("  {% if true %}\nyes\n  {% endif %}\nend"), "yes\nend");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(render("{{ undefined_thing }}|{{ undefined_thing is defined }}"), "|False");
}

}  // namespace
}  // namespace inferd::tokenizer
