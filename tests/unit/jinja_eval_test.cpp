// Jinja evaluation: Python's printing of values, HF's tojson, undefined values, scoping,
// macros, and the limits that stop hostile templates.
#include <gtest/gtest.h>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

std::string run(const std::string& source, const RenderLimits& limits = {}) {
  Dict globals;
  Dict message;
  message.set("role", Value("user"));
  message.set("content", Value("  hi  "));
  globals.set("m", Value(message));
  globals.set("xs", Value(List{Value(3), Value(1), Value(2)}));
  globals.set("none_value", Value::none());
  return render(parse_template(source), globals, limits);
}

std::string error_of(const std::string& source, const RenderLimits& limits = {}) {
  try {
    run(source, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaEval, PrintsValuesAsPython) {
  EXPECT_EQ(run("{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ -0.0 }}"),
            "None True 1.0 0.30000000000000004 1e+16 -0.0");
  EXPECT_EQ(run("{{ ['a', \"it's\", 'q\"\\'', 'x\\ny', none, 1.5] }}"),
            R"(['a', "it's", 'q"\'', 'x\ny', None, 1.5])");
  EXPECT_EQ(run("{{ m }}"), "{'role': 'user', 'content': '  hi  '}");
}

TEST(JinjaEval, ToJsonAsHuggingFaceDefinesIt) {
  EXPECT_EQ(run("{{ m | tojson }}"), R"({"role": "user", "content": "  hi  "})");
  EXPECT_EQ(run("{{ 'é<>&\"\\n' | tojson }}"), R"("é<>&\"\n")");  // no HTML escaping
  EXPECT_EQ(run("{{ 'é' | tojson(ensure_ascii=true) }}"), R"("\u00e9")");
  EXPECT_EQ(run("{{ xs | tojson(indent=1) }}"), "[\n 3,\n 1,\n 2\n]");
  EXPECT_EQ(run("{{ {'b': 1, 'a': none} | tojson(sort_keys=true) }}"), R"({"a": null, "b": 1})");
  EXPECT_NE(error_of("{{ undefined_name | tojson }}").find("tojson cannot write"),
            std::string::npos);
}

TEST(JinjaEval, UndefinedBehavesAsJinjaDefault) {
  EXPECT_EQ(run("[{{ nope }}] {{ nope is defined }} {{ nope | length }} {{ nope ~ 'x' }}"),
            "[] False 0 x");
  EXPECT_EQ(run("[{{ m.missing }}] [{{ none_value.x }}] {% for x in nope %}x{% endfor %}"),
            "[] [] ");
  EXPECT_NE(error_of("{{ nope.x }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ m.missing.x }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ nope + 1 }}").find("'nope' is undefined"), std::string::npos);
}

TEST(JinjaEval, ScopesFollowJinja2) {
  // A loop body's `set` stays in the loop; an `if` body's does not.
  EXPECT_EQ(run("{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(run("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  EXPECT_EQ(run("{% set ns = namespace(n=0) %}{% for i in xs %}{% set ns.n = ns.n + i %}"
                "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(run("{% macro box(x, pad='.') %}{{ pad }}{{ x }}{{ pad }}{% endmacro %}"
                "{{ box(1) }}{{ box(2, '|') }}{{ box(pad='*', x=3) }}"),
            ".1.|2|*3*");
  EXPECT_EQ(run("{% set s %}{{ m.role }}!{% endset %}{{ s }}"), "user!");
}

TEST(JinjaEval, ArithmeticEdges) {
  EXPECT_EQ(run("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 62 }} {{ 2 ** -1 }}"),
            "-4 2 -2 4611686018427387904 0.5");
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ -9223372036854775807 - 2 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 1 % 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' - 1 }}").find("cannot apply '-' to a string and a int"),
            std::string::npos);
}

TEST(JinjaEval, LimitsAreEnforced) {
  RenderLimits small;
  small.max_output_bytes = 100;
  small.max_steps = 1000;
  small.max_call_depth = 3;
  EXPECT_NE(error_of("{% for i in xs %}{{ 'x' * 40 }}{% endfor %}", small).find("output exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 101 }}", small).find("size limit"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc' | replace('', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}", small)
                .find("size limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(6) %}{% for j in range(6) %}{% for k in range(6) %}"
                     "{% endfor %}{% endfor %}{% endfor %}",
                     small)
                .find("too many steps"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", small)
                .find("nested too deeply"),
            std::string::npos);
}

}  // namespace
}  // namespace inferd::jinja
