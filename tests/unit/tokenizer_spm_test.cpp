// SentencePiece BPE (tokenizer.ggml.model = "llama"): merging by score on a hand-made
// vocabulary, then llama.cpp's reference pairs for real vocabularies and Gemma 3 spot checks.
// (tokenizer_vocab_pairs_test runs the same pairs for every vocabulary; these two stay here so
// that the SentencePiece encoder has its reference check next to its rules.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"
#include "util/paths.h"

namespace inferd::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

std::unique_ptr<Tokenizer> make(const ToySpmSpec& spec) {
  return Tokenizer::from_vocab(Vocab(make_toy_spm_vocab(spec)));
}

// Token texts as the vocabulary spells them, for readable expectations.
Pieces texts(const Tokenizer& tok, const Ids& ids) {
  Pieces out;
  for (int32_t id : ids) out.push_back(tok.vocab().text(id));
  return out;
}

Pieces encode_texts(const Tokenizer& tok, std::string_view text, bool parse_special = false) {
  return texts(tok, tok.encode(text, false, parse_special));
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no inferd::Error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    }
  }
}

// Every letter of "abcdefgh" and the space mark, so merges are the only question.
ToySpmSpec letters() {
  ToySpmSpec spec;
  for (std::string c : {"a", "b", "c", "d", "e", "f", "g", "h", "▁"}) {
    spec.pieces.push_back({c, -100.0f});
  }
  spec.add_space_prefix = false;
  return spec;
}

TEST(TokenizerSpm, MergesTheHighestScoringPairFirst) {
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"ab", -5.0f});
  spec.pieces.push_back({"bc", -1.0f});
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "abc"), (Pieces{"a", "bc"}));
  // Once "bc" is taken, "abc" can only come from "a" + "bc".
  spec.pieces.push_back({"abc", -9.0f});
  EXPECT_EQ(encode_texts(*make(spec), "abc"), (Pieces{"abc"}));
}

TEST(TokenizerSpm, EqualScoresMergeLeftmostFirst) {
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"ab", -2.0f});
  spec.pieces.push_back({"bc", -2.0f});
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "abc"), (Pieces{"ab", "c"}));
  EXPECT_EQ(encode_texts(*tok, "cabc"), (Pieces{"c", "ab", "c"}));
  EXPECT_EQ(encode_texts(*tok, "bcabc"), (Pieces{"bc", "ab", "c"}));
}

TEST(TokenizerSpm, MergedTokensKeepMerging) {
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"ab", -1.0f});
  spec.pieces.push_back({"cd", -2.0f});
  spec.pieces.push_back({"abcd", -3.0f});
  spec.pieces.push_back({"bc", -2.5f});  // loses to "ab" and "cd"
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "abcdabc"), (Pieces{"abcd", "ab", "c"}));
  // Merging is over the whole run, across spaces: "▁" is a symbol like any other.
  spec.pieces.push_back({"▁a", -0.6f});
  spec.pieces.push_back({"d▁a", -0.5f});
  EXPECT_EQ(encode_texts(*make(spec), "cd ab"), (Pieces{"c", "d▁a", "b"}));
}

TEST(TokenizerSpm, SpacePrefixStartsEveryRun) {
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"▁a", -1.0f});
  spec.add_space_prefix = true;
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "a a"), (Pieces{"▁a", "▁a"}));
  EXPECT_EQ(encode_texts(*tok, " a"), (Pieces{"▁", "▁a"}));
  EXPECT_EQ(encode_texts(*tok, ""), Pieces{});
  // After a special token the text is a new run and gets its own prefix.
  EXPECT_EQ(encode_texts(*tok, "a</s>a", true), (Pieces{"▁a", "</s>", "▁a"}));
  EXPECT_EQ(encode_texts(*tok, "</s>a", true), (Pieces{"</s>", "▁a"}));
  EXPECT_EQ(texts(*tok, tok->encode("a", true, false)), (Pieces{"<s>", "▁a"}));

  spec.add_space_prefix = false;
  auto bare = make(spec);
  EXPECT_EQ(encode_texts(*bare, "a a"), (Pieces{"a", "▁a"}));
  EXPECT_EQ(encode_texts(*bare, "</s>a", true), (Pieces{"</s>", "a"}));
}

