// Constrained decoding. The schema checker accepts what the grammar engine enforces and names
// what it would not; the matcher's mask is exactly the set of tokens it accepts; random walks
// through a grammar (any allowed token, at random) always end in text the constraint accepts;
// through the engine, constrained output is what was asked for, with drafts and with n > 1,
// and the end-of-generation token keeps its logprob.
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <regex>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/mask_prefetcher.h"
#include "grammar_walk.h"
#include "server/api/openai_request.h"
#include "structured/grammar.h"
#include "structured/schema_support.h"
#include "tiny_engine.h"
#include "tokenizer/toy_vocab.h"
#include "util/error.h"

namespace inferd::structured {
namespace {

using json = nlohmann::json;

std::string refusal(const std::string& schema) {
  try {
    check_json_schema(json::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaSupport, AcceptsWhatTheGrammarEnforces) {
  for (const char* schema : {
           R"({})",
           R"(true)",
           R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
               "b": {"type": ["integer", "null"], "minimum": 0}}, "required": ["a"],
               "additionalProperties": false, "title": "T", "description": "d"})",
           R"({"type": "array", "items": {"enum": ["x", 1, null]}, "minItems": 1, "maxItems": 3})",
           R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": false})",
           R"({"anyOf": [{"type": "string", "format": "email"}, {"type": "number"}]})",
           R"({"$defs": {"p": {"type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}}},
               "$ref": "#/$defs/p"})",
           R"({"type": "string", "pattern": "^[a-z]+$"})",
           R"({"type": "integer", "multipleOf": 5, "exclusiveMaximum": 100})",
           R"({"type": "string", "const": "k"})",
           R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})",
           R"({"oneOf": [
                {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"enum": ["b"]}}, "required": ["kind"]}]})",
           R"({"properties": {"a": {}}, "required": ["a"]})",
           R"({"type": "integer", "format": "int64"})",
       }) {
    EXPECT_EQ(refusal(schema), "") << schema;
  }
}

TEST(SchemaSupport, NamesWhatWouldNotBeEnforced) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"not": {"type": "string"}})", "keyword 'not' at /"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "if": {}}}})",
       "'if' at /properties/a"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"type": "array", "contains": {"type": "string"}})", "'contains'"},
      {R"({"type": "number", "multipleOf": 0.5})", "'multipleOf' for type number"},
      {R"({"type": "string", "format": "credit-card"})", "format 'credit-card'"},
      {R"({"type": "string", "pattern": "a+", "maxLength": 3})", "'pattern' with minLength"},
      {R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", "'allOf' with 2 schemas"},
      {R"({"type": "object", "anyOf": [{"required": ["a"]}]})", "'type' beside 'anyOf'"},
      {R"({"enum": [1, 2], "const": 1})", "const and enum together"},
      {R"({"$ref": "https://example.com/s.json"})", "only references inside the schema"},
      {R"({"$ref": "#/$defs/missing"})", "points at nothing"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})",
       "branches 0 and 1 may both match"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "may both match"},
      {R"({"minLength": 3})", "'minLength' at / does not apply to a schema without 'type'"},
      {R"({"type": "string", "minimum": 3})", "'minimum' at / does not apply to type \"string\""},
      {R"({"type": "array", "items": [{"type": "string"}]})", "use 'prefixItems'"},
      {R"({"type": "strnig"})", "unknown type 'strnig'"},
      {R"({"type": "integer", "enum": [1, "two"]})", "is not of type 'integer'"},
      {R"({"type": "object", "properties": {"a": 3}})", "at /properties/a must be an object"},
      {R"({"type": "object", "nullable": true})", "keyword 'nullable'"},
      {R"({"type": "string", "maxLength": -1})", "'maxLength' at / must be a non-negative integer"},
      {R"({"type": "string", "minLength": 2.5})", "'minLength' at / must be a non-negative"},
      {R"({"type": "string", "minLength": 4, "maxLength": 3})", "greater than 'maxLength'"},
  };
  for (const auto& [schema, expected] : cases) {
    EXPECT_NE(refusal(schema).find(expected), std::string::npos)
        << schema << "\n  got: " << refusal(schema) << "\n  expected to contain: " << expected;
  }
}

