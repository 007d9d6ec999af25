// /infill's prompt: the FIM tokens around prefix, typed text and suffix, the project's files in
// front, each part cut when the whole does not fit, and the errors of its fields.
#include <gtest/gtest.h>

#include "server/api/infill.h"
#include "toy_server_context.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// Control tokens first (ids 0..6), then one token per byte: byte b is 7 + b.
constexpr int32_t kBos = 0, kPre = 2, kSuf = 3, kMid = 4, kSep = 5, kRep = 6;
constexpr int32_t byte_id(char c) {
  return 7 + static_cast<unsigned char>(c);
}

class Infill : public ::testing::Test {
 protected:
  ToyServerContext toy_{{.control = {"<s>", "</s>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                                     "<|file_sep|>", "<|fim_repo|>"},
                         .add_bos = false}};
  ParseContext ctx(int64_t context = 256) const { return toy_.context(context); }
  std::vector<int32_t> ids(const std::string& text) const {
    std::vector<int32_t> out;
    for (char c : text) out.push_back(byte_id(c));
    return out;
  }
  std::vector<int32_t> prompt_of(const json& body, int64_t context = 256) const {
    return infill_to_native(body, ctx(context))["prompt"].get<std::vector<int32_t>>();
  }
};

std::vector<int32_t> join(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST_F(Infill, PrefixTypedTextAndSuffixAroundTheFimTokens) {
  const json native = infill_to_native(
      {{"input_prefix", "ab"}, {"prompt", "c"}, {"input_suffix", "d"}, {"n_predict", 5}}, ctx());
  EXPECT_EQ(native["prompt"].get<std::vector<int32_t>>(),
            join({{kPre}, ids("ab"), ids("c"), {kSuf}, ids("d"), {kMid}}));
  EXPECT_EQ(native["n_predict"], 5);  // the other fields go on to /completion
  EXPECT_FALSE(native.contains("input_prefix"));
  EXPECT_FALSE(native.contains("input_suffix"));
}

TEST_F(Infill, ProjectFilesComeFirstInTheRepositoryForm) {
  const std::vector<int32_t> prompt =
      prompt_of({{"input_prefix", "p"},
                 {"input_suffix", "s"},
                 {"input_extra", json::array({{{"filename", "f.h"}, {"text", "x"}}})}});
  EXPECT_EQ(prompt, join({{kRep},
                          ids("myproject\n"),
                          {kSep},
                          ids("f.h\n"),
                          ids("x"),
                          {kSep},
                          ids("filename\n"),
                          {kPre},
                          ids("p"),
                          {kSuf},
                          ids("s"),
                          {kMid}}));
}

TEST_F(Infill, ALongPromptLosesTheFilesThenTheFarEndsOfPrefixAndSuffix) {
  // "z" + 40 a's and 40 b's + "y" (built in place: GCC 12 warns about operator+ here).
  std::string prefix(41, 'a'), suffix(41, 'b');
  prefix.front() = 'z';
  suffix.back() = 'y';
  // 3/4 of 64 = 48 tokens; less the 3 FIM tokens, 45: the file goes, the suffix keeps a
  // quarter (11, from its start) and the prefix the rest (34, from its end).
  const std::vector<int32_t> prompt =
      prompt_of({{"input_prefix", prefix},
                 {"input_suffix", suffix},
                 {"input_extra", json::array({{{"text", std::string(30, 'x')}}})}},
                64);
  EXPECT_EQ(prompt,
            join({{kPre}, ids(std::string(34, 'a')), {kSuf}, ids(std::string(11, 'b')), {kMid}}));
  // A short prefix leaves its room to the suffix.
  EXPECT_EQ(prompt_of({{"input_prefix", "p"}, {"input_suffix", std::string(60, 'b')}}, 64),
            join({{kPre}, ids("p"), {kSuf}, ids(std::string(44, 'b')), {kMid}}));
}

TEST_F(Infill, BadFieldsAre400sNamingThem) {
  const auto param_of = [&](const json& body) -> std::string {
    try {
      infill_to_native(body, ctx());
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return "accepted";
  };
  EXPECT_EQ(param_of({{"input_suffix", "s"}}), "input_prefix");
  EXPECT_EQ(param_of({{"input_prefix", "p"}}), "input_suffix");
  EXPECT_EQ(param_of({{"input_prefix", 1}, {"input_suffix", "s"}}), "input_prefix");
  EXPECT_EQ(param_of({{"input_prefix", "p"}, {"input_suffix", "s"}, {"prompt", 3}}), "prompt");
  for (const json& extra :
       {json::object(), json{{"filename", "ok"}}, json{{"filename", 123}},
        json{{"filename", 123}, {"text", "abc"}}, json{{"filename", 123}, {"text", 456}}}) {
    EXPECT_EQ(
        param_of(
            {{"input_prefix", "p"}, {"input_suffix", "s"}, {"input_extra", json::array({extra})}}),
        "input_extra")
        << extra.dump();
  }
  EXPECT_EQ(param_of({{"input_prefix", "p"}, {"input_suffix", "s"}, {"input_extra", "x"}}),
            "input_extra");
}

TEST_F(Infill, AModelWithoutFimTokensIsNotSupported) {
  const ToyServerContext plain;
  const ParseContext c = plain.context(256);
  try {
    infill_to_native({{"input_prefix", "p"}, {"input_suffix", "s"}}, c);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 501);
    EXPECT_NE(std::string(e.what()).find("prefix"), std::string::npos);
  }
}

}  // namespace
}  // namespace inferd::server
