// Jinja's built-in filters that chat templates use, with jinja2's argument names and
// defaults (`tojson(indent=2)`, `default(x, true)`, `selectattr('role', 'equalto', 'user')`).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace inferd::jinja {
namespace {

std::string string_arg(const Args& args, size_t i, const char* name, const std::string& fallback) {
  const Value* v = args.get(i, name);
  return v != nullptr && !v->is_none() ? v->to_string() : fallback;
}
int64_t int_arg(const Args& args, size_t i, const char* name, int64_t fallback) {
  const Value* v = args.get(i, name);
  return v != nullptr && v->is_int() ? v->as_int() : fallback;
}
bool bool_arg(const Args& args, size_t i, const char* name) {
  const Value* v = args.get(i, name);
  return v != nullptr && v->truthy();
}

// The items a filter iterates over: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v, const char* filter, Location where) {
  if (v.is_list()) return v.as_list();
  List out;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.as_dict().items) out.push_back(Value(k));
  } else if (v.is_string()) {
    for (std::string& c : characters(v.as_string())) out.push_back(Value(std::move(c)));
  } else if (!v.is_undefined()) {
    syntax_error(where, std::string(filter) + " cannot iterate over a " + v.type_name());
  }
  return out;
}

// `attribute="a.b"` or "0": a path of keys and indices, as jinja2's make_attrgetter follows.
Value follow(Value v, const std::string& path, Location where, size_t max_size) {
  for (const std::string& part : split(path, ".", -1)) {
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = item(v, index ? Value(static_cast<int64_t>(std::atoll(part.c_str()))) : Value(part), where,
             max_size);
  }
  return v;
}

Value length_of(const Value& v, Location where) {
  if (v.is_string()) return Value(static_cast<int64_t>(characters(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  if (v.is_undefined()) return Value(0);
  syntax_error(where, "length of a " + v.type_name());
}

// Sort order of jinja2's sort/min/max: strings compare case-insensitively by default.
bool less(const Value& a, const Value& b, bool case_sensitive, Location where) {
  if (!case_sensitive && a.is_string() && b.is_string())
    return to_lower(a.as_string()) < to_lower(b.as_string());
  return compare_op("<", a, b, where);
}

// select / reject / selectattr / rejectattr: keep items whose test (or truth) matches `keep`.
Value select(const Value& v, const Args& args, bool by_attribute, bool keep, Location where,
             size_t max_size) {
  const size_t first = by_attribute ? 1 : 0;
  Args test_args;
  for (size_t i = first + 1; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  List out;
  for (const Value& x : iterate(v, "select", where)) {
    const Value subject =
        by_attribute ? follow(x, string_arg(args, 0, "attribute", ""), where, max_size) : x;
    bool passed = subject.truthy();
    if (args.positional.size() > first) {
      const std::string test = args.positional[first].to_string();
      auto result = apply_test(test, subject, test_args, where);
      if (!result) syntax_error(where, "unknown test '" + test + "'");
      passed = *result;
    }
    if (passed == keep) out.push_back(x);
  }
  return Value(std::move(out));
}

Value map_items(const Value& v, const Args& args, Location where, size_t max_size) {
  List out;
  const Value* attr = args.keyword("attribute");
  const Value* fallback = args.keyword("default");
  Args rest;
  for (size_t i = 1; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  for (const Value& x : iterate(v, "map", where)) {
    if (attr != nullptr) {
      Value got = follow(x, attr->to_string(), where, max_size);
      out.push_back(got.is_undefined() && fallback != nullptr ? *fallback : got);
      continue;
    }
    if (args.positional.empty()) syntax_error(where, "map needs a filter name or attribute=");
    const std::string filter = args.positional[0].to_string();
    auto mapped = apply_filter(filter, x, rest, where, max_size);
    if (!mapped) syntax_error(where, "unknown filter '" + filter + "'");
    out.push_back(*mapped);
  }
  return Value(std::move(out));
}

Value sorted(const Value& v, const Args& args, Location where, size_t max_size) {
  List out = iterate(v, "sort", where);
  const bool reverse = bool_arg(args, 0, "reverse");
  const bool case_sensitive = bool_arg(args, 1, "case_sensitive");
  const std::string attr = string_arg(args, 2, "attribute", "");
  auto key = [&](const Value& x) { return attr.empty() ? x : follow(x, attr, where, max_size); };
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a), case_sensitive, where)
                   : less(key(a), key(b), case_sensitive, where);
  });
  return Value(std::move(out));
}

Value to_number(const Value& v, bool as_int, const Args& args) {
  const Value* fallback = args.get(0, "default");
  Value dflt = fallback != nullptr ? *fallback : as_int ? Value(0) : Value(0.0);
  double d = 0;
  if (v.is_number() || v.is_bool()) {
    d = v.is_bool() ? v.as_bool() : v.as_number();
    if (v.is_int() && as_int) return v;
  } else if (v.is_string()) {
    const std::string s = strip(v.as_string(), "", true, true);
    char* end = nullptr;
    d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) return dflt;
  } else {
    return dflt;
  }
  if (!as_int) return Value(d);
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
  return Value(static_cast<int64_t>(d));
}

Value rounded(const Value& v, const Args& args, Location where) {
  if (!v.is_number()) syntax_error(where, "round of a " + v.type_name());
  const int64_t precision = std::clamp<int64_t>(int_arg(args, 0, "precision", 0), -20, 20);
  const std::string method = string_arg(args, 1, "method", "common");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_number() * scale;
  // "common" is Python's round(): halves go to the even neighbour.
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
  return Value(r / scale);
}