// Draft 4 tuples (llama-server's tests send them) become 2020-12's prefixItems/items, which say
// the same; check_json_schema alone still names them.
TEST(SchemaSupport, Draft4TuplesAreReadAsPrefixItems) {
  // (Compared as unordered objects: prepare_json_schema keeps the schema's key order.)
  const auto prepared = [](const char* schema) {
    return json::parse(prepare_json_schema(json::parse(schema)).dump());
  };
  EXPECT_EQ(prepared(R"({"type": "array", "items": [{"type": "integer"}]})"),
            json::parse(R"({"type": "array", "prefixItems": [{"type": "integer"}]})"));
  EXPECT_EQ(prepared(R"({"properties": {"p": {"items": [{"type": "string"}],
                         "additionalItems": false}}, "type": "object"})"),
            json::parse(R"({"properties": {"p": {"prefixItems": [{"type": "string"}],
                            "items": false}}, "type": "object"})"));
}

// A byte-level vocabulary: every byte is a token, plus a few merges, BOS and EOS.
class GrammarTest : public ::testing::Test {
 protected:
  std::unique_ptr<tokenizer::Tokenizer> tok_ =
      tokenizer::Tokenizer::from_vocab(tokenizer::Vocab(tokenizer::make_toy_vocab(
          {.control = {"<s>", "</s>"},
           .merges = {{"\"", "a"}, {"{", "\""}, {"t", "r"}, {"tr", "u"}, {"tru", "e"}}})));
  const int32_t eos_ = tok_->vocab().special().eos;
  GrammarCompiler compiler_{*tok_, tok_->vocab().size() + 3, 1};  // 3 ids of padding

  int32_t id(std::string_view piece) const { return tok_->vocab().find(piece); }
  int32_t byte(char c) const {
    const std::vector<int32_t> ids = tok_->encode(std::string(1, c), false, false);
    return ids.at(0);
  }

  std::optional<std::string> random_walk(const GrammarSpec& spec, uint32_t seed,
                                         int max_steps = 400) {
    return structured::random_walk(compiler_, *tok_, spec, seed, max_steps);
  }
};

TEST_F(GrammarTest, MaskIsExactlyWhatTheMatcherAccepts) {
  GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kRegex, "ab+c", {}}));
  std::vector<float> logits(static_cast<size_t>(compiler_.n_vocab()), 1.0f);
  m.mask(logits);
  for (int32_t t = 0; t < compiler_.n_vocab(); ++t) {
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(t)]), !m.allows(t)) << t;
  }
  EXPECT_TRUE(m.allows(byte('a')));
  EXPECT_FALSE(m.allows(byte('b')));
  EXPECT_FALSE(m.allows(eos_));                     // not complete yet
  EXPECT_FALSE(m.allows(compiler_.n_vocab() - 1));  // padding ids are never allowed
  EXPECT_FALSE(m.accept(byte('b')));                // refused, and nothing changed:
  EXPECT_TRUE(m.allows(byte('a')));
  EXPECT_TRUE(m.accept(byte('a')));
  EXPECT_TRUE(m.accept(byte('b')));
  EXPECT_TRUE(m.allows(byte('b')));
  EXPECT_TRUE(m.allows(byte('c')));
  EXPECT_TRUE(m.accept(byte('c')));
  EXPECT_FALSE(m.allows(byte('b')));
  EXPECT_TRUE(m.allows(eos_));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(eos_));
  EXPECT_TRUE(m.terminated());
}

