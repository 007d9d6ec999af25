#!/usr/bin/env python3
"""Fixes applied to XGrammar's source before scripts/fetch-xgrammar builds it.

Each fix names the text it changes and must find it exactly as often as expected, so a new
XGrammar version that moved the code fails the build loudly instead of building unfixed.
Bump PATCHES in scripts/fetch-xgrammar whenever this list changes.

Usage: xgrammar-fixes.py SOURCE_DIR
"""
import re
import sys

# Longest integer part, fraction and exponent of a JSON number the grammar lets through. A
# small model sampled at a high temperature can write digits until max_tokens cuts the JSON
# off; llama.cpp's schema grammars bound numbers the same way. 16 digits is the precision of
# a double (and of a JavaScript number), which is what most JSON readers parse numbers into;
# with two exponent digits every number the grammar allows fits a double (below 1e116), where
# readers like nlohmann::json refuse 1e500 as an overflow.
MAX_INT_DIGITS = 16
MAX_FRACTION_DIGITS = 16
MAX_EXPONENT_DIGITS = 2


def fix(text, old, new, count=1, regex=False):
    found = len(re.findall(old, text)) if regex else text.count(old)
    if found != count:
        sys.exit(f"xgrammar-fixes: expected {count} of {old!r}, found {found}")
    return re.sub(old, new, text) if regex else text.replace(old, new)


def main():
    path = sys.argv[1] + "/cpp/json_schema_converter.cc"
    text = open(path).read()

    # 1. Strings with minLength/maxLength let raw control characters (TAB, NUL, ...) into the
    # JSON string, which JSON forbids (RFC 8259 section 7) and parsers reject. The other string
    # rules exclude U+0000-U+001F already. Found by tests/unit/structured_output_test.cpp.
    text = fix(text,
               "builder_.AddCharacterClass({{'\"', '\"'}, {'\\\\', '\\\\'}, {'\\r', '\\r'}, "
               "{'\\n', '\\n'}}, true);",
               "builder_.AddCharacterClass({{0, 0x1f}, {'\"', '\"'}, {'\\\\', '\\\\'}}, true);")

    # 2. Unbounded numbers: at most MAX_INT_DIGITS digits before the point, MAX_FRACTION_DIGITS
    # after it and MAX_EXPONENT_DIGITS in the exponent.
    # 2a. The grammar rules of an integer or number with no minimum or maximum (also the
    # numbers inside untyped values and json_object output): "[1-9] [0-9]*" twice.
    text = fix(text, "builder_.AddCharacterClassStar({{'0', '9'}})",
               f"Repeat(rule_name + \"_more_digits\", builder_.AddCharacterClass({{{{'0', '9'}}}}), "
               f"0, {MAX_INT_DIGITS - 1})",
               count=2)
    # The fraction and the exponent shared one "[0-9]+" rule; each gets its own bound.
    text = fix(text,
               "Repeat(rule_name + \"_digits\", builder_.AddCharacterClass({{'0', '9'}}), 1, -1);",
               f"Repeat(rule_name + \"_digits\", builder_.AddCharacterClass({{{{'0', '9'}}}}), 1, "
               f"{MAX_FRACTION_DIGITS});\n"
               f"  int32_t exponent_digits = Repeat(rule_name + \"_exponent_digits\", "
               f"builder_.AddCharacterClass({{{{'0', '9'}}}}), 1, {MAX_EXPONENT_DIGITS});")
    text = fix(text,
               r"(Choice\(\{Empty\(\), builder_\.AddCharacterClass\(\{\{'\+', '\+'\}, "
               r"\{'-', '-'\}\}\)\}\),\s*)one_or_more_digits\}",
               r"\1exponent_digits}", regex=True)
    # 2b. The regular expressions of half-bounded integer and number ranges.
    text = fix(text, 'return "^-?\\\\d+$";', f'return "^-?\\\\d{{1,{MAX_INT_DIGITS}}}$";')
    text = fix(text, 'parts.push_back("[1-9]\\\\d*");',
               f'parts.push_back("[1-9]\\\\d{{0,{MAX_INT_DIGITS - 1}}}");')
    text = fix(text, 'parts.push_back("-[1-9]\\\\d*");',
               f'parts.push_back("-[1-9]\\\\d{{0,{MAX_INT_DIGITS - 1}}}");')
    text = fix(text, 'std::to_string(len) + ",}");',
               f'std::to_string(len) + "," + std::to_string(std::max(len, {MAX_INT_DIGITS - 1})) '
               '+ "}");')
    text = fix(text, 'return "^-?\\\\d+(\\\\.\\\\d{1,"',
               f'return "^-?\\\\d{{1,{MAX_INT_DIGITS}}}(\\\\.\\\\d{{1,"')

    open(path, "w").write(text)


if __name__ == "__main__":
    main()
