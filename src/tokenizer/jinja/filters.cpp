// Jinja's built-in filters on single values (text, numbers, JSON), with jinja2's argument
// names and defaults (`tojson(indent=2)`, `default(x, true)`, `replace(a, b, count)`), and the
// filter dispatch. Sequence filters are in filters_seq.cpp.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/filter_helpers.h"
#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"
#include "util/error.h"

namespace inferd::jinja {

std::string string_arg(const Args& args, size_t i, const char* name, const std::string& fallback) {
  const Value* v = args.get(i, name);
  return v != nullptr && !v->is_none() ? v->to_string() : fallback;
}
int64_t int_arg(const Args& args, size_t i, const char* name, int64_t fallback) {
  const Value* v = args.get(i, name);
  if (v == nullptr || v->is_none()) return fallback;
  if (v->is_bool()) return v->as_bool();
  if (!v->is_int())
    fail("chat template: argument '{}' must be an int, not {}", name, v->type_name());
  return v->as_int();
}
bool bool_arg(const Args& args, size_t i, const char* name, bool fallback) {
  const Value* v = args.get(i, name);
  return v != nullptr ? v->truthy() : fallback;
}

namespace {

// soft_str(): a string stays as it is (Markup too), anything else becomes str(x).
Value soft_str(const Value& v) {
  return v.is_string() ? v : Value(v.to_string());
}
Value same_flavor(const Value& like, std::string text) {
  return like.is_markup() ? Value::markup(std::move(text)) : Value(std::move(text));
}

Value length_of(const Value& v, Location where) {
  if (v.is_string()) return Value(static_cast<int64_t>(characters(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_mapping()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  if (v.is_undefined()) return Value(0);
  syntax_error(where, "object of type '" + v.type_name() + "' has no len()");
}

// Python's numeric literal rules for int() and float() of a string: surrounding whitespace,
// a sign, and single underscores between digits; no hex (strtod would take "0x10").
std::optional<std::string> python_number_text(const std::string& text, bool integral) {
  const std::string s = strip(text, "", true, true);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    const bool ok = std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' ||
                    (!integral && std::isalpha(static_cast<unsigned char>(c)) && c != 'x' &&
                     c != 'X' && c != 'p' && c != 'P') ||
                    (!integral && c == '.');
    if (!ok) return std::nullopt;
    out += c;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// jinja2's int filter: int(x) (int(str, base) for strings), else int(float(x)), else default.
Value to_int(const Value& v, const Args& args) {
  const Value* fallback = args.get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value(0);
  if (int_arg(args, 1, "base", 10) != 10) fail("chat template: int(base=...) is not supported");
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  double d = 0;
  if (v.is_float()) {
    d = v.as_number();
  } else if (v.is_string()) {
    if (auto text = python_number_text(v.as_string(), true)) {
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(text->c_str(), &end, 10);
      if (end == text->c_str() + text->size()) {
        if (errno == ERANGE) fail("chat template: int() of {} does not fit 64 bits", *text);
        return Value(static_cast<int64_t>(n));
      }
    }
    auto text = python_number_text(v.as_string(), false);
    char* end = nullptr;
    if (!text) return dflt;
    d = std::strtod(text->c_str(), &end);
    if (end != text->c_str() + text->size()) return dflt;
  } else {
    return dflt;
  }
  if (std::isnan(d)) return dflt;  // int(nan) is a ValueError, which jinja2 catches
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18)
    fail("chat template: int() of {} is out of range", d);
  return Value(static_cast<int64_t>(d));
}

Value to_float(const Value& v, const Args& args) {
  const Value* fallback = args.get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value(0.0);
  if (v.is_number() || v.is_bool()) {
    return Value(v.is_bool() ? static_cast<double>(v.as_bool()) : v.as_number());
  }
  if (!v.is_string()) return dflt;
  const auto text = python_number_text(v.as_string(), false);
  if (!text) return dflt;
  char* end = nullptr;
  const double d = std::strtod(text->c_str(), &end);
  if (end != text->c_str() + text->size()) return dflt;
  return Value(d);
}

Value rounded(const Value& v, const Args& args, Location where) {
  if (!v.is_number() && !v.is_bool()) syntax_error(where, "round of a " + v.type_name());
  const int64_t precision = std::clamp<int64_t>(int_arg(args, 0, "precision", 0), -20, 20);
  const std::string method = string_arg(args, 1, "method", "common");
  if (method != "common" && method != "ceil" && method != "floor")
    syntax_error(where, "round method must be 'common', 'ceil' or 'floor'");
  // round(int, n) stays an int in Python.
  if (method == "common" && !v.is_float() && precision >= 0) return v;
  if (method == "common" && precision > 0) {
    // Python rounds the exact binary value in decimal (round(2.675, 2) is 2.67), as printf does.
    const std::string text = fmt::format("{:.{}f}", v.as_number(), precision);
    return Value(std::strtod(text.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = (v.is_bool() ? v.as_bool() : v.as_number()) * scale;
  // "common" is Python's round(): halves go to the even neighbour.
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
  return Value(r / scale);
}

// jinja2's indent: lines after the first get `width` (spaces or a string); blank lines only
// with blank=True; the first line too with first=True.
Value indented(const Value& v, const Args& args) {
  const Value* width_arg = args.get(0, "width");
  const std::string pad =
      width_arg != nullptr && width_arg->is_string()
          ? width_arg->as_string()
          : std::string(
                static_cast<size_t>(std::clamp<int64_t>(int_arg(args, 0, "width", 4), 0, 1000)),
                ' ');
  const bool first = bool_arg(args, 1, "first"), blank = bool_arg(args, 2, "blank");
  const std::vector<std::string> lines = splitlines(v.to_string() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  if (first) out = pad + out;
  return same_flavor(v, out);
}

Value centered(const Value& v, const Args& args) {
  const std::string s = v.to_string();
  const auto width =
      static_cast<size_t>(std::clamp<int64_t>(int_arg(args, 0, "width", 80), 0, 10000));
  const size_t length = characters(s).size();
  if (length >= width) return Value(s);
  const size_t margin = width - length;
  const size_t left = margin / 2 + (margin & width & 1);  // CPython's str.center
  return Value(std::string(left, ' ') + s + std::string(margin - left, ' '));
}

// HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value json(const Value& v, const Args& args) {
  JsonOptions options;
  options.ensure_ascii = bool_arg(args, 0, "ensure_ascii");
  if (const Value* indent = args.get(1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent_text = indent->as_string();
      if (options.indent_text.empty()) options.indent = 0;
    } else {
      options.indent = static_cast<int>(std::clamp<int64_t>(int_arg(args, 1, "indent", 0), 0, 64));
    }
  }
  options.sort_keys = bool_arg(args, 3, "sort_keys");
  if (const Value* seps = args.get(2, "separators"); seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() ||
        !seps->as_list()[1].is_string())
      fail("chat template: tojson separators must be two strings");
    options.item_separator = seps->as_list()[0].as_string();
    options.key_separator = seps->as_list()[1].as_string();
    if (options.item_separator.empty())
      fail("chat template: an empty tojson item separator is not supported");
  }
  return Value(to_json(v, options));
}

std::optional<Value> text_filter(const std::string& name, const Value& v, const Args& args,
                                 size_t max_size) {
  if (name == "trim") {
    const Value* chars = args.get(0, "chars");
    const Value s = soft_str(v);
    if (chars != nullptr && !chars->is_none() && chars->to_string().empty()) return s;
    return same_flavor(s, strip(s.as_string(), string_arg(args, 0, "chars", ""), true, true));
  }
  if (name == "upper") return same_flavor(v, to_upper(v.to_string()));
  if (name == "lower") return same_flavor(v, to_lower(v.to_string()));
  if (name == "capitalize") return same_flavor(v, capitalize(v.to_string()));
  if (name == "title") return same_flavor(v, jinja_title(v.to_string()));
  if (name == "string") return soft_str(v);
  if (name == "safe") return v.is_markup() ? v : Value::markup(v.to_string());
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (v.is_markup() && name != "forceescape") return v;
    return Value::markup(escape_html(v.to_string()));
  }
  if (name == "replace") {
    // Without autoescape, str(s).replace(old, new, count); count None replaces all.
    const int64_t count = int_arg(args, 2, "count", -1);
    const std::string old_text = string_arg(args, 0, "old", "");
    return Value(replace(v.to_string(), old_text, string_arg(args, 1, "new", ""), count, max_size));
  }
  if (name == "indent") return indented(v, args);
  if (name == "center") return centered(v, args);
  if (name == "wordcount") return Value(word_count(v.to_string()));
  if (name == "format") {
    Value format_args;
    if (!args.keywords.empty()) {
      if (!args.positional.empty())
        fail("chat template: format filter takes positional or keyword arguments, not both");
      Dict d;
      for (const auto& [k, x] : args.keywords) d.set(k, x);
      format_args = Value(std::move(d));
    } else {
      format_args = Value::tuple(args.positional);
    }
    const Value s = soft_str(v);
    return same_flavor(s, percent_format(s.as_string(), format_args, s.is_markup()));
  }
  return std::nullopt;
}

// Filters jinja2 has that no chat template here needs: an error says so, rather than
// "unknown filter".
bool unsupported(const std::string& name) {
  static const char* const kNames[] = {"filesizeformat", "groupby",   "pprint",   "random",
                                       "slice",          "striptags", "truncate", "urlencode",
                                       "urlize",         "wordwrap",  "xmlattr"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

}  // namespace

std::optional<Value> apply_filter(const std::string& name, const Value& v, const Args& args,
                                  Location where, size_t max_size) {
  if (auto text = text_filter(name, v, args, max_size)) return text;
  if (name == "length" || name == "count") return length_of(v, where);
  if (name == "tojson") return json(v, args);
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    if (v.is_undefined() || (bool_arg(args, 1, "boolean") && !v.truthy()))
      return fallback != nullptr ? *fallback : Value("");
    return v;
  }
  if (name == "int") return to_int(v, args);
  if (name == "float") return to_float(v, args);
  if (name == "abs") {
    if (v.is_int() && v.as_int() != INT64_MIN)
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_bool()) return Value(int64_t{v.as_bool()});
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    syntax_error(where, "bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") return rounded(v, args, where);
  if (name == "attr") {
    // The sandbox's getattr: methods and namespace attributes, never a dict's keys.
    const std::string attr = string_arg(args, 0, "name", "");
    if (v.is_namespace()) return attribute(v, attr, where, max_size);
    if (v.is_undefined()) return v;
    return method(v, attr, max_size).value_or(missing_attribute(v, attr));
  }
  if (auto result = sequence_filter(name, v, args, where, max_size)) return result;
  if (unsupported(name)) syntax_error(where, "the '" + name + "' filter is not supported");
  return std::nullopt;
}

}  // namespace inferd::jinja
