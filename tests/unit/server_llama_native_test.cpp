// llama-server's prompt forms on /completion: one text, token ids, ids mixed with texts, the
// prompt_string object, and lists of those for several prompts.
#include <gtest/gtest.h>

#include "server/api/llama_native.h"
#include "toy_server_context.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

class NativePrompts : public ::testing::Test {
 protected:
  // Ids: <s> 0, </s> 1, then byte b is 2 + b.
  ToyServerContext toy_;
  ParseContext ctx() const { return toy_.context(64); }
  std::vector<json> prompts(const json& p) const { return native_prompts(p, ctx()); }
  std::string rejected(const json& p) const {
    try {
      native_prompts(p, ctx());
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return "accepted";
  }
};

TEST_F(NativePrompts, OnePromptInEachForm) {
  EXPECT_EQ(prompts("hi"), std::vector<json>{"hi"});
  EXPECT_EQ(prompts(json::array({5, 6})), std::vector<json>{json::array({5, 6})});
  EXPECT_EQ(prompts({{"prompt_string", "hi"}}), std::vector<json>{"hi"});
  // Ids and texts in one sequence: the texts' tokens, without BOS, in place.
  EXPECT_EQ(prompts(json::array({5, "ab", 6})),
            std::vector<json>{json::array({5, 2 + 'a', 2 + 'b', 6})});
}

TEST_F(NativePrompts, AListOfPromptsInAnyForms) {
  EXPECT_EQ(prompts(json::array({"a", "b"})), (std::vector<json>{"a", "b"}));
  EXPECT_EQ(prompts(json::array({json::array({5}), "b", {{"prompt_string", "c"}}})),
            (std::vector<json>{json::array({5}), "b", "c"}));
  EXPECT_EQ(prompts(json::array({json::array({5, "a"})})),
            std::vector<json>{json::array({5, 2 + 'a'})});
}

TEST_F(NativePrompts, BadFormsName400s) {
  EXPECT_EQ(rejected(3), "prompt");
  EXPECT_EQ(rejected(json::array()), "prompt");
  EXPECT_EQ(rejected({{"prompt_string", 3}}), "prompt");
  EXPECT_EQ(rejected({{"prompt_string", "x"}, {"multimodal_data", "AAAA"}}), "prompt");
  EXPECT_EQ(rejected(json::array({json::array({json::array({5})})})), "prompt");
}

}  // namespace
}  // namespace inferd::server