TEST_F(GrammarTest, PrefetchedMasksAreTheOnesTheMatcherWouldFill) {
  // Matchers walked by a prefetch thread and twins walked alone take the same random tokens;
  // each prefetched mask must equal its twin's, position after position.
  const auto grammar = compiler_.compile({GrammarSpec::Kind::kJsonSchema,
                                          R"({"type": "object", "properties": {
                                              "a": {"type": "string", "maxLength": 5},
                                              "n": {"type": "number"}}})",
                                          {}});
  constexpr size_t kMatchers = 3;
  std::vector<std::unique_ptr<GrammarMatcher>> prefetched, alone;
  std::vector<GrammarMatcher*> jobs;
  for (size_t i = 0; i < kMatchers; ++i) {
    prefetched.push_back(std::make_unique<GrammarMatcher>(grammar));
    alone.push_back(std::make_unique<GrammarMatcher>(grammar));
    jobs.push_back(prefetched.back().get());
  }
  engine::MaskPrefetcher prefetcher(kMatchers);
  std::mt19937 rng(3);
  const auto n = static_cast<size_t>(compiler_.n_vocab());
  std::vector<float> with(n), without(n);
  for (int step = 0; step < 40 && !jobs.empty(); ++step) {
    prefetcher.start(jobs);
    prefetcher.wait();
    for (size_t i = 0; i < kMatchers; ++i) {
      if (prefetched[i]->terminated()) continue;
      std::fill(with.begin(), with.end(), 0.0f);
      std::fill(without.begin(), without.end(), 0.0f);
      prefetched[i]->mask(with);
      alone[i]->mask(without);
      ASSERT_EQ(with, without) << "matcher " << i << " step " << step;
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < n; ++t)
        if (!std::isinf(with[t])) allowed.push_back(static_cast<int32_t>(t));
      ASSERT_FALSE(allowed.empty());
      const int32_t token = allowed[rng() % allowed.size()];
      ASSERT_TRUE(prefetched[i]->accept(token));
      ASSERT_TRUE(alone[i]->accept(token));
    }
    std::erase_if(jobs, [](GrammarMatcher* m) { return m->terminated(); });
  }
}

TEST_F(GrammarTest, NumbersHaveBoundedDigits) {
  // A walk that takes a digit whenever one is allowed (a model stuck in a digit loop) must
  // still end: at most 16 digits before the point, 16 after it, 2 in the exponent (so that
  // every number fits a double).
  const std::regex number(R"(-?([0-9]+)(\.([0-9]+))?([eE][-+]?([0-9]+))?)");
  for (const char* items :
       {R"({"type": "number"})", R"({"type": "integer"})", R"({"type": "integer", "minimum": 5})",
        R"({"type": "integer", "maximum": -7})",
        R"({"type": "number", "exclusiveMinimum": 0.5})"}) {
    const std::string schema =
        std::string(R"({"type": "array", "minItems": 2, "maxItems": 2, "items": )") + items + "}";
    GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kJsonSchema, schema, {}}));
    std::mt19937 rng(5);
    std::vector<float> logits(static_cast<size_t>(compiler_.n_vocab()));
    std::vector<int32_t> out;
    while (!m.terminated() && out.size() < 200) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      m.mask(logits);
      std::vector<int32_t> allowed, digits;
      for (int32_t t = 0; t < compiler_.n_vocab(); ++t) {
        if (std::isinf(logits[static_cast<size_t>(t)])) continue;
        allowed.push_back(t);
        const std::string piece = tok_->decode(std::vector<int32_t>{t}, true);
        if (!piece.empty() && std::all_of(piece.begin(), piece.end(), ::isdigit))
          digits.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << schema;
      // An exponent or a point now and then, so that those digits are bounded too.
      const std::vector<int32_t>& from = !digits.empty() && rng() % 8 != 0 ? digits : allowed;
      const int32_t token = from[rng() % from.size()];
      ASSERT_TRUE(m.accept(token));
      if (!m.terminated()) out.push_back(token);
    }
    ASSERT_TRUE(m.terminated()) << schema << ": " << tok_->decode(out, true);
    const std::string text = tok_->decode(out, true);
    const json array = json::parse(text);
    ASSERT_EQ(array.size(), 2u) << text;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
         it != std::sregex_iterator(); ++it) {
      EXPECT_LE((*it)[1].length(), 16) << text;
      EXPECT_LE((*it)[3].length(), 16) << text;
      EXPECT_LE((*it)[5].length(), 2) << text;
    }
  }
}

TEST_F(GrammarTest, AMaskIsFilledOncePerPosition) {
  GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kRegex, "ab+c", {}}));
  m.fill();
  const double first = m.fill_seconds();
  EXPECT_GT(first, 0.0);
  m.fill();  // the same position: nothing to do
  EXPECT_EQ(m.fill_seconds(), first);
  EXPECT_TRUE(m.try_fill());
  EXPECT_EQ(m.fill_seconds(), first);
  EXPECT_FALSE(m.accept(byte('c')));  // refused: the position and its mask stay
  EXPECT_TRUE(m.allows(byte('a')));
  EXPECT_TRUE(m.accept(byte('a')));  // a new position: a new mask
  EXPECT_FALSE(m.allows(byte('a')));
  EXPECT_TRUE(m.allows(byte('b')));
}

