// Jinja tests (`is string`), attribute and item access in jinja2's order, methods of strings
// and dicts, and the default globals range(), dict() and namespace().
#include "tokenizer/jinja/builtins.h"

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

std::string string_arg(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v != nullptr && !v->is_none() ? v->to_string() : "";
}
int64_t int_arg(const Args& a, size_t i, const char* name, int64_t fallback) {
  const Value* v = a.get(i, name);
  return v != nullptr && v->is_int() ? v->as_int() : fallback;
}

// startswith/endswith take one string or a list (Python: a tuple) of them.
bool affix_matches(const std::string& s, const Value* arg, bool starts) {
  if (arg == nullptr) return false;
  List options = arg->is_list() ? arg->as_list() : List{*arg};
  for (const Value& o : options) {
    const std::string p = o.to_string();
    if (p.size() <= s.size() &&
        (starts ? s.compare(0, p.size(), p) : s.compare(s.size() - p.size(), p.size(), p)) == 0)
      return true;
  }
  return false;
}

List strings(const std::vector<std::string>& parts) {
  List out;
  for (const std::string& p : parts) out.push_back(Value(p));
  return out;
}

Value string_method(const std::string& s, const std::string& name, size_t max_size) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return Value(Function([s, left, right](const Args& a) {
      return Value(strip(s, string_arg(a, 0, "chars"), left, right));
    }));
  }
  if (name == "upper") return Value(Function([s](const Args&) { return Value(to_upper(s)); }));
  if (name == "lower") return Value(Function([s](const Args&) { return Value(to_lower(s)); }));
  if (name == "title") return Value(Function([s](const Args&) { return Value(title(s)); }));
  if (name == "capitalize")
    return Value(Function([s](const Args&) { return Value(capitalize(s)); }));
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return Value(Function([s, starts](const Args& a) {
      return Value(affix_matches(s, a.get(0, "prefix"), starts));
    }));
  }
  if (name == "split") {
    return Value(Function([s](const Args& a) {
      return Value(strings(split(s, string_arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1))));
    }));
  }
  if (name == "replace") {
    return Value(Function([s, max_size](const Args& a) {
      return Value(replace(s, string_arg(a, 0, "old"), string_arg(a, 1, "new"),
                           int_arg(a, 2, "count", -1), max_size));
    }));
  }
  if (name == "find") {
    return Value(Function([s](const Args& a) {
      const size_t at = s.find(string_arg(a, 0, "sub"));
      // Python counts characters, not bytes.
      return Value(at == std::string::npos
                       ? int64_t{-1}
                       : static_cast<int64_t>(characters(s.substr(0, at)).size()));
    }));
  }
  if (name == "join") {
    return Value(Function([s, max_size](const Args& a) {
      std::string out;
      const Value* items = a.get(0, "iterable");
      if (items != nullptr && items->is_list()) {
        for (size_t i = 0; i < items->as_list().size(); ++i) {
          out += (i ? s : "") + items->as_list()[i].to_string();
          if (out.size() > max_size) fail("chat template: join() exceeds the size limit");
        }
      }
      return Value(out);
    }));
  }
  return Value::undefined(name);
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items") {
    return Value(Function([self](const Args&) {
      List out;
      for (const auto& [k, v] : self.as_dict().items) out.push_back(Value(List{Value(k), v}));
      return Value(std::move(out));
    }));
  }
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return Value(Function([self, keys](const Args&) {
      List out;
      for (const auto& [k, v] : self.as_dict().items) out.push_back(keys ? Value(k) : v);
      return Value(std::move(out));
    }));
  }
  if (name == "get") {
    return Value(Function([self](const Args& a) {
      const Value* key = a.get(0, "key");
      const Value* found = key != nullptr ? self.as_dict().find(key->to_string()) : nullptr;
      const Value* fallback = a.get(1, "default");
      return found ? *found : (fallback ? *fallback : Value::none());
    }));
  }
  return Value::undefined(name);
}

Value method(const Value& v, const std::string& name, size_t max_size) {
  if (v.is_string()) return string_method(v.as_string(), name, max_size);
  if (v.is_dict() && !v.as_dict().is_namespace) return dict_method(v, name);
  return Value::undefined(name);
}