Value indented(const Value& v, const Args& args) {
  const Value* width_arg = args.get(0, "width");
  const std::string pad =
      width_arg != nullptr && width_arg->is_string()
          ? width_arg->as_string()
          : std::string(
                static_cast<size_t>(std::clamp<int64_t>(int_arg(args, 0, "width", 4), 0, 1000)),
                ' ');
  const bool first = bool_arg(args, 1, "first"), blank = bool_arg(args, 2, "blank");
  std::vector<std::string> lines = split(v.to_string(), "\n", -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if ((i > 0 || first) && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return Value(out);
}

// HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value json(const Value& v, const Args& args) {
  JsonOptions options;
  options.ensure_ascii = bool_arg(args, 0, "ensure_ascii");
  options.indent = static_cast<int>(std::clamp<int64_t>(int_arg(args, 1, "indent", -1), -1, 64));
  options.sort_keys = bool_arg(args, 3, "sort_keys");
  if (const Value* seps = args.get(2, "separators");
      seps && seps->is_list() && seps->as_list().size() == 2) {
    options.item_separator = seps->as_list()[0].to_string();
    options.key_separator = seps->as_list()[1].to_string();
  }
  return Value(to_json(v, options));
}

std::optional<Value> text_filter(const std::string& name, const Value& v, const Args& args,
                                 size_t max_size) {
  if (name == "trim")
    return Value(strip(v.to_string(), string_arg(args, 0, "chars", ""), true, true));
  if (name == "upper") return Value(to_upper(v.to_string()));
  if (name == "lower") return Value(to_lower(v.to_string()));
  if (name == "capitalize") return Value(capitalize(v.to_string()));
  if (name == "title") return Value(title(v.to_string()));
  if (name == "string") return Value(v.to_string());
  if (name == "safe") return v;
  if (name == "replace") {
    return Value(replace(v.to_string(), string_arg(args, 0, "old", ""),
                         string_arg(args, 1, "new", ""), int_arg(args, 2, "count", -1), max_size));
  }
  if (name == "indent") return indented(v, args);
  return std::nullopt;
}

// Filters over the items of a list (or a string's characters, or a dict's keys).
std::optional<Value> list_filter(const std::string& name, const Value& v, const Args& args,
                                 Location where, size_t max_size) {
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = characters(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(out);
    }
    List out = iterate(v, "reverse", where);
    std::reverse(out.begin(), out.end());
    return Value(std::move(out));
  }
  if (name == "sort") return sorted(v, args, where, max_size);
  if (name == "unique") {
    // Strings differing only in case are one, unless case_sensitive=true.
    const bool cs = bool_arg(args, 0, "case_sensitive");
    auto key = [cs](const Value& x) {
      return !cs && x.is_string() ? Value(to_lower(x.as_string())) : x;
    };
    List out;
    for (const Value& x : iterate(v, "unique", where)) {
      bool seen = false;
      for (const Value& y : out) seen = seen || equal(key(x), key(y));
      if (!seen) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (name == "min" || name == "max") {
    List items = iterate(v, name.c_str(), where);
    if (items.empty()) return Value::undefined("");
    const bool cs = bool_arg(args, 0, "case_sensitive");
    Value best = items[0];
    for (const Value& x : items) {
      if (name == "min" ? less(x, best, cs, where) : less(best, x, cs, where)) best = x;
    }
    return best;
  }
  if (name == "sum") {
    const std::string attr = string_arg(args, 0, "attribute", "");
    Value total = args.get(1, "start") ? *args.get(1, "start") : Value(0);
    for (const Value& x : iterate(v, "sum", where))
      total = binary_op("+", total, attr.empty() ? x : follow(x, attr, where, max_size), where,
                        max_size);
    return total;
  }
  if (name == "select" || name == "reject")
    return select(v, args, false, name == "select", where, max_size);
  if (name == "selectattr" || name == "rejectattr")
    return select(v, args, true, name == "selectattr", where, max_size);
  if (name == "map") return map_items(v, args, where, max_size);
  return std::nullopt;
}

}  // namespace

std::optional<Value> apply_filter(const std::string& name, const Value& v, const Args& args,
                                  Location where, size_t max_size) {
  if (auto text = text_filter(name, v, args, max_size)) return text;
  if (name == "length" || name == "count") return length_of(v, where);
  if (name == "tojson") return json(v, args);
  if (name == "first" || name == "last") {
    List items = iterate(v, name.c_str(), where);
    if (items.empty()) return Value::undefined("");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    std::string out, sep = string_arg(args, 0, "d", "");
    const std::string attr = string_arg(args, 1, "attribute", "");
    List items = iterate(v, "join", where);
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? sep : "") +
             (attr.empty() ? items[i] : follow(items[i], attr, where, max_size)).to_string();
      if (out.size() > max_size) syntax_error(where, "join exceeds the size limit");
    }
    return Value(out);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    if (v.is_undefined() || (bool_arg(args, 1, "boolean") && !v.truthy()))
      return fallback != nullptr ? *fallback : Value("");
    return v;
  }
  if (name == "list") return Value(iterate(v, "list", where));
  if (name == "items") {
    List out;
    if (v.is_dict()) {
      for (const auto& [k, val] : v.as_dict().items) out.push_back(Value(List{Value(k), val}));
    }
    return Value(std::move(out));
  }
  if (name == "int" || name == "float") return to_number(v, name == "int", args);
  if (name == "abs") {
    if (v.is_int() && v.as_int() != INT64_MIN)
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    syntax_error(where, "abs of a " + v.type_name());
  }
  if (name == "round") return rounded(v, args, where);
  return list_filter(name, v, args, where, max_size);
}

}  // namespace inferd::jinja