TEST(TokenizerSpm, UnknownCharactersFallBackToBytes) {
  ToySpmSpec spec = letters();
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "aé"), (Pieces{"a", "<0xC3>", "<0xA9>"}));
  // The reference cuts characters by their lead byte alone: 0xE4 takes the next two bytes
  // with it although they are ASCII, so "ab" after it comes out as bytes too.
  EXPECT_EQ(encode_texts(*tok,
                         "\xE4"
                         "abc"),
            (Pieces{"<0xE4>", "<0x61>", "<0x62>", "c"}));
  EXPECT_EQ(encode_texts(*tok, "a\xFF"), (Pieces{"a", "<0xFF>"}));

  spec.byte_tokens = false;
  auto no_bytes = make(spec);
  EXPECT_EQ(encode_texts(*no_bytes, "aé"), (Pieces{"a", "<unk>", "<unk>"}));
  EXPECT_FALSE(no_bytes->round_trips("aé"));
  EXPECT_TRUE(no_bytes->round_trips("ab"));
  spec.unknown_token = false;
  auto nothing = make(spec);
  EXPECT_EQ(encode_texts(*nothing, "aéb"), (Pieces{"a", "b"}));
}

TEST(TokenizerSpm, AnyTokenCanBeMergedInto) {
  // As in the reference, merging looks tokens up by text whatever their type.
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"<", -1.0f});
  spec.pieces.push_back({"s", -1.0f});
  spec.pieces.push_back({"<s", -1.0f});
  spec.pieces.push_back({">", -1.0f});
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "<s>"), (Pieces{"<s>"}));
}

TEST(TokenizerSpm, UserDefinedTokensSplitFirstLongestFirst) {
  ToySpmSpec spec = letters();
  spec.user_defined = {"\n", "\n\n", "  "};
  spec.add_space_prefix = false;
  auto tok = make(spec);
  EXPECT_EQ(encode_texts(*tok, "a\n\n\nb  c"), (Pieces{"a", "\n\n", "\n", "b", "  ", "c"}));
  spec.add_space_prefix = true;
  // Each run after a user-defined token is a new run, so it gets a prefix too.
  EXPECT_EQ(encode_texts(*make(spec), "a\nb"), (Pieces{"▁", "a", "\n", "▁", "b"}));
}

TEST(TokenizerSpm, DecodesSpacesBytesAndTheFirstSpace) {
  ToySpmSpec spec = letters();
  spec.pieces.push_back({"▁a", -1.0f});
  spec.add_space_prefix = true;
  auto tok = make(spec);
  for (std::string text : {"a a", "  a", "ab  ", "aé\xF0\x9F\xA6\x99", "h"}) {
    EXPECT_EQ(tok->decode(tok->encode(text, false, false), false), text) << text;
    EXPECT_TRUE(tok->round_trips(text)) << text;
  }
  const int32_t a = tok->vocab().find("▁a");
  const int32_t bos = tok->vocab().special().bos;
  EXPECT_EQ(tok->token_piece(a), " a");
  EXPECT_EQ(tok->token_piece(tok->vocab().find("<0x41>")), "A");
  EXPECT_EQ(tok->decode(Ids{a, a}, false), "a a");
  // Only the first id's space is the prefix's, even when that id is skipped (as llama.cpp).
  EXPECT_EQ(tok->decode(Ids{bos, a}, true), " a");
  EXPECT_EQ(tok->decode(Ids{bos, a}, false), "<s> a");

  spec.add_space_prefix = false;
  auto bare = make(spec);
  EXPECT_EQ(bare->decode(Ids{a, a}, false), " a a");
  EXPECT_TRUE(bare->round_trips(" a"));
}

TEST(TokenizerSpm, RoundTripsKnowsWhatComesBackChanged) {
  ToySpmSpec spec = letters();
  spec.user_defined = {"<t>"};
  spec.add_space_prefix = true;
  auto tok = make(spec);
  EXPECT_TRUE(tok->round_trips("ab<t>"));
  EXPECT_FALSE(tok->round_trips("<t>ab"));          // the run after "<t>" gets a prefix
  EXPECT_FALSE(tok->round_trips("a\xE2\x96\x81"));  // a written U+2581 decodes as a space
  EXPECT_FALSE(tok->round_trips("a\xC3"));          // cut-off character
  for (std::string text : {"<t>ab", "a\xE2\x96\x81"}) {
    EXPECT_NE(tok->decode(tok->encode(text, false, false), false), text);
  }
}

