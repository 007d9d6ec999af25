// Built-in chat templates (--chat-template NAME) against llama.cpp's own C++ rendering of the
// same names: tests/golden/chat_templates/builtin.json, made by make-builtin-golden there.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/builtin_templates.h"
#include "tokenizer/chat_template.h"

namespace inferd::tokenizer {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(INFERD_SOURCE_DIR) + "/tests/golden/chat_templates/builtin.json");
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& m : list) messages.push_back({m.at("role"), m.at("content")});
  return messages;
}

TEST(BuiltinChatTemplates, RenderAsLlamaCppDoes) {
  const nlohmann::json data = golden();
  ASSERT_GE(data.at("templates").size(), 40u);
  size_t cases = 0;
  for (const auto& [name, list] : data.at("templates").items()) {
    std::optional<std::string> source = builtin_template_source(name);
    ASSERT_TRUE(source.has_value()) << name << " is not built in";
    ChatTemplate tmpl(*source);
    for (const auto& c : list) {
      const std::string rendered =
          tmpl.render(messages_of(c.at("messages")), c.at("add_generation_prompt"), "<s>", "</s>");
      EXPECT_EQ(rendered, c.at("prompt").get<std::string>())
          << name << " on " << c.at("messages").dump()
          << " add_generation_prompt=" << c.at("add_generation_prompt");
      ++cases;
    }
  }
  std::printf("[ builtin  ] %zu cases of %zu templates compared\n", cases,
              data.at("templates").size());
}

TEST(BuiltinChatTemplates, AliasesAndNames) {
  EXPECT_EQ(builtin_template_source("qwen2"), builtin_template_source("chatml"));
  EXPECT_EQ(builtin_template_source("gemma3"), builtin_template_source("gemma"));
  EXPECT_EQ(builtin_template_source("mistral"), builtin_template_source("mistral-v7-tekken"));
  EXPECT_FALSE(builtin_template_source("no-such-format").has_value());
  const std::vector<std::string> names = builtin_template_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& name : names) {
    EXPECT_TRUE(builtin_template_source(name).has_value()) << name;
    EXPECT_NO_THROW(ChatTemplate(*builtin_template_source(name))) << name;
  }
}

}  // namespace
}  // namespace inferd::tokenizer