TEST_F(GrammarTest, TakenTokensAdvanceWithTheNextMask) {
  GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kRegex, "ab+c", {}}));
  EXPECT_FALSE(m.take(byte('b')));  // not allowed first: refused, nothing changes
  EXPECT_TRUE(m.take(byte('a')));
  EXPECT_TRUE(m.allows(byte('b')));  // the next mask is after "a"
  EXPECT_FALSE(m.allows(byte('c')));
  EXPECT_TRUE(m.take(byte('b')));
  EXPECT_TRUE(m.take(byte('c')));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.take(eos_));
  EXPECT_TRUE(m.terminated());  // takes the end-of-generation token first
}

TEST_F(GrammarTest, SpecialTokensNeverSpellText) {
  // "<s>" is a control token: a grammar whose text is "<s>" must be spelt with bytes.
  GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kChoice, {}, {"<s>"}}));
  EXPECT_FALSE(m.allows(tok_->vocab().special().bos));
  EXPECT_TRUE(m.allows(byte('<')));
}

TEST_F(GrammarTest, RandomWalksEndInTextTheConstraintAccepts) {
  const std::regex date("[0-9]{4}-[0-9]{2}-[0-9]{2}");
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const auto choice =
        random_walk({GrammarSpec::Kind::kChoice, {}, {"true", "\"a\" b", "tru", "{\"x"}}, seed);
    ASSERT_TRUE(choice.has_value());
    EXPECT_TRUE(*choice == "true" || *choice == "\"a\" b" || *choice == "tru" || *choice == "{\"x")
        << *choice;
    const auto regex =
        random_walk({GrammarSpec::Kind::kRegex, "[0-9]{4}-[0-9]{2}-[0-9]{2}", {}}, seed);
    ASSERT_TRUE(regex.has_value());
    EXPECT_TRUE(std::regex_match(*regex, date)) << *regex;
    const auto ebnf = random_walk({GrammarSpec::Kind::kEbnf,
                                   R"g(root ::= "(" item ("," item)* ")"
                                       item ::= [a-c]+ | root)g",
                                   {}},
                                  seed);
    ASSERT_TRUE(ebnf.has_value());
    int depth = 0;
    for (const char c : *ebnf) {
      depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      EXPECT_TRUE(depth >= 0 && (c == '(' || c == ')' || c == ',' || (c >= 'a' && c <= 'c')))
          << *ebnf;
    }
    EXPECT_EQ(depth, 0) << *ebnf;
  }
}

TEST_F(GrammarTest, RandomWalksThroughASchemaGiveValidJson) {
  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6},
      "n": {"type": "integer", "minimum": -5, "maximum": 5},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
      "ok": {"type": "boolean"}}, "required": ["name", "n", "tags"]})";
  int walks = 0;
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const auto text = random_walk({GrammarSpec::Kind::kJsonSchema, schema, {}}, seed, 1200);
    if (!text) continue;  // a walk can wander in whitespace; those that end must be valid
    ++walks;
    const json v = json::parse(*text);  // throws (fails the test) when not JSON
    ASSERT_TRUE(v.is_object()) << *text;
    ASSERT_TRUE(v.at("name").is_string()) << *text;
    const std::string name = v["name"].get<std::string>();  // maxLength counts characters
    EXPECT_LE(std::count_if(name.begin(), name.end(), [](char c) { return (c & 0xC0) != 0x80; }), 6)
        << *text;
    EXPECT_TRUE(v.at("n").is_number_integer() && std::abs(v["n"].get<int>()) <= 5) << *text;
    EXPECT_TRUE(v.at("tags").is_array() && !v["tags"].empty() && v["tags"].size() <= 2) << *text;
    for (const auto& [key, unused] : v.items())
      EXPECT_TRUE(key == "name" || key == "n" || key == "tags" || key == "ok") << *text;
  }
  EXPECT_GE(walks, 10);
}

