// Golden test: our tokenizer against llama.cpp's ids for the 343 strings of
// tests/golden/tokenizer/strings.json on several vocabularies (SmolLM2, Llama 3, Qwen 2, Phi-3,
// Gemma 3), one <set>.json each, made by tests/golden/tokenizer/make-golden.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/paths.h"

namespace inferd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

// One golden file per vocabulary; see tests/golden/tokenizer/make-golden (GOLDEN_SETS).
struct GoldenSet {
  const char* name;   // tests/golden/tokenizer/<name>.json
  const char* vocab;  // "default", "sdist:<name>" or "cache:<file name>"
};

constexpr GoldenSet kGoldenSets[] = {
    {"smollm2", "default"},   {"llama-bpe", "sdist:llama-bpe"},
    {"phi-3", "sdist:phi-3"}, {"gemma3", "cache:gemma-3-270m-q4_k_m.gguf"},
    {"qwen2", "sdist:qwen2"},     {"gemma-4", "sdist:gemma-4"},
};

// Where the set's vocabulary lives, or "" when it is not on this machine: the default model,
// a vocabulary-only file of the llama.cpp sources ($INFERD_LLAMA_SRC, scripts/fetch-llama-src)
// or a model scripts/fetch-model caches.
std::string vocab_path(std::string_view source) {
  std::string path;
  if (source == "default") {
    path = default_model_path();
  } else if (source.starts_with("sdist:")) {
    const char* src = std::getenv("INFERD_LLAMA_SRC");
    if (src == nullptr) return "";
    path = std::string(src) + "/models/ggml-vocab-" + std::string(source.substr(6)) + ".gguf";
  } else {
    path = cache_dir() + "/models/" + std::string(source.substr(6));
  }
  return std::filesystem::exists(path) ? path : "";
}

std::string golden_path(const char* name) {
  return std::string(INFERD_SOURCE_DIR) + "/tests/golden/tokenizer/" + name + ".json";
}

// Shows a text with its control characters escaped, for failure messages.
std::string shown(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

class TokenizerGolden : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(TokenizerGolden, MatchesLlamaCpp) {
  const GoldenSet& set = GetParam();
  const std::string path = vocab_path(set.vocab);
  if (path.empty()) GTEST_SKIP() << "vocabulary " << set.vocab << " is not on this machine";
  std::ifstream in(golden_path(set.name));
  ASSERT_TRUE(in) << "no golden file " << golden_path(set.name);
  nlohmann::json golden = nlohmann::json::parse(in);
  gguf::GgufFile file = gguf::GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(file);

  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 343u);
  size_t passed = 0, round_trips = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string text = c.at("text").get<std::string>();
    const Ids special = tok->encode(text, true, true);
    const Ids plain = tok->encode(text, true, false);
    bool ok = true;
    if (special != c.at("ids_special").get<Ids>()) {
      ADD_FAILURE() << set.name << " case " << i << " " << shown(text)
                    << ": ids with special parsing differ";
      ok = false;
    }
    if (plain != c.at("ids_plain").get<Ids>()) {
      ADD_FAILURE() << set.name << " case " << i << " " << shown(text)
                    << ": ids without special parsing differ";
      ok = false;
    }
    // Text the vocabulary can spell whole comes back exactly, as with llama.cpp's detokenizer.
    if (tok->round_trips(text)) {
      ++round_trips;
      if (tok->decode(tok->encode(text, false, false), false) != text) {
        ADD_FAILURE() << set.name << " case " << i << " " << shown(text)
                      << ": decode(encode(text)) != text";
        ok = false;
      }
    }
    passed += ok;
  }
  std::printf("[ golden   ] %s: %zu of %zu cases match llama.cpp (%zu round-trip checks)\n",
              set.name, passed, cases.size(), round_trips);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerGolden, ::testing::ValuesIn(kGoldenSets),
                         [](const ::testing::TestParamInfo<GoldenSet>& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace inferd::tokenizer
