#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tokenizer/utf8_scan.h"
#include "util/error.h"

// How the reference pre-tokenizes, which is what this file reproduces:
//
// 1. Text is decoded into code points (leniently, see lenient_utf8()).
// 2. A regex that names Unicode categories (\p{L}, \p{N}, \p{P}, \p{M}, \p{S}, and \p{Lu},
//    \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}) does not see the code points. Each code point from U+0080
//    up is replaced by one byte that stands for its class: 0x0B (a vertical tab) for white
//    space, 0xD1 for numbers, 0xD2 letters, 0xD3 punctuation, 0xD4 marks, 0xD5 symbols, 0xD0
//    anything else. ASCII stays as it is. Each \p{..} becomes a character class of its byte
//    and the category's ASCII members, and a byte-wise regex engine with ASCII-only \s, \d, \w
//    runs on the result. What follows: all five letter categories mean "any letter" beyond
//    ASCII (so \p{Lu} matches 'é'; [^a-z] after (?=\p{L}) is how the case-aware patterns tell
//    upper from lower case, and beyond ASCII every letter is both); \s beyond ASCII is exactly
//    the White_Space property; controls, format characters, private use, surrogates and
//    unassigned code points belong to no category and only negated classes match them; and
//    0x1C..0x1F, which Python's \s matches, are not \s.
//    The categories come from Unicode 15.1 (pretokenize_unicode.inc).
// 3. A regex without categories runs on the code points themselves, with every non-ASCII
//    white space code point replaced by 0x0B; \s, \d, \w and \b are again ASCII only.
// 4. Every regex runs on each piece the earlier ones made, on its own: lookarounds, $ and \b
//    see the piece's ends as the text's ends. A piece becomes its matches and the text between
//    them. Empty matches cut too, and after one the search goes on as C++'s regex_iterator
//    does: first a non-empty match at the same place, else from one character further on.
// 5. For the GPT-2, Llama 3, Qwen2 and Qwen3.5 patterns the reference has hand-written
//    splitters instead of the regex; they give the same pieces as the regex does under rules
//    2-4, and so do ours (tests/unit/tokenizer_pretokenize_test.cpp compares them). AFMoE's
//    digit grouping, which Tiny Aya's first regex is also run as, exists only as code. We also
//    write SuperBPE's digit look-ahead as code: as a regex it is quadratic in a digit run.
//
// Which regexes a name uses, and whether it ignores merges, are the reference's tables. Not
// here: Kimi K2 (a splitter with no regex behind it) and the names whose vocabularies are not
// byte-level (gemma4, sarvam-moe, whitespace).
//
// Here the category regexes run with PCRE2 in 8-bit mode without UTF on a string of those class
// bytes (one per code point), the others with PCRE2 in UTF mode without UCP on UTF-8 where
// non-ASCII white space is written as 0x0B. Pure ASCII text, the common case, is its own class
// string, so nothing is copied for it.