TEST(TokenizerSpm, UnusedTokensDecodeToNothing) {
  VocabData d = make_toy_spm_vocab(letters());
  d.tokens.push_back("<unused0>");
  d.types.push_back(TokenType::kUnused);
  d.scores.push_back(0.0f);
  auto tok = Tokenizer::from_vocab(Vocab(std::move(d)));
  const int32_t unused = tok->vocab().find("<unused0>");
  EXPECT_EQ(tok->decode(Ids{unused}, false), "");
  EXPECT_TRUE(tok->is_special(unused));
}

TEST(TokenizerSpm, Phi3SpecialTokensSwallowTheWhitespaceAfterThem) {
  ToySpmSpec spec = letters();
  spec.control = {"<|user|>", "<|endoftext|>"};
  spec.add_space_prefix = false;
  VocabData d = make_toy_spm_vocab(spec);
  d.name = "Phi3";
  auto tok = Tokenizer::from_vocab(Vocab(d));
  EXPECT_EQ(encode_texts(*tok, "<|user|>\n a", true), (Pieces{"<|user|>", "a"}));
  EXPECT_EQ(encode_texts(*tok, "<|endoftext|> a", true), (Pieces{"<|endoftext|>", "▁", "a"}));
  d.name = "Other";
  auto other = Tokenizer::from_vocab(Vocab(d));
  EXPECT_EQ(encode_texts(*other, "<|user|> a", true), (Pieces{"<|user|>", "▁", "a"}));
}

TEST(TokenizerSpm, EndMarkersAreControlTokensWhateverTheFileSays) {
  // llama.cpp promotes end-of-generation texts to control tokens, so a user-defined "<|end|>"
  // is plain text unless special tokens are parsed (Phi-3's "</s>" is such a case).
  ToySpmSpec spec = letters();
  spec.user_defined = {"<|end|>", "<x>"};
  auto tok = make(spec);
  const int32_t end = tok->vocab().find("<|end|>");
  EXPECT_EQ(tok->vocab().type(end), TokenType::kControl);
  EXPECT_EQ(tok->vocab().type(tok->vocab().find("<x>")), TokenType::kUserDefined);
  EXPECT_EQ(tok->encode("<|end|>", false, true), (Ids{end}));
  EXPECT_EQ(tok->encode("<|end|>", false, false).size(), 7u);
}

TEST(TokenizerSpm, RejectsNaNScores) {
  VocabData d = make_toy_spm_vocab(letters());
  d.scores.back() = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { Tokenizer::from_vocab(Vocab(d)); }, {"tokenizer.ggml.scores", "NaN"});
}

TEST(TokenizerSpm, UnsupportedModelErrorListsTheSupportedOnes) {
  VocabData d = make_toy_spm_vocab(letters());
  d.model = "t5";
  expect_error([&] { Tokenizer::from_vocab(Vocab(d)); },
               {"tokenizer.ggml.model", "t5", "gpt2", "llama"});
}

// A GGUF file holding a small SentencePiece vocabulary, plus `extra` keys.
std::vector<uint8_t> spm_gguf(const std::function<void(gguf::GgufWriter&)>& extra) {
  VocabData d = make_toy_spm_vocab(letters());
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", d.tokens);
  std::vector<int32_t> types;
  for (TokenType t : d.types) types.push_back(static_cast<int32_t>(t));
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_f32s("tokenizer.ggml.scores", d.scores);
  extra(w);
  return w.build();
}

