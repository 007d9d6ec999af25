// Golden test: our tokenizer against llama.cpp's ids for the default model, for every case in
// tests/golden/tokenizer/smollm2.json (made by tests/golden/tokenizer/make-golden).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/paths.h"

namespace inferd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::string model_path() {
  return default_model_path();
}

std::string golden_path() {
  return std::string(INFERD_SOURCE_DIR) + "/tests/golden/tokenizer/smollm2.json";
}

// Shows a text with its control characters escaped, for failure messages.
std::string shown(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

// `text` less the bytes the vocabulary has no token for, which encoding leaves out (as
// llama.cpp does). For almost every text this is the text itself.
std::string spellable_part(const Tokenizer& tok, const std::string& text) {
  std::string out;
  for (char c : text) {
    if (tok.vocab().find(byte_level_char(static_cast<uint8_t>(c))) != kNoToken) out.push_back(c);
  }
  return out;
}

TEST(TokenizerGolden, MatchesLlamaCpp) {
  if (!std::filesystem::exists(golden_path())) GTEST_SKIP() << "no golden file " << golden_path();
  if (!std::filesystem::exists(model_path())) GTEST_SKIP() << "model not found: " << model_path();
  std::ifstream in(golden_path());
  nlohmann::json golden = nlohmann::json::parse(in);
  gguf::GgufFile file = gguf::GgufFile::open(model_path());
  auto tok = Tokenizer::from_gguf(file);

  const auto& cases = golden.at("cases");
  ASSERT_FALSE(cases.empty());
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string text = c.at("text").get<std::string>();
    const Ids special = tok->encode(text, true, true);
    const Ids plain = tok->encode(text, true, false);
    bool ok = true;
    if (special != c.at("ids_special").get<Ids>()) {
      ADD_FAILURE() << "case " << i << " " << shown(text) << ": ids with special parsing differ";
      ok = false;
    }
    if (plain != c.at("ids_plain").get<Ids>()) {
      ADD_FAILURE() << "case " << i << " " << shown(text) << ": ids without special parsing differ";
      ok = false;
    }
    if (tok->decode(tok->encode(text, false, false), false) != spellable_part(*tok, text)) {
      ADD_FAILURE() << "case " << i << " " << shown(text) << ": decode(encode(text)) != text";
      ok = false;
    }
    passed += ok;
  }
  std::printf("[ golden   ] %zu of %zu cases match llama.cpp\n", passed, cases.size());
}

}  // namespace
}  // namespace inferd::tokenizer