TEST_F(GrammarTest, JsonIsCompactUnlessWhitespaceIsAllowed) {
  // A model that likes whitespace must still finish its JSON: by default there is none to
  // choose (", " and ": " separators only); with any_whitespace, runs are capped, though two may
  // meet where optional parts of the grammar meet.
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "boolean"}, "b": {"type": "array", "items": {"type": "integer"}}},
      "required": ["a", "b"]})";
  for (const bool any : {false, true}) {
    size_t longest = 0;
    int walks = 0;
    for (uint32_t seed = 0; seed < 30; ++seed) {
      GrammarSpec spec{GrammarSpec::Kind::kJsonSchema, schema, {}};
      spec.any_whitespace = any;
      const auto text = random_walk(spec, seed, 1200);
      if (!text) continue;
      ++walks;
      EXPECT_TRUE(json::accept(*text)) << *text;
      size_t run = 0;
      for (const char c : *text) {
        run = (c == ' ' || c == '\n' || c == '\t' || c == '\r') ? run + 1 : 0;
        longest = std::max(longest, run);
      }
    }
    EXPECT_GE(walks, 20);
    if (any) {
      EXPECT_GT(longest, 1u);
      EXPECT_LE(longest, 60u);
    } else {
      EXPECT_LE(longest, 1u);
    }
  }
}

// A calendar date that exists, year 1 or later: what date parsers accept.
bool real_date(const std::string& s) {
  int y = 0, m = 0, d = 0;
  if (s.size() != 10 || std::sscanf(s.c_str(), "%4d-%2d-%2d", &y, &m, &d) != 3) return false;
  const std::chrono::year_month_day date{std::chrono::year(y), std::chrono::month(unsigned(m)),
                                         std::chrono::day(unsigned(d))};
  return y >= 1 && date.ok();
}

TEST_F(GrammarTest, StringFormatsGiveValuesParsersAccept) {
  const std::regex octets(R"((\d+)\.(\d+)\.(\d+)\.(\d+))");
  for (uint32_t seed = 0; seed < 40; ++seed) {
    // The string a walk through {"type": "string", "format": F} writes (nullopt: no end).
    const auto value_of = [&](std::string_view format) -> std::optional<std::string> {
      const auto text = random_walk({GrammarSpec::Kind::kJsonSchema,
                                     fmt::format(R"({{"type": "string", "format": "{}"}})", format),
                                     {}},
                                    seed);
      if (!text) return std::nullopt;
      return json::parse(*text).get<std::string>();
    };
    const auto date = value_of("date");
    ASSERT_TRUE(date.has_value());
    EXPECT_TRUE(real_date(*date)) << *date;
    const auto stamp = value_of("date-time");
    ASSERT_TRUE(stamp.has_value());
    const std::string& value = *stamp;
    EXPECT_TRUE(real_date(value.substr(0, 10)) && value[10] == 'T') << value;
    EXPECT_LT(std::stoi(value.substr(17, 2)), 60) << value;  // no leap second
    // The whole value, fraction and zone included.
    static const std::regex date_time(
        R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}))");
    EXPECT_TRUE(std::regex_match(value, date_time)) << value;
    const auto host = value_of("hostname");
    ASSERT_TRUE(host.has_value());
    static const std::regex hostname(
        R"([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)");
    EXPECT_TRUE(std::regex_match(*host, hostname)) << *host;
    const auto ip = value_of("ipv4");
    ASSERT_TRUE(ip.has_value());
    std::smatch m;
    const std::string& address = *ip;
    ASSERT_TRUE(std::regex_match(address, m, octets)) << address;
    for (size_t i = 1; i <= 4; ++i) {
      EXPECT_LE(std::stoi(m[i].str()), 255) << address;
      EXPECT_TRUE(m[i].length() == 1 || m[i].str()[0] != '0') << address;  // no leading zero
    }
    // An address mail systems take: a local part of at most 64 characters, '@', a domain of
    // labels whose last is letters.
    const auto mail = value_of("email");
    ASSERT_TRUE(mail.has_value());
    const std::string& email = *mail;
    static const std::regex address_form(
        R"(([A-Za-z0-9_%+-]+(\.[A-Za-z0-9_%+-]+)?)@([a-z0-9]([a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,})");
    ASSERT_TRUE(std::regex_match(email, m, address_form)) << email;
    EXPECT_LE(m[1].length(), 64) << email;
    const auto period = value_of("duration");
    ASSERT_TRUE(period.has_value());
    static const std::regex duration(R"(P((\d+Y)?(\d+M)?(\d+D)?(T(\d+H)?(\d+M)?(\d+S)?)?|\d+W))");
    const std::string& span = *period;
    EXPECT_TRUE(std::regex_match(span, duration) && span != "P" && span.back() != 'T') << span;
    const auto link = value_of("uri");
    ASSERT_TRUE(link.has_value());
    static const std::regex uri(
        R"(https?://[a-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)*(\?[A-Za-z0-9._~=&-]+)?)");
    EXPECT_TRUE(std::regex_match(*link, uri)) << *link;
  }
}

