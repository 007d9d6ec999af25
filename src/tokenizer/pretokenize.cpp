#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace inferd::tokenizer {
namespace {

// White space as the Unicode White_Space property defines it. PCRE2's own \s (UCP mode) also
// takes U+180E, which the reference tokenizer does not, so the class is spelt out.
#define INFERD_WS                                                                             \
  "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
  "\\x{205F}\\x{3000}"

// The GPT-2 pattern: contractions, letters, digits, other symbols (each with one optional
// leading space), then white space that is not followed by a non-space character.
constexpr const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" INFERD_WS
                              "\\p{L}\\p{N}]+|[" INFERD_WS "]+(?![^" INFERD_WS "])";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^" INFERD_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" INFERD_WS "]*[\\r\\n]+|[" INFERD_WS
    "]+(?![^" INFERD_WS "])|[" INFERD_WS "]+";

#undef INFERD_WS

struct Spec {
  std::vector<std::string_view> names;
  std::vector<const char*> regexes;
  bool ignore_merges = false;
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> kSpecs = {
      // SmolLM and the StarCoder family: every digit is a piece of its own.
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2},
       false},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {kGpt2}, false},
      {{"default"}, {"[\\p{P}$+<=>^~|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {kLlama3}, true},
  };
  return kSpecs;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::known_names() {
  std::vector<std::string_view> names;
  for (const Spec& spec : specs()) names.insert(names.end(), spec.names.begin(), spec.names.end());
  return names;
}

namespace {

pcre2_code* compile(std::string_view name, const char* pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    fail("pre-tokenizer '{}': regex does not compile at {}: {}", name, offset,
         reinterpret_cast<const char*>(message.data()));
  }
  // JIT is an optimisation only; without it the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

}  // namespace

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view name) {
  for (const Spec& spec : specs()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) == spec.names.end()) continue;
    std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
    pre->name_ = std::string(name);
    pre->ignore_merges_ = spec.ignore_merges;
    for (const char* pattern : spec.regexes) {
      auto regex = std::make_unique<Regex>();
      regex->code = compile(name, pattern);
      pre->regexes_.push_back(std::move(regex));
    }
    return pre;
  }
  fail("tokenizer.ggml.pre = '{}' is not a pre-tokenizer inferd implements (known: {})", name,
       fmt::join(known_names(), ", "));
}

namespace {

void split_piece(std::string_view name, const pcre2_code* code, std::string_view piece,
                 pcre2_match_data* match_data, std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t cursor = 0;  // end of the text already handed out
  size_t start = 0;   // where the next search begins
  while (start < piece.size()) {
    int rc =
        pcre2_match(code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK, match_data, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's fixed stack can run out on pathological input; the interpreter cannot.
      rc = pcre2_match(code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       match_data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer '{}': regex match failed with PCRE2 error {}", name, rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // None of our patterns can match the empty string; step over one character anyway so
      // that a future pattern that can does not loop forever.
      ++start;
      while (start < piece.size() && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) {
        ++start;
      }
      continue;
    }
    if (begin > cursor) out.push_back(piece.substr(cursor, begin - cursor));
    out.push_back(piece.substr(begin, end - begin));
    cursor = start = end;
  }
  if (cursor < piece.size()) out.push_back(piece.substr(cursor));
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    // Match data is per call, which keeps split() safe to run from several threads.
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
        pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
    if (match_data == nullptr) throw std::bad_alloc();
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      split_piece(name_, regex->code, piece, match_data.get(), next);
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace inferd::tokenizer