namespace inferd::tokenizer {
namespace {

// ---- Code point classes -------------------------------------------------------------------

enum Class : uint8_t {
  kW = 0x0B,  // white space (U+0080 and up)
  kO = 0xD0,  // none of the categories below
  kN = 0xD1,
  kL = 0xD2,
  kP = 0xD3,
  kM = 0xD4,
  kS = 0xD5,
};

struct Run {
  uint32_t first;  // first code point of the run; the run ends where the next one starts
  Class cls;
};

constexpr Run kRuns[] = {
#include "tokenizer/pretokenize_unicode.inc"
};

constexpr bool runs_are_sorted() {
  for (size_t i = 1; i < std::size(kRuns); ++i) {
    if (kRuns[i].first <= kRuns[i - 1].first || kRuns[i].cls == kRuns[i - 1].cls) return false;
  }
  return kRuns[0].first == 0x80 && kRuns[std::size(kRuns) - 1].first < 0x110000;
}
static_assert(runs_are_sorted());

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Two-stage lookup: 256-code-point blocks, identical blocks stored once (most of the code space
// is unassigned or one script's letters).
class ClassTable {
 public:
  ClassTable() {
    std::vector<uint8_t> flat(kMaxCodePoint + 1);
    for (size_t cp = 0; cp < 0x80; ++cp) flat[cp] = static_cast<uint8_t>(cp);
    for (size_t i = 0; i < std::size(kRuns); ++i) {
      size_t end = i + 1 < std::size(kRuns) ? kRuns[i + 1].first : flat.size();
      std::fill(flat.begin() + kRuns[i].first, flat.begin() + end, kRuns[i].cls);
    }
    for (size_t block = 0; block < stage1_.size(); ++block) {
      auto first = flat.begin() + block * 256;
      size_t found = 0;
      for (; found < blocks_.size(); found += 256) {
        if (std::equal(first, first + 256, blocks_.begin() + found)) break;
      }
      if (found == blocks_.size()) blocks_.insert(blocks_.end(), first, first + 256);
      stage1_[block] = static_cast<uint16_t>(found / 256);
    }
  }

  uint8_t operator()(char32_t cp) const {
    if (cp > kMaxCodePoint) return kO;
    return blocks_[stage1_[cp >> 8] * 256u + (cp & 0xFF)];
  }

 private:
  std::array<uint16_t, (kMaxCodePoint + 1) / 256> stage1_{};
  std::vector<uint8_t> blocks_;
};

const ClassTable& class_table() {
  static const ClassTable kTable;
  return kTable;
}

bool is_letter(uint8_t c) {
  return c == kL || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
bool is_number(uint8_t c) {
  return c == kN || (c >= '0' && c <= '9');
}
// \s on class bytes: ASCII white space, and kW (the same byte as \v).
bool is_space(uint8_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// One code point as the reference decodes it; a byte that starts none counts as U+FFFD.
struct CodePoint {
  char32_t cp;
  uint32_t length;
  bool valid;  // false for such a byte
};

CodePoint decode(const unsigned char* p, size_t available) {
  unsigned char lead = p[0];
  if (lead < 0x80) return {lead, 1, true};
  size_t need = lead < 0xC0 ? 0 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 0;
  if (need == 0 || need > available) return {0xFFFD, 1, false};
  char32_t cp = lead & (0x7F >> need);
  for (size_t k = 1; k < need; ++k) {
    if ((p[k] & 0xC0) != 0x80) return {0xFFFD, 1, false};
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  return {cp, static_cast<uint32_t>(need), true};
}

// ---- The pre-tokenizers --------------------------------------------------------------------

// Rules that exist in the reference as code, not as a regex; the names stand in the lists.
constexpr std::string_view kNumberGroupsRule = "\\p{AFMoE_digits}";
// SuperBPE's look-ahead: cuts before every group of three ASCII digits that ends a digit run.
// As a regex it rescans the rest of the run at every position (quadratic in the run's length),
// so it runs as code unless `hand_written` is off.
constexpr std::string_view kDigitThrees = "(?=(\\d{3})+(?!\\d))";
// Tiny Aya's regex; the reference runs the AFMoE rule for it instead.
constexpr std::string_view kTinyAyaDigits = "\\d{1,3}(?=(?:\\d{3})*\\b)";

// English contractions, case-insensitive, as most patterns after GPT-2 start.
#define INFERD_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view kLlama3 = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2 = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen35 = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kJais2 = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|"
    "\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
// Case-aware words: (?=\p{L})[^a-z] is an upper-case letter, (?=\p{L})[^A-Z] a lower-case one.
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" INFERD_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" INFERD_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGraniteMulti =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))"
    "+" INFERD_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))"
    "*" INFERD_CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Upper-then-lower words spelt with the letter sub-categories, which all mean "letter" here.
#define INFERD_CASED_WORDS                                                                     \
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"   \
  "+" INFERD_CONTRACTIONS                                                                      \
  "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]" \
  "*" INFERD_CONTRACTIONS "?"
constexpr std::string_view kTinyAya = INFERD_CASED_WORDS
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kYoutu =
    INFERD_CASED_WORDS "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// DeepSeek V3 and relatives: an ASCII symbol may lead a run of ASCII letters; other words take
// one leading character that is not a letter, punctuation or symbol.
#define INFERD_DEEPSEEK3_HEAD                                                      \
  "[!\"#$%&'()*+,\\-./"                                                            \
  ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+" \
  "| ?[\\p{P}\\p{S}]+"
constexpr std::string_view kDeepseek3 =
    INFERD_DEEPSEEK3_HEAD "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kSpark25 = INFERD_DEEPSEEK3_HEAD "|[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kBailingMoe =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kSeedCoder = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kUfakzeka =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view kExaoneMoe = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
constexpr std::string_view kMiniCpm5 = INFERD_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
// Poro, BLOOM, GPT-3 Finnish: everything up to white space or a few punctuation marks.
constexpr std::string_view kPoro = " ?[^(\\s|.,!?…。，、।۔،)]+";
// Scripts written without spaces, taken as runs of their own.
constexpr std::string_view kCjkHangul = "[一-龥ࠀ-一가-퟿]+";
constexpr std::string_view kCjkKana = "[一-龥぀-ゟ゠-ヿ]+";
constexpr std::string_view kYoutuScripts =
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-"
    "ゟ゠-"
    "ヿ]"
    "+";
constexpr std::string_view kAfmoeScripts =
    "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-"
    "꧿가-"
    "힯ᄀ-"
    "ᇿ]"
    "+";
constexpr std::string_view kAfmoe =
    INFERD_DEEPSEEK3_HEAD "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
#undef INFERD_DEEPSEEK3_HEAD
#undef INFERD_CASED_WORDS
#undef INFERD_CONTRACTIONS

struct Spec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> kSpecs = {
      {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano"},
       {kLlama3},
       true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}},
      {{"glm4", "glm5"}, {kLlama3}, true},
      {{"jais-2"}, {kJais2}},
      // Gemma 4: BPE merges over whole lines (spaces already U+2581); runs of newlines apart.
      {{"gemma4"}, {"[^\\n]+|[\\n]+"}},
      {{"deepseek-llm"},
       {"[\\r\\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-"
        "Ᏽᏸ-"
        "ᏽᲐ-"
        "ᲺᲽ-"
        "Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-"
        "ℭℯ-"
        "ℴℹℼ-"
        "ℿⅅ-"
        "ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-"
        "𐓓𐓘-"
        "𐓻𐲀-"
        "𐲲𐳀-"
        "𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjkHangul, "\\p{N}+"}},
      {{"deepseek-coder"}, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjkHangul, "\\p{N}"}},
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       {"\\p{N}{1,3}", kCjkKana, kDeepseek3}},
      {{"spark2_5"}, {"\\p{N}{1,3}", kCjkKana, kSpark25, "\\p{N}"}},
      {{"youtu"}, {kYoutuScripts, kYoutu}, true},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
      // SmolLM and the StarCoder family: every digit is a piece of its own.
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
        "mellum2"},
       {"\\p{N}", kGpt2}},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
        "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code",
        "roberta-bpe", "gigachat", "a.x-4.0", "mellum", "modern-bert"},
       {kGpt2}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan",
        "solar-open", "grok-2"},
       {kQwen2}},
      {{"qwen35"}, {kQwen35}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kPoro}},
      {{"viking"}, {kPoro, "\\p{N}"}},
      {{"tekken"}, {kTekken}, true},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]", kGpt2}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}},
      {{"granite-embed-multi-97m"}, {kGraniteMulti}, true},
      {{"tiny_aya", "cohere2moe"}, {kTinyAyaDigits, kTinyAya}},
      {{"superbpe"}, {"\\p{N}+", kDigitThrees}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailingMoe}},
      {{"seed-coder"}, {kSeedCoder}},
      {{"ufakzeka"}, {kUfakzeka}},
      {{"afmoe"}, {kNumberGroupsRule, kAfmoeScripts, kAfmoe}},
      {{"laguna"}, {"[^\\n]+|[\\n]+", kQwen2}},
      {{"exaone-moe"}, {kExaoneMoe}},
      {{"minicpm5"}, {"\\p{N}{1,3}", kMiniCpm5}, true},
  };
  return kSpecs;
}