TEST_F(GrammarTest, PropertiesComeInTheSchemasOrder) {
  // The schema lists "zeta" before "alpha": so must the output (nlohmann::json would sort).
  for (uint32_t seed = 0; seed < 5; ++seed) {
    const auto text = random_walk({GrammarSpec::Kind::kJsonSchema,
                                   R"({"type": "object", "properties": {
                                       "zeta": {"type": "boolean"}, "alpha": {"type": "boolean"}},
                                       "required": ["alpha", "zeta"]})",
                                   {}},
                                  seed);
    ASSERT_TRUE(text.has_value());
    EXPECT_LT(text->find("zeta"), text->find("alpha")) << *text;
  }
}

TEST_F(GrammarTest, LongLengthLimitsCompile) {
  // Past 128 characters the limits stay XGrammar's own rule (its patterns fail to compile
  // there); either way a walk ends with a value of the right length.
  for (const char* limits : {R"("maxLength": 128)", R"("maxLength": 129)",
                             R"("minLength": 3, "maxLength": 500)", R"("minLength": 200)"}) {
    const std::string schema = std::string(R"({"type": "string", )") + limits + "}";
    const auto text = random_walk({GrammarSpec::Kind::kJsonSchema, schema, {}}, 1, 1600);
    ASSERT_TRUE(text.has_value()) << schema;
    const json limits_json = json::parse(std::string("{") + limits + "}");
    const std::string value = json::parse(*text).get<std::string>();
    const auto chars =
        std::count_if(value.begin(), value.end(), [](char c) { return (c & 0xC0) != 0x80; });
    EXPECT_GE(chars, limits_json.value("minLength", 0)) << schema;
    EXPECT_LE(chars, limits_json.value("maxLength", 1 << 30)) << schema;
  }
}

TEST_F(GrammarTest, LengthLimitedStringsAreWellFormedUtf8) {
  // The toy vocabulary has a token for every byte: walks can try any byte sequence, overlong
  // forms (E0 9F ..) and lone continuation bytes included.
  for (uint32_t seed = 0; seed < 60; ++seed) {
    const auto text = random_walk({GrammarSpec::Kind::kJsonSchema,
                                   R"({"type": "string", "minLength": 2, "maxLength": 9})",
                                   {}},
                                  seed);
    ASSERT_TRUE(text.has_value());
    ASSERT_TRUE(json::accept(*text)) << *text;
    const std::string value = json::parse(*text).get<std::string>();
    const auto chars =
        std::count_if(value.begin(), value.end(), [](char c) { return (c & 0xC0) != 0x80; });
    EXPECT_GE(chars, 2) << *text;
    EXPECT_LE(chars, 9) << *text;
  }
}

TEST_F(GrammarTest, OptionalGroupsHoldingRepetitions) {
  // XGrammar 0.2.8 compiles a schema pattern's (x[0-9]+)? as if only x were optional: it
  // accepts "a55c" for ^a(x[0-9]+)?c$. Our own patterns avoid the shape; a user's pattern still
  // meets it. This test pins the behaviour down: when it fails, the bug is fixed upstream.
  auto takes = [&](const std::string& pattern, const std::string& text) {
    GrammarMatcher m(compiler_.compile({GrammarSpec::Kind::kJsonSchema,
                                        json{{"type", "string"}, {"pattern", pattern}}.dump(),
                                        {}}));
    for (const char c : "\"" + text + "\"")
      if (!m.accept(byte(c))) return false;
    return m.accept(eos_);
  };
  EXPECT_TRUE(takes("^a(x[0-9]+)?c$", "ax5c"));
  EXPECT_TRUE(takes("^a(x[0-9]+)?c$", "a55c")) << "XGrammar's optional-group bug is gone";
  EXPECT_TRUE(takes("^a(|x[0-9]+)c$", "ax5c"));
  EXPECT_TRUE(takes("^a(|x[0-9]+)c$", "ac"));
  EXPECT_FALSE(takes("^a(|x[0-9]+)c$", "a55c"));
}

