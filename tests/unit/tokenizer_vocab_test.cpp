// Vocab: built from plain data or a GGUF file, and the errors that name what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

// Expects `fn` to throw inferd::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << parts.front();
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << e.what() << "' does not mention '" << part << "'";
    }
  }
}

VocabData small() {
  return make_toy_vocab({.control = {"<s>", "</s>"}, .merges = {{"a", "b"}}});
}

TEST(TokenizerVocab, IndexesTokensAndMerges) {
  Vocab v(small());
  EXPECT_EQ(v.size(), 2 + 256 + 1);
  EXPECT_EQ(v.find("<s>"), 0);
  EXPECT_EQ(v.special().bos, 0);
  EXPECT_EQ(v.special().eos, 1);
  EXPECT_EQ(v.find("nope"), kNoToken);
  const Vocab::Merge* m = v.find_merge(v.find("a"), v.find("b"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->rank, 0);
  EXPECT_EQ(m->result, v.find("ab"));
  EXPECT_EQ(v.find_merge(v.find("b"), v.find("a")), nullptr);
  EXPECT_TRUE(v.is_control(0));
  EXPECT_FALSE(v.is_control(v.find("a")));
  EXPECT_TRUE(v.is_eog(1));
}

TEST(TokenizerVocab, HarmonyEndsTurnsAtReturnAndCallAndKeepsTheMessageFrame) {
  // gpt-oss's vocabulary as llama.cpp reads it: <|end|> ends a message within the turn (the
  // reasoning, before the answer), so generation goes on; the frame is text of the output.
  const std::vector<std::string> frame = {"<|start|>", "<|channel|>", "<|message|>",
                                          "<|constrain|>", "<|end|>"};
  std::vector<std::string> control = {"<|endoftext|>", "<|return|>", "<|call|>"};
  control.insert(control.end(), frame.begin(), frame.end());
  const Vocab v(make_toy_vocab({.pre = "gpt-4o", .control = control}));
  EXPECT_TRUE(v.is_eog(v.find("<|return|>")));
  EXPECT_TRUE(v.is_eog(v.find("<|call|>")));
  EXPECT_TRUE(v.is_eog(v.find("<|endoftext|>")));
  for (const std::string& text : frame) {
    EXPECT_FALSE(v.is_eog(v.find(text))) << text;
    EXPECT_EQ(v.type(v.find(text)), TokenType::kUserDefined) << text;
  }
  EXPECT_TRUE(std::is_sorted(v.eog_ids().begin(), v.eog_ids().end()));
  // The detokenizer shows the frame and hides the turn's end.
  const auto tok =
      Tokenizer::from_vocab(Vocab(make_toy_vocab({.pre = "gpt-4o", .control = control})));
  const std::vector<int32_t> ids =
      tok->encode("<|channel|>final<|message|>Hi<|end|><|return|>", false, true);
  EXPECT_EQ(tok->decode(ids, true), "<|channel|>final<|message|>Hi<|end|>");

  // Elsewhere <|end|> still ends the turn (Phi-3).
  const Vocab phi(make_toy_vocab({.control = {"<s>", "</s>", "<|end|>"}}));
  EXPECT_TRUE(phi.is_eog(phi.find("<|end|>")));
  EXPECT_TRUE(phi.is_control(phi.find("<|end|>")));
}

TEST(TokenizerVocab, DefaultBosFollowsModelAndPre) {
  EXPECT_FALSE(default_add_bos("gpt2", "smollm"));
  EXPECT_FALSE(default_add_bos("gpt2", "gpt-2"));
  EXPECT_TRUE(default_add_bos("gpt2", "llama-bpe"));
  EXPECT_TRUE(default_add_bos("llama", "default"));
}

TEST(TokenizerVocab, RejectsInconsistentData) {
  VocabData d = small();
  d.types.pop_back();
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.token_type", "258", "259"});
  d = small();
  d.scores = {1.0f};
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.scores"});
  d = small();
  d.merges.push_back("a zz");
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.merges[1]", "zz"});
  d = small();
  d.merges.push_back("nospace");
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.merges[1]", "nospace"});
  d = small();
  d.special.eos = 5000;
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.eos_token_id", "5000", "259"});
  d = small();
  d.tokens[5] = d.tokens[6];
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.tokens", "5", "6"});
  d = small();
  d.special.bos = kNoToken;
  d.add_bos = true;
  expect_error([&] { Vocab{d}; }, {"add_bos_token", "bos_token_id"});
  d = small();
  d.tokens.clear();
  d.types.clear();
  expect_error([&] { Vocab{d}; }, {"tokenizer.ggml.tokens"});
}

TEST(TokenizerVocab, UnsupportedModelsAndPreTokenizersAreNamed) {
  VocabData d = small();
  d.pre = "klingon";
  expect_error([&] { Tokenizer::from_vocab(Vocab(d)); }, {"tokenizer.ggml.pre", "klingon"});
  d = small();
  d.model = "bert";
  expect_error([&] { Tokenizer::from_vocab(Vocab(d)); }, {"tokenizer.ggml.model", "bert"});
}

// A GGUF file holding `data` as tokenizer.ggml.* metadata.
std::vector<uint8_t> to_gguf(const VocabData& data) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", data.model);
  w.set_string("tokenizer.ggml.pre", data.pre);
  w.set_strings("tokenizer.ggml.tokens", data.tokens);
  std::vector<int32_t> types;
  for (TokenType t : data.types) types.push_back(static_cast<int32_t>(t));
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", data.merges);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(data.special.bos));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(data.special.eos));
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  return w.build();
}

TEST(TokenizerVocab, ReadsGgufMetadata) {
  std::vector<uint8_t> bytes = to_gguf(small());
  gguf::GgufFile file = gguf::GgufFile::parse(bytes);
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->vocab().size(), 259);
  EXPECT_TRUE(tok->vocab().add_bos());
  EXPECT_EQ(tok->vocab().pre(), "gpt-2");
  std::vector<int32_t> ids = tok->encode("ab", true, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, tok->vocab().find("ab")}));
}

TEST(TokenizerVocab, GgufErrorsNameTheKey) {
  VocabData d = small();
  d.types.pop_back();
  std::vector<uint8_t> bytes = to_gguf(d);
  gguf::GgufFile bad_types = gguf::GgufFile::parse(bytes);
  expect_error([&] { Vocab::from_gguf(bad_types); }, {"tokenizer.ggml.token_type"});

  d = small();
  d.special.bos = 999;
  bytes = to_gguf(d);
  gguf::GgufFile bad_bos = gguf::GgufFile::parse(bytes);
  expect_error([&] { Vocab::from_gguf(bad_bos); }, {"tokenizer.ggml.bos_token_id", "999"});

  gguf::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_strings("tokenizer.ggml.tokens", {"a", "b"});
  bytes = w.build();
  gguf::GgufFile no_merges = gguf::GgufFile::parse(bytes);
  expect_error([&] { Vocab::from_gguf(no_merges); }, {"tokenizer.ggml.merges"});
}

}  // namespace
}  // namespace inferd::tokenizer
