// llama.cpp's own tokenizer test pairs: every vocabulary-only GGUF file in the reference source
// ($INFERD_LLAMA_SRC/models/ggml-vocab-*.gguf) that comes with .inp/.out files. The .inp file
// holds the texts, the .out file the ids llama.cpp gives each (no BOS/EOS, special-token texts
// taken as plain text). One test per vocabulary; byte-level BPE ones (tokenizer.ggml.model =
// gpt2) must all match, SentencePiece ones (llama) are skipped while the Tokenizer refuses them,
// other models (bert, ...) are not ours to check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace inferd::tokenizer {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// llama.cpp's tests/test-tokenizer-0 rule: texts are separated by "\n__ggml_vocab_test__\n";
// text after the last separator is one more text only when there is some.
std::vector<std::string> read_texts(const fs::path& path) {
  const std::string raw = read_file(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return texts;
}

// One line of space-separated ids per text.
std::vector<Ids> read_ids(const fs::path& path) {
  std::istringstream in(read_file(path));
  std::vector<Ids> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    Ids ids;
    for (int32_t id = 0; words >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

// The text with control characters and non-ASCII bytes escaped, for failure messages.
std::string shown(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto b = static_cast<unsigned char>(c);
    if (b == '\n') {
      out += "\\n";
    } else if (b < 0x20 || b == 0x7F) {
      out += fmt::format("\\x{:02X}", b);
    } else {
      out += c;  // UTF-8 shows as text in a terminal
    }
  }
  return out;
}

std::string llama_src() {
  const char* src = std::getenv("INFERD_LLAMA_SRC");
  return src == nullptr ? std::string() : std::string(src);
}

// "llama-bpe" for .../models/ggml-vocab-llama-bpe.gguf, for every such file with test pairs.
// Read when the tests are registered; without INFERD_LLAMA_SRC there is one placeholder.
std::vector<std::string> vocab_names() {
  std::vector<std::string> names;
  const std::string src = llama_src();
  std::error_code ec;
  if (!src.empty()) {
    for (const auto& entry : fs::directory_iterator(fs::path(src) / "models", ec)) {
      std::string file = entry.path().filename().string();
      if (!file.starts_with("ggml-vocab-") || !file.ends_with(".gguf")) continue;
      fs::path inp = entry.path(), out = entry.path();
      inp += ".inp";
      out += ".out";
      if (!fs::exists(inp) || !fs::exists(out)) continue;
      names.push_back(file.substr(11, file.size() - 11 - 5));
    }
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) names.push_back("none");
  return names;
}

class TokenizerVocabPairs : public testing::TestWithParam<std::string> {};

TEST_P(TokenizerVocabPairs, MatchLlamaCpp) {
  const std::string src = llama_src();
  if (src.empty()) GTEST_SKIP() << "INFERD_LLAMA_SRC is not set (scripts/fetch-llama-src)";
  if (GetParam() == "none") GTEST_SKIP() << "no ggml-vocab-*.gguf with .inp/.out in " << src;
  const fs::path path = fs::path(src) / "models" / ("ggml-vocab-" + GetParam() + ".gguf");

  gguf::GgufFile file = gguf::GgufFile::open(path.string());
  const std::string model = file.get_string("tokenizer.ggml.model").value_or("");
  const std::string pre = file.get_string("tokenizer.ggml.pre").value_or("(none)");
  if (model != "gpt2" && model != "llama" && model != "gemma4") {
    GTEST_SKIP() << GetParam() << ": tokenizer.ggml.model = " << model << " is not ours to check";
  }
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_gguf(file);
  } catch (const Error& e) {
    // SentencePiece vocabularies pass once that encoder exists; byte-level BPE must load.
    if (model == "llama") GTEST_SKIP() << GetParam() << " (model llama) refused: " << e.what();
    FAIL() << GetParam() << " (model " << model << ", pre " << pre << ") refused: " << e.what();
  }

  const std::vector<std::string> texts = read_texts(fs::path(path.string() + ".inp"));
  const std::vector<Ids> expected = read_ids(fs::path(path.string() + ".out"));
  ASSERT_EQ(texts.size(), expected.size()) << "the .inp and .out files disagree on the count";
  ASSERT_FALSE(texts.empty());

  size_t matched = 0, decoded = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(fmt::format("{} text {}: \"{}\"", GetParam(), i, shown(texts[i])));
    const Ids ids = tok->encode(texts[i], false, false);
    EXPECT_EQ(ids, expected[i]);
    matched += ids == expected[i];
    if (tok->round_trips(texts[i])) {
      EXPECT_EQ(tok->decode(ids, false), texts[i]);
      ++decoded;
    }
  }
  std::printf(
      "[ pairs    ] %s (model %s, pre %s): %zu of %zu texts match llama.cpp, %zu decoded back\n",
      GetParam().c_str(), model.c_str(), pre.c_str(), matched, texts.size(), decoded);
}