TEST_F(GrammarTest, BadConstraintsAreErrors) {
  using Kind = GrammarSpec::Kind;
  EXPECT_THROW(compiler_.compile({Kind::kJsonSchema, "{not json", {}}), Error);
  EXPECT_THROW(compiler_.compile({Kind::kJsonSchema, R"({"not": {}})", {}}), Error);
  EXPECT_THROW(compiler_.compile({Kind::kRegex, "(unclosed", {}}), Error);
  EXPECT_THROW(compiler_.compile({Kind::kEbnf, "root ::= missing_rule", {}}), Error);
  EXPECT_THROW(compiler_.compile({Kind::kChoice, {}, {}}), Error);
}

}  // namespace
}  // namespace inferd::structured

namespace inferd::engine {
namespace {

class StructuredEngineTest : public TinyEngineFixture {
 protected:
  // The tiny vocabulary spells "▁a", "b", ..., "u": choices drawn from those.
  std::shared_ptr<const structured::CompiledGrammar> choices(std::vector<std::string> options) {
    std::unique_ptr<Engine> e = engine(1);
    structured::GrammarCompiler compiler(e->tokenizer(), e->model_config().n_vocab, 1);
    return compiler.compile({structured::GrammarSpec::Kind::kChoice, {}, std::move(options)});
  }
};

TEST_F(StructuredEngineTest, OutputIsOneOfTheChoicesAndEndsThere) {
  const std::vector<std::string> options = {"bcd", "fed", "bcdefghij"};
  const auto grammar = choices(options);
  std::vector<std::string> texts[2];  // by grammar thread: off, on
  for (const auto& [spec, thread] : {std::pair{false, GrammarThread::kOff},
                                     {true, GrammarThread::kOff},
                                     {false, GrammarThread::kOn},
                                     {true, GrammarThread::kOn}}) {
    EngineConfig c = config(4);
    if (spec) c.spec.method = SpecMethod::kNgram;
    c.grammar_thread = thread;
    std::unique_ptr<Engine> e = engine(c);
    EXPECT_EQ(e->grammar_masks_overlap(), thread == GrammarThread::kOn);
    std::vector<std::shared_ptr<Collect>> outs;
    for (int i = 0; i < 6; ++i) {
      Request r;
      r.prompt = prompt(10 + i);
      r.max_tokens = 40;
      r.sampling.temperature = i < 3 ? 0.0f : 1.5f;
      r.sampling.seed = 7 + i;
      r.ignore_eos = i == 1;  // ends anyway: nothing may follow a complete choice
      r.logprobs = 0;
      r.grammar = grammar;
      outs.push_back(std::make_shared<Collect>());
      r.output = outs.back();
      if (i == 5) r.more_outputs = {std::make_shared<Collect>(), std::make_shared<Collect>()};
      for (auto& more : r.more_outputs) outs.push_back(std::static_pointer_cast<Collect>(more));
      e->add_request(std::move(r));
    }
    e->run_until_idle();
    for (const auto& out : outs) {
      EXPECT_EQ(out->result_.finish_reason, FinishReason::kStop) << out->text_;
      EXPECT_NE(std::find(options.begin(), options.end(), out->text_), options.end())
          << "spec " << spec << ": " << out->text_;
      // The end-of-generation token is reported with the others.
      ASSERT_EQ(out->tokens_.size(), out->result_.output_tokens.size() + 1);
      EXPECT_TRUE(e->tokenizer().vocab().is_eog(out->tokens_.back()));
      if (!spec) texts[thread == GrammarThread::kOn].push_back(out->text_);
    }
    EXPECT_GT(e->grammar_mask_stats().masks, 0);
    EXPECT_EQ(e->grammar_apply_stats().masks, e->grammar_mask_stats().masks);
  }
  // Masks filled during the forward pass or after it: the same outputs, seed for seed.
  EXPECT_EQ(texts[0], texts[1]);
}

TEST_F(StructuredEngineTest, BeamSearchWithAGrammarIsRefused) {
  std::unique_ptr<Engine> e = engine(4);
  Request r;
  r.prompt = prompt(5);
  r.beam_width = 2;
  r.grammar = choices({"bcd"});
  r.output = std::make_shared<Collect>();
  EXPECT_THROW(e->add_request(std::move(r)), Error);
}

}  // namespace
}  // namespace inferd::engine