// The category names the reference rewrites, each with its byte and its ASCII members (as
// they go inside a PCRE2 character class).
struct Category {
  std::string_view name;
  const char* members;
};
constexpr Category kCategories[] = {
    {"N", "\\x{D1}0-9"},
    {"L", "\\x{D2}A-Za-z"},
    {"P", "\\x{D3}!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"M", "\\x{D4}"},
    {"S", "\\x{D5}\\$\\+<->\\^`\\|~"},
    {"Lu", "\\x{D2}A-Za-z"},
    {"Ll", "\\x{D2}A-Za-z"},
    {"Lt", "\\x{D2}A-Za-z"},
    {"Lm", "\\x{D2}A-Za-z"},
    {"Lo", "\\x{D2}A-Za-z"},
};

const Category* category_at(std::string_view pattern, size_t i, size_t* length) {
  if (pattern.substr(i, 3) != "\\p{") return nullptr;
  size_t close = pattern.find('}', i + 3);
  if (close == std::string_view::npos) return nullptr;
  std::string_view name = pattern.substr(i + 3, close - i - 3);
  for (const Category& c : kCategories) {
    if (c.name == name) {
      *length = close - i + 1;
      return &c;
    }
  }
  return nullptr;
}

bool uses_categories(std::string_view pattern) {
  size_t length = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (category_at(pattern, i, &length) != nullptr) return true;
  }
  return false;
}

