// Python's string formatting as templates reach it: `'%s: %d' % (a, b)` (and the `format`
// filter, which is the same), and str.format with plain `{}` / `{0}` / `{name}` fields.
// Numeric conversions go through snprintf, whose printf rules are the ones Python copied.
#include "tokenizer/jinja/format.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "util/error.h"
#include "util/utf8.h"

namespace inferd::jinja {
namespace {

std::string printf_number(const std::string& spec, char conversion, const Value& v) {
  char buffer[512];
  const bool integral = conversion == 'd' || conversion == 'i' || conversion == 'x' ||
                        conversion == 'X' || conversion == 'o';
  if (!v.is_number() && !v.is_bool())
    fail("chat template: %{} format: a real number is required, not {}", conversion, v.type_name());
  int n = 0;
  if (integral) {
    // Python truncates a float toward zero for %d (and refuses it for %x and %o).
    if (v.is_float() && conversion != 'd' && conversion != 'i')
      fail("chat template: %{} format: an integer is required, not float", conversion);
    const double d = v.is_bool() ? v.as_bool() : v.as_number();
    if (v.is_float() && (!std::isfinite(d) || std::fabs(d) >= 9.2e18))
      fail("chat template: %d format of a float out of range");
    const long long x = v.is_int() ? v.as_int() : static_cast<long long>(d);
    const char c = conversion == 'i' ? 'd' : conversion;
    n = std::snprintf(buffer, sizeof(buffer), (spec + "ll" + c).c_str(), x);
  } else {
    const double d = v.is_bool() ? v.as_bool() : v.as_number();
    n = std::snprintf(buffer, sizeof(buffer), (spec + conversion).c_str(), d);
  }
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buffer))
    fail("chat template: a % format field is too wide");
  return std::string(buffer, static_cast<size_t>(n));
}

// Pads `text` (already converted) to the width in `spec` ("-" left-aligns).
std::string pad(const std::string& text, const std::string& spec) {
  const bool left = spec.find('-') != std::string::npos;
  size_t i = 0;
  while (i < spec.size() && !std::isdigit(static_cast<unsigned char>(spec[i]))) ++i;
  const size_t width = i < spec.size() ? std::stoul(spec.substr(i)) : 0;
  const size_t length = characters(text).size();
  if (length >= width) return text;
  const std::string fill(width - length, ' ');
  return left ? text + fill : fill + text;
}

// Python's format(value, spec) for the specs fmt reads the same way: strings with
// fill/align/width/precision, integers with sign/zero/width and types d x X o b, floats with an
// explicit type e E f F g G. What Python reads differently (grouping, '=', '%', '#', floats
// without a type, which print as repr) is an error.
std::string format_spec(const Value& v, const std::string& spec) {
  const char type = spec.back();
  const bool float_type = std::string("eEfFgG").find(type) != std::string::npos;
  if (spec.find_first_of(",_=%#{}") != std::string::npos)
    fail("chat template: str.format: format spec '{}' is not supported", spec);
  try {
    const std::string f = "{:" + spec + "}";
    if (v.is_string()) return fmt::format(fmt::runtime(f), v.as_string());
    if (v.is_int() && float_type)
      return fmt::format(fmt::runtime(f), static_cast<double>(v.as_int()));
    if (v.is_int()) return fmt::format(fmt::runtime(f), static_cast<long long>(v.as_int()));
    if (v.is_float() && float_type) return fmt::format(fmt::runtime(f), v.as_number());
  } catch (const fmt::format_error& e) {
    fail("chat template: str.format: format spec '{}' for a {}: {}", spec, v.type_name(), e.what());
  }
  fail("chat template: str.format: format spec '{}' for a {} is not supported", spec,
       v.type_name());
}