TEST(TokenizerSpm, ReadsGgufKeysAndRefusesNormalizationItCannotDo) {
  std::vector<uint8_t> bytes = spm_gguf([](gguf::GgufWriter&) {});
  gguf::GgufFile plain = gguf::GgufFile::parse(bytes);
  auto tok = Tokenizer::from_gguf(plain);
  // The reference's defaults for SentencePiece: prefix on, BOS 1, EOS 2, unknown 0.
  EXPECT_TRUE(tok->vocab().add_space_prefix());
  EXPECT_TRUE(tok->vocab().add_bos());
  EXPECT_EQ(tok->vocab().special().bos, 1);
  EXPECT_EQ(tok->vocab().special().eos, 2);
  EXPECT_EQ(tok->vocab().special().unk, 0);
  EXPECT_EQ(encode_texts(*tok, "ab"), (Pieces{"▁", "a", "b"}));

  bytes =
      spm_gguf([](gguf::GgufWriter& w) { w.set_bool("tokenizer.ggml.add_space_prefix", false); });
  gguf::GgufFile no_prefix = gguf::GgufFile::parse(bytes);
  EXPECT_EQ(encode_texts(*Tokenizer::from_gguf(no_prefix), "ab"), (Pieces{"a", "b"}));

  bytes = spm_gguf([](gguf::GgufWriter& w) {
    w.set_bool("tokenizer.ggml.remove_extra_whitespaces", false);
    w.set_i32s("tokenizer.ggml.precompiled_charsmap", {});
  });
  gguf::GgufFile harmless = gguf::GgufFile::parse(bytes);
  EXPECT_NO_THROW(Tokenizer::from_gguf(harmless));

  bytes = spm_gguf(
      [](gguf::GgufWriter& w) { w.set_bool("tokenizer.ggml.remove_extra_whitespaces", true); });
  gguf::GgufFile squeeze = gguf::GgufFile::parse(bytes);
  expect_error([&] { Tokenizer::from_gguf(squeeze); }, {"tokenizer.ggml.remove_extra_whitespaces"});

  bytes = spm_gguf([](gguf::GgufWriter& w) {
    w.set_i32s("tokenizer.ggml.precompiled_charsmap", {1, 2, 3});
  });
  gguf::GgufFile charsmap = gguf::GgufFile::parse(bytes);
  expect_error([&] { Tokenizer::from_gguf(charsmap); }, {"tokenizer.ggml.precompiled_charsmap"});
}

// ---- llama.cpp's reference pairs ($INFERD_LLAMA_SRC/models/ggml-vocab-*.gguf.inp/.out) ----

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The .inp file holds the texts separated by "\n__ggml_vocab_test__\n" (llama.cpp's
// tests/test-tokenizer-0 rule); a separator at the very end closes the last text.
std::vector<std::string> read_inputs(const std::filesystem::path& path) {
  const std::string raw = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = std::min(raw.find(sep, pos), raw.size());
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

// One line of space-separated ids per text.
std::vector<Ids> read_outputs(const std::filesystem::path& path) {
  std::istringstream in(read_all(path));
  std::vector<Ids> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    Ids ids;
    for (int32_t id = 0; words >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

void check_reference_pairs(const std::string& vocab_file) {
  const char* src = std::getenv("INFERD_LLAMA_SRC");
  if (src == nullptr) GTEST_SKIP() << "INFERD_LLAMA_SRC is not set (scripts/fetch-llama-src)";
  const std::string base = std::string(src) + "/models/" + vocab_file;
  ASSERT_TRUE(std::filesystem::exists(base)) << base;
  const std::vector<std::string> inputs = read_inputs(base + ".inp");
  const std::vector<Ids> expected = read_outputs(base + ".out");
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_FALSE(inputs.empty());

  gguf::GgufFile file = gguf::GgufFile::open(base);
  auto tok = Tokenizer::from_gguf(file);
  size_t matched = 0, decoded = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(vocab_file + " text " + std::to_string(i) + ": '" + inputs[i] + "'");
    const Ids ids = tok->encode(inputs[i], false, false);
    EXPECT_EQ(ids, expected[i]);
    matched += ids == expected[i];
    if (tok->round_trips(inputs[i])) {
      EXPECT_EQ(tok->decode(ids, false), inputs[i]);
      ++decoded;
    }
  }
  std::printf("[ spm      ] %s: %zu of %zu texts match llama.cpp, %zu decoded back\n",
              vocab_file.c_str(), matched, inputs.size(), decoded);
}

TEST(TokenizerSpmReference, LlamaSpmMatchesLlamaCpp) {
  check_reference_pairs("ggml-vocab-llama-spm.gguf");
}

TEST(TokenizerSpmReference, Phi3MatchesLlamaCpp) {
  check_reference_pairs("ggml-vocab-phi-3.gguf");
}

// ---- Gemma 3 (262,144 tokens, no space prefix): ids from llama.cpp's llama-tokenize ----

TEST(TokenizerSpmReference, Gemma3SpotChecks) {
  const std::string path = cache_dir() + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "no " << path << " (scripts/fetch-model gemma3-270m)";
  gguf::GgufFile file = gguf::GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->vocab().size(), 262144);
  EXPECT_FALSE(tok->vocab().add_space_prefix());
  EXPECT_EQ(tok->encode("Hello world", true, false), (Ids{2, 9259, 1902}));
  EXPECT_EQ(tok->encode(" Hello  world", false, false), (Ids{26352, 138, 12392}));
}

}  // namespace
}  // namespace inferd::tokenizer