// The pattern for the class-byte string: each \p{..} becomes its members, in brackets unless
// it already stands inside a class. Brackets are tracked as naively as the reference does: a
// '[' or ']' right after a backslash is a literal, any other opens or closes a class.
std::string class_pattern(std::string_view pattern) {
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    bool escaped = i > 0 && pattern[i - 1] == '\\';
    if (c == '[' && !escaped) {
      inside = true;
    } else if (c == ']' && inside && !escaped) {
      inside = false;
    }
    size_t length = 0;
    if (const Category* cat = category_at(pattern, i, &length)) {
      if (!inside) out += '[';
      out += cat->members;
      if (!inside) out += ']';
      i += length - 1;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind {
    kClassRegex,      // PCRE2 on the class bytes
    kCodePointRegex,  // PCRE2 on UTF-8 with non-ASCII white space as 0x0B
    kNumberGroups,    // the AFMoE rule
    kGpt2,            // hand-written kGpt2 (the same pieces, faster)
    kLlama3,          // hand-written kLlama3, kQwen2 and kQwen35
    kDigitThrees,     // hand-written kDigitThrees
  };
  Kind kind = Kind::kClassRegex;
  pcre2_code* code = nullptr;
  size_t max_digits = 3;        // kLlama3: \p{N}{1,3} or \p{N}
  bool marks_in_words = false;  // kLlama3: [\p{L}\p{M}]+ instead of \p{L}+ (Qwen3.5)
  ~Step() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::known_names() {
  std::vector<std::string_view> names;
  for (const Spec& spec : specs()) names.insert(names.end(), spec.names.begin(), spec.names.end());
  return names;
}

namespace {

pcre2_code* compile(std::string_view name, const std::string& pattern, bool utf) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // $ is the end of the piece only (the reference's engine has no "before a final newline").
  uint32_t options = PCRE2_DOLLAR_ENDONLY | (utf ? PCRE2_UTF : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
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

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view name, bool hand_written) {
  for (const Spec& spec : specs()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) == spec.names.end()) continue;
    std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
    pre->name_ = std::string(name);
    pre->ignore_merges_ = spec.ignore_merges;
    for (std::string_view pattern : spec.regexes) {
      auto step = std::make_unique<Step>();
      if (pattern == kNumberGroupsRule || pattern == kTinyAyaDigits) {
        step->kind = Step::Kind::kNumberGroups;
      } else if (hand_written && pattern == kDigitThrees) {
        step->kind = Step::Kind::kDigitThrees;
      } else if (hand_written && pattern == kGpt2) {
        step->kind = Step::Kind::kGpt2;
      } else if (hand_written && (pattern == kLlama3 || pattern == kQwen2 || pattern == kQwen35)) {
        step->kind = Step::Kind::kLlama3;
        step->max_digits = pattern == kLlama3 ? 3 : 1;
        step->marks_in_words = pattern == kQwen35;
      } else if (uses_categories(pattern)) {
        step->kind = Step::Kind::kClassRegex;
        step->code = compile(name, class_pattern(pattern), false);
      } else {
        step->kind = Step::Kind::kCodePointRegex;
        step->code = compile(name, std::string(pattern), true);
      }
      pre->steps_.push_back(std::move(step));
    }
    return pre;
  }
  fail("tokenizer.ggml.pre = '{}' is not a pre-tokenizer inferd implements (known: {})", name,
       fmt::join(known_names(), ", "));
}

namespace {

// PCRE2 working memory, one set per thread so that split() allocates none of it per call.
// The JIT stack may grow to 8 MiB: long pieces with lookaheads inside repeats need more than
// the default 32 KiB. If even that runs out, the interpreter takes over (heap frames).
class MatchScratch {
 public:
  MatchScratch()
      : data_(pcre2_match_data_create(1, nullptr)),
        context_(pcre2_match_context_create(nullptr)),
        stack_(pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr)) {
    if (data_ == nullptr || context_ == nullptr || stack_ == nullptr) throw std::bad_alloc();
    pcre2_jit_stack_assign(context_, nullptr, stack_);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack_);
    pcre2_match_context_free(context_);
    pcre2_match_data_free(data_);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  // The match [begin, end) at or after `start`, or false when there is none.
  bool match(const pcre2_code* code, const unsigned char* subject, size_t length, size_t start,
             uint32_t options, size_t* begin, size_t* end) {
    options |= PCRE2_NO_UTF_CHECK;  // the code point subject is always valid UTF-8
    int rc = pcre2_match(code, subject, length, start, options, data_, context_);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, length, start, options | PCRE2_NO_JIT, data_, context_);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    // rc == 0 only says that the capture groups did not fit; the whole match is there.
    if (rc < 0) fail("pre-tokenizer: regex match failed with PCRE2 error {}", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data_);
    *begin = ovector[0];
    *end = ovector[1];
    return true;
  }

 private:
  pcre2_match_data* data_;
  pcre2_match_context* context_;
  pcre2_jit_stack* stack_;
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

// Calls cut(offset) for the end of every piece that `code` makes of subject[0, length): its
// matches and the text between them, in order; empty matches only separate.
template <class Cut>
void regex_pieces(const pcre2_code* code, const unsigned char* subject, size_t length, bool utf,
                  Cut&& cut) {
  MatchScratch& m = match_scratch();
  size_t done = 0;   // end of the text already handed out
  size_t start = 0;  // where the next search begins
  bool after_empty = false;
  size_t begin = 0, end = 0;
  while (true) {
    bool found;
    if (after_empty) {
      // As regex_iterator does after an empty match: a non-empty match right here, else
      // search again from the next character.
      found = m.match(code, subject, length, start, PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED, &begin,
                      &end);
      if (!found) {
        if (start >= length) break;
        ++start;
        while (utf && start < length && (subject[start] & 0xC0) == 0x80) ++start;
        found = m.match(code, subject, length, start, 0, &begin, &end);
      }
    } else {
      found = m.match(code, subject, length, start, 0, &begin, &end);
    }
    if (!found) break;
    if (begin > done) cut(begin);
    if (end > begin) cut(end);
    done = start = end;
    after_empty = end == begin;
  }
  if (done < length) cut(length);
}

// Length of an English contraction at s[0, n) ('s, 't, 're, 've, 'm, 'll, 'd), or 0. With
// `any_case` the letters may be upper case too ('S, 'Re, ...).
size_t contraction(const unsigned char* s, size_t n, bool any_case) {
  if (n < 2 || s[0] != '\'') return 0;
  auto lower = [any_case](unsigned char c) {
    return any_case && c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c + 32) : c;
  };
  unsigned char a = lower(s[1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (n < 3) return 0;
  unsigned char b = lower(s[2]);
  return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// kGpt2 by hand: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
// on class bytes. One white space character before a non-space that is not a space matches
// nothing; it is a piece of its own all the same, as text between matches.
template <class Cut>
void gpt2_pieces(const unsigned char* s, size_t n, Cut&& cut) {
  auto other = [](unsigned char c) { return !is_space(c) && !is_letter(c) && !is_number(c); };
  size_t pos = 0;
  while (pos < n) {
    if (size_t k = contraction(s + pos, n - pos, false)) {
      cut(pos += k);
      continue;
    }
    // A space joins the run that follows it, whatever its kind (not white space).
    size_t q = s[pos] == ' ' && pos + 1 < n && !is_space(s[pos + 1]) ? pos + 1 : pos;
    unsigned char c = s[q];
    if (is_letter(c)) {
      while (q < n && is_letter(s[q])) ++q;
    } else if (is_number(c)) {
      while (q < n && is_number(s[q])) ++q;
    } else if (!is_space(c)) {
      while (q < n && other(s[q])) ++q;
    } else {
      while (q < n && is_space(s[q])) ++q;
      // \s+(?!\S): a run followed by a non-space leaves its last character to what follows.
      if (q < n && q - pos > 1) --q;
    }
    cut(pos = q);
  }
}

// kLlama3 (max_digits 3), kQwen2 (1) and kQwen35 (1, marks in words) by hand:
// contractions (any case) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,max} |
// ' ?[^\s\p{L}\p{N}]+[\r\n]*' | \s*[\r\n]+ | \s+(?!\S) | \s+ on class bytes.
template <class Cut>
void llama3_pieces(const unsigned char* s, size_t n, size_t max_digits, bool marks, Cut&& cut) {
  auto word = [marks](unsigned char c) { return is_letter(c) || (marks && c == kM); };
  auto other = [&](unsigned char c) { return !is_space(c) && !word(c) && !is_number(c); };
  auto newline = [](unsigned char c) { return c == '\r' || c == '\n'; };
  size_t pos = 0;
  while (pos < n) {
    if (size_t k = contraction(s + pos, n - pos, true)) {
      cut(pos += k);
      continue;
    }
    unsigned char c = s[pos];
    // A word, with one leading character that is neither a line break nor a number.
    if (word(c) || (!newline(c) && !is_number(c) && pos + 1 < n && word(s[pos + 1]))) {
      size_t q = pos + 1;
      while (q < n && word(s[q])) ++q;
      cut(pos = q);
      continue;
    }
    if (is_number(c)) {
      size_t q = pos + 1;
      while (q < n && q - pos < max_digits && is_number(s[q])) ++q;
      cut(pos = q);
      continue;
    }
    size_t q = c == ' ' && pos + 1 < n && other(s[pos + 1]) ? pos + 1 : pos;
    if (other(s[q])) {
      while (q < n && other(s[q])) ++q;
      while (q < n && newline(s[q])) ++q;
      cut(pos = q);
      continue;
    }
    // White space: up to its last line break if it has one, else as in GPT-2.
    size_t end = pos, last_newline = 0;
    while (end < n && is_space(s[end])) {
      if (newline(s[end])) last_newline = end + 1;
      ++end;
    }
    cut(pos = last_newline > 0 ? last_newline : end < n && end - pos > 1 ? end - 1 : end);
  }
}

// kDigitThrees by hand: a cut wherever the ASCII digits from there to the end of their run
// are three, six, nine, ... (the regex's \\d is ASCII only here).
template <class Cut>
void digit_three_pieces(const unsigned char* s, size_t n, Cut&& cut) {
  auto digit = [](unsigned char c) { return c >= '0' && c <= '9'; };
  size_t pos = 0;
  while (pos < n) {
    if (!digit(s[pos])) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < n && digit(s[end])) ++end;
    for (size_t at = pos + (end - pos) % 3; at + 3 <= end; at += 3) cut(at);
    pos = end;
  }
  cut(n);
}

// The AFMoE rule: a run of numbers is cut into groups of three from its end, and the text
// before the run goes with its first group (the rule only cuts, before and after groups).
template <class Cut>
void number_group_pieces(const unsigned char* classes, size_t length, Cut&& cut) {
  size_t pos = 0;
  while (pos < length) {
    if (!is_number(classes[pos])) {
      ++pos;
      continue;
    }
    size_t first = pos;
    while (pos < length && is_number(classes[pos])) ++pos;
    size_t at = first + (pos - first) % 3;
    if (at > first) cut(at);
    for (; at < pos; at += 3) cut(at + 3);
  }
  cut(length);
}

// Bytes in the unit that starts at p[0]: one code point, or one byte that starts none.
size_t unit_length(const unsigned char* p, size_t available) {
  return p[0] < 0x80 ? 1 : decode(p, available).length;
}

// The text as the steps see it. Offsets in pieces are code point indices.
class Subject {
 public:
  explicit Subject(std::string_view text) : text_(text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n && p[i] < 0x80) ++i;
    ascii_ = i == n;
    if (ascii_) return;
    const ClassTable& table = class_table();
    classes_.resize(n);
    std::copy(p, p + i, classes_.begin());
    size_t w = i;
    while (i < n) {
      if (p[i] < 0x80) {
        classes_[w++] = static_cast<char>(p[i++]);
        continue;
      }
      CodePoint c = decode(p + i, n - i);
      classes_[w++] = static_cast<char>(table(c.cp));  // an invalid byte counts as U+FFFD
      i += c.length;
    }
    classes_.resize(w);
  }

  size_t size() const { return ascii_ ? text_.size() : classes_.size(); }
  const unsigned char* classes() const {
    return reinterpret_cast<const unsigned char*>(ascii_ ? text_.data() : classes_.data());
  }

  // Appends the text of each piece; `ends` holds the code point index where each one ends.
  void pieces(const std::vector<uint32_t>& ends, std::vector<std::string_view>& out) const {
    out.reserve(out.size() + ends.size());
    size_t first = 0;
    if (ascii_) {
      for (uint32_t last : ends) {
        out.push_back(text_.substr(first, last - first));
        first = last;
      }
      return;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(text_.data());
    size_t index = 0, byte = 0;
    for (uint32_t last : ends) {
      for (; index < last; ++index) byte += unit_length(p + byte, text_.size() - byte);
      out.push_back(text_.substr(first, byte - first));
      first = byte;
    }
  }

  // Runs `code` on pieces [first, last) of the code point subject; cut() gets indices.
  template <class Cut>
  void code_point_pieces(const pcre2_code* code, size_t first, size_t last, Cut&& cut) {
    const auto* subject = reinterpret_cast<const unsigned char*>(text_.data());
    if (ascii_) {
      regex_pieces(code, subject + first, last - first, true,
                   [&](size_t offset) { cut(first + offset); });
      return;
    }
    build_code_points();
    subject = reinterpret_cast<const unsigned char*>(cp_text_.data());
    size_t begin = cp_starts_[first];
    regex_pieces(code, subject + begin, cp_starts_[last] - begin, true,
                 [&](size_t offset) { cut(cp_index_[begin + offset]); });
  }

 private:
  // The code point subject: the text as UTF-8 that PCRE2 accepts, with non-ASCII white space
  // written as \v, as the reference has it for regexes without categories.
  void build_code_points() {
    if (!cp_starts_.empty()) return;
    const auto* p = reinterpret_cast<const unsigned char*>(text_.data());
    cp_text_.reserve(text_.size());
    cp_starts_.reserve(classes_.size() + 1);
    for (size_t k = 0, at = 0; k < classes_.size(); ++k) {
      CodePoint c = decode(p + at, text_.size() - at);
      cp_starts_.push_back(static_cast<uint32_t>(cp_text_.size()));
      if (c.length > 1 && static_cast<uint8_t>(classes_[k]) == kW) {
        cp_text_ += '\v';
      } else if (!c.valid) {
        cp_text_ += kReplacementUtf8;
      } else if (c.cp >= 0xD800 && c.cp <= 0xDFFF) {
        // Not UTF-8 for PCRE2, so a stand-in that every pattern puts in the same classes: the
        // only class holding surrogates is AFMoE's range U+8C48-U+FAFF (its first character
        // is U+8C48, not U+F900), and the private-use U+E000 is in it and in no other.
        cp_text_ += "\xEE\x80\x80";
      } else if (c.cp > kMaxCodePoint) {
        cp_text_ += "\xEF\xBF\xBF";  // U+FFFF: like these, in no class of any pattern
      } else {
        cp_text_.append(text_.substr(at, c.length));
      }
      at += c.length;
    }
    cp_starts_.push_back(static_cast<uint32_t>(cp_text_.size()));
    cp_index_.assign(cp_text_.size() + 1, 0);
    for (size_t k = 0; k < cp_starts_.size(); ++k) {
      cp_index_[cp_starts_[k]] = static_cast<uint32_t>(k);
    }
  }

  std::string_view text_;
  bool ascii_ = true;
  std::string classes_;              // class byte of each code point (when not ascii_)
  std::string cp_text_;              // the code point subject, built on first use
  std::vector<uint32_t> cp_starts_;  // offset in cp_text_ of each code point, then its size
  std::vector<uint32_t> cp_index_;   // code point index at each offset in cp_text_ that starts one
};

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  split(text, pieces);
  return pieces;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  Subject subject(text);
  // Piece boundaries as code point indices: each piece ends where the next begins.
  std::vector<uint32_t> ends{static_cast<uint32_t>(subject.size())};
  std::vector<uint32_t> next;
  for (const auto& step : steps_) {
    next.clear();
    next.reserve(ends.size() * 2);
    size_t first = 0;
    for (uint32_t last : ends) {
      auto cut = [&](size_t index) {
        // Empty pieces (from empty matches) carry no text; the reference drops them later.
        if (index > (next.empty() ? 0 : next.back())) next.push_back(static_cast<uint32_t>(index));
      };
      auto cut_at = [&](size_t offset) { cut(first + offset); };
      switch (step->kind) {
        case Step::Kind::kClassRegex:
          regex_pieces(step->code, subject.classes() + first, last - first, false, cut_at);
          break;
        case Step::Kind::kCodePointRegex:
          subject.code_point_pieces(step->code, first, last, cut);
          break;
        case Step::Kind::kNumberGroups:
          number_group_pieces(subject.classes() + first, last - first, cut_at);
          break;
        case Step::Kind::kGpt2:
          gpt2_pieces(subject.classes() + first, last - first, cut_at);
          break;
        case Step::Kind::kDigitThrees:
          digit_three_pieces(subject.classes() + first, last - first, cut_at);
          break;
        case Step::Kind::kLlama3:
          llama3_pieces(subject.classes() + first, last - first, step->max_digits,
                        step->marks_in_words, cut_at);
          break;
      }
      first = last;
    }
    ends.swap(next);
  }
  subject.pieces(ends, out);
}

}  // namespace inferd::tokenizer