// A code point as UTF-8 (%c).
std::string utf8(uint32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args, bool markup) {
  // A tuple spreads over the fields, a dict serves %(name)s, anything else is one argument.
  const List single{args};
  const List& items = args.is_tuple() ? args.as_list() : single;
  const bool mapping = args.is_mapping();
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail("chat template: % format: incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) fail("chat template: % format: bad %(name)");
      arg = args.as_dict().find(format.substr(i + 1, close - i - 1));
      if (arg == nullptr)
        fail("chat template: % format: no key '{}'", format.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string spec = "%";
    while (i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos)
      spec += format[i++];
    while (i < format.size() &&
           (std::isdigit(static_cast<unsigned char>(format[i])) || format[i] == '.'))
      spec += format[i++];
    if (i >= format.size()) fail("chat template: % format: incomplete format");
    const char conversion = format[i];
    if (conversion == '%' && spec == "%") {
      out += '%';
      continue;
    }
    if (arg == nullptr) {
      if (mapping && !args.is_tuple()) {
        arg = &args;  // '%s' % {'a': 1} prints the dict
      } else if (next < items.size()) {
        arg = &items[next++];
      } else {
        fail("chat template: % format: not enough arguments for format string");
      }
    }
    switch (conversion) {
      case 's':
      case 'r': {
        std::string text = conversion == 's' ? arg->to_string() : arg->repr();
        // Markup % x escapes x's text first; the precision then cuts the escaped text.
        if (markup && !(conversion == 's' && arg->is_markup())) text = escape_html(text);
        if (const size_t dot = spec.find('.'); dot != std::string::npos) {
          const size_t precision = std::stoul("0" + spec.substr(dot + 1));
          std::vector<std::string> chars = characters(text);
          if (chars.size() > precision) {
            text.clear();
            for (size_t k = 0; k < precision; ++k) text += chars[k];
          }
          spec.resize(dot);
        }
        out += pad(text, spec);
        break;
      }
      case 'c': {
        std::string c;
        if (arg->is_string() && characters(arg->as_string()).size() == 1) {
          c = arg->as_string();
        } else if (arg->is_int() && arg->as_int() >= 0 && arg->as_int() <= 0x10FFFF) {
          c = utf8(static_cast<uint32_t>(arg->as_int()));
        } else {
          fail("chat template: %c requires an int or a single character");
        }
        out += pad(markup && !arg->is_markup() ? escape_html(c) : c, spec);
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        out += printf_number(spec, conversion, *arg);
        break;
      default:
        fail("chat template: % format: unsupported format character '{}'", conversion);
    }
  }
  if (!mapping && next < items.size() && args.is_tuple())
    fail("chat template: % format: not all arguments converted during string formatting");
  if (!mapping && !args.is_tuple() && next == 0) {
    fail("chat template: % format: not all arguments converted during string formatting");
  }
  return out;
}

std::string str_format(const std::string& format, const Args& args, bool markup) {
  std::string out;
  size_t automatic = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fail("chat template: str.format: single '}}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) fail("chat template: str.format: unmatched '{{' in format");
    // {field!conversion:spec}: the field name ends at the first '!' or ':'.
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    bool as_repr = false;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      const std::string conversion = field.substr(bang + 1);
      if (conversion != "r" && conversion != "s")
        fail("chat template: str.format: conversion '!{}' is not supported", conversion);
      as_repr = conversion == "r";
      field.resize(bang);
    }
    if (field.find_first_of(".[") != std::string::npos)
      fail(
          "chat template: str.format: field '{{{}}}' is not supported (no attribute or item "
          "access)",
          field);
    const Value* arg = nullptr;
    if (field.empty()) {
      if (automatic >= args.positional.size())
        fail("chat template: str.format: replacement index {} out of range", automatic);
      arg = &args.positional[automatic++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t index = std::stoul(field);
      if (index >= args.positional.size())
        fail("chat template: str.format: replacement index {} out of range", index);
      arg = &args.positional[index];
    } else {
      arg = args.keyword(field.c_str());
      if (arg == nullptr) fail("chat template: str.format: no argument named '{}'", field);
    }
    const Value shown = as_repr ? Value(arg->repr()) : *arg;
    const std::string text = spec.empty() ? shown.to_string() : format_spec(shown, spec);
    out += markup && !arg->is_markup() ? escape_html(text) : text;
  }
  return out;
}

}  // namespace inferd::jinja