// Two byte-level vocabularies of the source come without pairs and without a pre-tokenizer name
// (so the "default" rules apply); their ids here are llama-tokenize's (--no-bos
// --no-parse-special) for the same texts.
TEST(TokenizerVocabPairsSpotChecks, VocabulariesWithoutPairFiles) {
  const std::string src = llama_src();
  if (src.empty()) GTEST_SKIP() << "INFERD_LLAMA_SRC is not set (scripts/fetch-llama-src)";
  struct Case {
    const char* vocab;
    const char* text;
    Ids ids;
  };
  const std::string text1 = "Hello world! 1234567 na\u00EFve caf\u00E9 \u2014 \u65E5\u672C\u8A9E";
  const std::string text2 = "  leading spaces\n\n\ttabs, it's DON'T 3.14159";
  const Case cases[] = {
      {"aquila",
       text1.c_str(),
       {22299, 3117, 1, 221, 11218, 31441, 23, 74502, 80526, 221, 923, 221, 4639, 4700, 253}},
      {"aquila",
       text2.c_str(),
       {221, 8060, 15819, 982, 198, 71494, 12, 503, 7, 83, 67279, 7, 52, 221, 19, 14, 27263, 5547}},
      {"gpt-neox",
       text1.c_str(),
       {12092, 1533, 2, 209, 10683, 25133, 24, 36060, 36241, 209, 1128, 209, 49868, 19119, 241}},
      {"gpt-neox",
       text2.c_str(),
       {50276, 16378, 8470, 535, 186, 33754, 13, 352, 8, 84, 24694, 8, 53, 209, 20, 15, 18962,
        3046}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{}: \"{}\"", c.vocab, shown(c.text)));
    const fs::path path = fs::path(src) / "models" / fmt::format("ggml-vocab-{}.gguf", c.vocab);
    if (!fs::exists(path)) continue;
    gguf::GgufFile file = gguf::GgufFile::open(path.string());
    auto tok = Tokenizer::from_gguf(file);
    EXPECT_EQ(tok->vocab().pre(), "default");
    EXPECT_EQ(tok->encode(c.text, false, false), c.ids);
    EXPECT_EQ(tok->decode(c.ids, false), c.text);
  }
}

// Gemma 4's vocabulary as the reference reads it: BOS always (the file says so too, and the
// reference would add it if it did not), every end-of-generation text it knows ends generation
// (<turn|> ends a chat turn), and its "</s>" is plain text, neither special nor an end.
TEST(TokenizerVocabPairsSpotChecks, Gemma4TurnEndsAndPlainEndOfSentence) {
  const std::string src = llama_src();
  if (src.empty()) GTEST_SKIP() << "INFERD_LLAMA_SRC is not set (scripts/fetch-llama-src)";
  const fs::path path = fs::path(src) / "models" / "ggml-vocab-gemma-4.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent";
  gguf::GgufFile file = gguf::GgufFile::open(path.string());
  auto tok = Tokenizer::from_gguf(file);
  const Vocab& v = tok->vocab();
  EXPECT_TRUE(v.add_bos());
  for (const char* end : {"<eos>", "<turn|>", "<|tool_response>"}) {
    ASSERT_NE(v.find(end), kNoToken) << end;
    EXPECT_TRUE(v.is_eog(v.find(end))) << end;
  }
  const int32_t s = v.find("</s>");
  ASSERT_NE(s, kNoToken);
  EXPECT_FALSE(v.is_eog(s));
  EXPECT_FALSE(tok->is_special(s));
  // Parsed as text even with special-token parsing on, as any other word.
  const Ids ids = tok->encode("a </s> b", false, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), s), 0);
  EXPECT_EQ(tok->decode(ids, false), "a </s> b");
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, TokenizerVocabPairs, testing::ValuesIn(vocab_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name;
                           for (char c : info.param)
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace inferd::tokenizer