std::optional<bool> type_test(const std::string& name, const Value& v) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && to_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && to_upper(v.as_string()) == v.as_string();
  return std::nullopt;
}

}  // namespace

std::optional<bool> apply_test(const std::string& name, const Value& v, const Args& args,
                               Location where) {
  if (auto result = type_test(name, v)) return result;
  const Value* other = args.get(0, "other");
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_int()) syntax_error(where, "'" + name + "' test of a " + v.type_name());
    if (name != "divisibleby") return (v.as_int() % 2 == 0) == (name == "even");
    const int64_t n = int_arg(args, 0, "num", 0);
    if (n == 0) syntax_error(where, "divisibleby 0");
    return n == -1 || v.as_int() % n == 0;
  }
  static const std::pair<const char*, const char*> kComparisons[] = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},       {"lessthan", "<"}, {"<", "<"},
      {"le", "<="}, {"<=", "<="},      {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},   {"ge", ">="},      {">=", ">="},      {"in", "in"}};
  for (const auto& [test, op] : kComparisons) {
    if (name != test) continue;
    if (other == nullptr) syntax_error(where, "'" + name + "' test needs a value to compare");
    return compare_op(op, v, *other, where);
  }
  if (name == "sameas")
    return other != nullptr && equal(v, *other) && v.type_name() == other->type_name();
  return std::nullopt;
}

Value attribute(const Value& v, const std::string& name, Location where, size_t max_size) {
  if (v.is_undefined()) undefined_error(v, where);
  Value m = method(v, name, max_size);
  if (!m.is_undefined() || !v.is_dict()) return m;
  const Value* found = v.as_dict().find(name);
  return found != nullptr ? *found : Value::undefined(name);
}

Value item(const Value& v, const Value& key, Location where, size_t max_size) {
  if (v.is_undefined()) undefined_error(v, where);
  if (v.is_dict()) {
    if (key.is_string()) {
      if (const Value* found = v.as_dict().find(key.as_string())) return *found;
      return v.as_dict().is_namespace ? Value::undefined(key.as_string())
                                      : method(v, key.as_string(), max_size);
    }
    return Value::undefined(key.to_string());
  }
  if ((v.is_list() || v.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t k = key.is_bool() ? int64_t{key.as_bool()} : key.as_int();
    if (v.is_list()) {
      const auto n = static_cast<int64_t>(v.as_list().size());
      const int64_t i = k < 0 ? k + n : k;
      return i >= 0 && i < n ? v.as_list()[static_cast<size_t>(i)] : Value::undefined("");
    }
    const std::vector<std::string> chars = characters(v.as_string());
    const auto n = static_cast<int64_t>(chars.size());
    const int64_t i = k < 0 ? k + n : k;
    return i >= 0 && i < n ? Value(chars[static_cast<size_t>(i)]) : Value::undefined("");
  }
  return key.is_string() ? method(v, key.as_string(), max_size) : Value::undefined("");
}

Dict default_globals(size_t max_items) {
  Dict g;
  g.set("range", Value(Function([max_items](const Args& a) {
          int64_t start = 0, stop = int_arg(a, 0, "stop", 0), step = 1;
          if (a.positional.size() >= 2) {
            start = stop;
            stop = int_arg(a, 1, "stop", 0);
            step = int_arg(a, 2, "step", 1);
          }
          if (step == 0) fail("chat template: range() step must not be zero");
          List out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= max_items) fail("chat template: range() exceeds the size limit");
            out.push_back(Value(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
          }
          return Value(std::move(out));
        })));
  g.set("dict", Value(Function([](const Args& a) {
          Dict d;
          for (const auto& [k, v] : a.keywords) d.set(k, v);
          return Value(std::move(d));
        })));
  g.set("namespace", Value(Function([](const Args& a) {
          Dict ns;
          ns.is_namespace = true;
          if (!a.positional.empty() && a.positional[0].is_dict())
            ns.items = a.positional[0].as_dict().items;
          for (const auto& [k, v] : a.keywords) ns.set(k, v);
          return Value(std::move(ns));
        })));
  return g;
}

}  // namespace inferd::jinja
