// Jinja lexer and parser: whitespace control under HF's settings, tag splitting that respects
// strings and brackets, token locations, escapes and numbers, and operator precedence.
#include <gtest/gtest.h>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

std::string render_text(const std::string& source) {
  Dict globals;
  globals.set("t", Value(true));
  globals.set("xs", Value(List{Value(3), Value(1), Value(2)}));
  return render(parse_template(source), globals);
}

std::string error_text(const std::string& source) {
  try {
    render_text(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLexer, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render_text("  {% if t %}\n  yes\n  {% endif %}\nend"), "  yes\nend");
  // lstrip only where the tag starts its line; text after an expression stays.
  EXPECT_EQ(render_text("{{ 1 }}  {% if t %}y{% endif %}"), "1  y");
  EXPECT_EQ(render_text("a  {% if t %}y{% endif %}"), "a  y");
  EXPECT_EQ(render_text("    {%+ if t %}kept{% endif %}"), "    kept");
  EXPECT_EQ(render_text("{% if t +%}\nnewline kept{% endif %}"), "\nnewline kept");
  EXPECT_EQ(render_text("  {# comment #}\nafter"), "after");
  // One final newline of the template goes; CRLF counts as a newline.
  EXPECT_EQ(render_text("x\n"), "x");
  EXPECT_EQ(render_text("x\n\n"), "x\n");
  EXPECT_EQ(render_text("{% if t %}\r\na\r\n{% endif %}\r\n"), "a\n");
}

TEST(JinjaLexer, MinusSignsStripAllWhitespace) {
  EXPECT_EQ(render_text("a \n\t {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render_text("a\n  {%- if t -%}\n  b\n{%- endif %}"), "ab");
  EXPECT_EQ(render_text("x {#- gone -#} y"), "xy");
}

TEST(JinjaLexer, TagEndsOutsideStringsAndBrackets) {
  EXPECT_EQ(render_text("{{ '}}' }}|{{ \"%}\" }}|{% if '%}' %}ok{% endif %}"), "}}|%}|ok");
  EXPECT_EQ(render_text("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");
  EXPECT_EQ(render_text("{ not a tag } {{ '{' }}"), "{ not a tag } {");
}

TEST(JinjaLexer, LocationsPointAtTheToken) {
  const Lexed lexed = split_template("ab\ncd {{ x +\n   y }}");
  ASSERT_EQ(lexed.segments.size(), 2u);
  EXPECT_EQ(lexed.segments[1].where.line, 2);
  EXPECT_EQ(lexed.segments[1].where.column, 4);
  const std::vector<Token> tokens = tokenize_tag(lexed.segments[1], lexed.lines);
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[2].text, "y");
  EXPECT_EQ(tokens[2].where.line, 3);
  EXPECT_EQ(tokens[2].where.column, 4);
}

TEST(JinjaLexer, StringEscapesAndNumbers) {
  EXPECT_EQ(render_text(R"({{ 'a\nb\t\'\"\\' }})"), "a\nb\t'\"\\");
  EXPECT_EQ(render_text(R"({{ '\u00e9\x41\101\U0001F642' }})"), "éAA🙂");
  EXPECT_EQ(render_text(R"({{ '\d' }})"), "\\d");  // unknown escapes keep the backslash
  EXPECT_EQ(render_text("{{ 'a' \"b\" }}"), "ab");
  EXPECT_EQ(render_text("{{ 1_000 }} {{ 2.5e2 }} {{ 1e-3 }} {{ 42 }}"), "1000 250.0 0.001 42");
  EXPECT_NE(error_text(R"({{ '\xZZ' }})").find("bad \\x escape"), std::string::npos);
}

TEST(JinjaParser, PrecedenceFollowsJinja2) {
  EXPECT_EQ(render_text("{{ 2 * 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}"), "18 4 64");
  EXPECT_EQ(render_text("{{ 'a' + 'b' ~ 'c' }} {{ 1 + 2 is number }} {{ -3|abs }}"), "abc 2 3");
  EXPECT_EQ(render_text("{{ not 1 in xs }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "False True False");
  EXPECT_EQ(render_text("{{ 1 if t else 2 }} {{ 'x' if not t else 'y' if t else 'z' }}"), "1 y");
  EXPECT_EQ(render_text("{% for x in xs if x > 1 %}{{ x }}{% endfor %}"), "32");
  EXPECT_EQ(render_text("{{ 9 is divisibleby 3 }} {{ 3 is not divisibleby(2) }}"), "True True");
}

TEST(JinjaParser, ErrorsSayWhatWasExpected) {
  EXPECT_NE(error_text("{% if t %}a{% else %}b{% else %}c{% endif %}").find("two {% else %}"),
            std::string::npos);
  EXPECT_NE(error_text("{% for x xs %}{% endfor %}").find("expected 'in'"), std::string::npos);
  EXPECT_NE(error_text("{% endif %}").find("unknown or misplaced statement 'endif'"),
            std::string::npos);
  EXPECT_NE(error_text("{% for x in xs %}{% endfor x %}").find("expected the end of the tag"),
            std::string::npos);
  EXPECT_NE(error_text("{{ f(a=1, 2) }}").find("positional argument after a keyword"),
            std::string::npos);
  EXPECT_NE(error_text("{{ [1, 2 }}").find("expected ','"), std::string::npos);
  EXPECT_NE(error_text("{% macro m() %}{% break %}{% endmacro %}").find("outside a for loop"),
            std::string::npos);
}

}  // namespace
}  // namespace inferd::jinja
