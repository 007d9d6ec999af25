// Jinja tests (`is string`), attribute and item access in jinja2's order (with the sandbox's
// refusals), and the default globals range(), dict(), namespace() and joiner().
#include "tokenizer/jinja/builtins.h"

#include <algorithm>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

// jinja2's sandbox refuses range() of more items (MAX_RANGE).
constexpr size_t kMaxRange = 100000;

int64_t int_arg(const Args& a, size_t i, const char* name, int64_t fallback) {
  const Value* v = a.get(i, name);
  if (v == nullptr) return fallback;
  if (!v->is_int() && !v->is_bool())
    fail("chat template: '{}' must be an integer, not {}", name, v->type_name());
  return v->is_bool() ? int64_t{v->as_bool()} : v->as_int();
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
  if (name == "mapping") return v.is_mapping();
  // jinja2: len() and __getitem__ work (dict views have no __getitem__; Undefined has both).
  if (name == "sequence")
    return (v.is_list() && !v.is_view()) || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "iterable")
    return v.is_list() || v.is_string() || v.is_mapping() || v.is_generator() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return v.is_markup();
  if (name == "lower" || name == "upper") return is_cased(v.to_string(), name == "lower");
  return std::nullopt;
}

}  // namespace

std::optional<bool> apply_test(const std::string& name, const Value& v, const Args& args,
                               Location where) {
  if (auto result = type_test(name, v)) return result;
  const Value* other = args.get(0, "other");
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool())
      syntax_error(where, "'" + name + "' test of a " + v.type_name() + " is not supported");
    const int64_t x = v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
    if (name != "divisibleby") return (x % 2 == 0) == (name == "even");
    const int64_t n = int_arg(args, 0, "num", 0);
    if (n == 0) syntax_error(where, "divisibleby 0");
    return n == -1 || x % n == 0;
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
  if (name == "sameas") {
    // Python's `is`: the same object for containers; None, True and False are singletons.
    if (other == nullptr) syntax_error(where, "'sameas' test needs a value");
    if (v.is_none() || v.is_bool() || other->is_none() || other->is_bool())
      return v.type_name() == other->type_name() && equal(v, *other);
    if (v.is_list() && other->is_list()) return &v.as_list() == &other->as_list();
    if (v.is_dict() && other->is_dict()) return &v.as_dict() == &other->as_dict();
    syntax_error(where, "'sameas' of a " + v.type_name() + " is not supported (identity)");
  }
  return std::nullopt;
}

Value attribute(const Value& v, const std::string& name, Location where, size_t max_size) {
  if (v.is_undefined()) undefined_error(v, where);
  if (v.is_namespace()) {
    const Value* found = v.as_dict().find(name);
    return found != nullptr ? *found
                            : Value::missing("'Namespace object' has no attribute '" + name + "'");
  }
  // Python's getattr first (methods), then the item, as jinja2's sandbox getattr.
  if (std::optional<Value> m = method(v, name, max_size)) return *m;
  if (!v.is_mapping()) return missing_attribute(v, name);
  const Value* found = v.as_dict().find(name);
  return found != nullptr ? *found
                          : Value::missing("'dict object' has no attribute '" + name + "'");
}

Value item(const Value& v, const Value& key, Location where, size_t max_size) {
  if (v.is_undefined()) undefined_error(v, where);
  const std::string type = v.is_none() ? "None" : "'" + v.type_name() + " object'";
  if (v.is_dict()) {
    if (key.is_string()) {
      if (const Value* found = v.as_dict().find(key.as_string())) return *found;
      // jinja2 falls back to getattr for a string key
      if (v.is_mapping()) {
        if (std::optional<Value> m = method(v, key.as_string(), max_size)) return *m;
      }
      return Value::missing(type + " has no attribute '" + key.as_string() + "'");
    }
    const bool hashable =
        !(key.is_list() && !key.is_tuple()) && !key.is_dict() && !key.is_generator();
    if (v.is_mapping() && hashable) {
      if (const Value* found = v.as_dict().find(key)) return *found;
    }
    return Value::missing(type + " has no element " + key.repr());
  }
  if (((v.is_list() && !v.is_view()) || v.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t k = key.is_bool() ? int64_t{key.as_bool()} : key.as_int();
    if (v.is_list()) {
      const auto n = static_cast<int64_t>(v.as_list().size());
      const int64_t i = k < 0 ? k + n : k;
      if (i >= 0 && i < n) return v.as_list()[static_cast<size_t>(i)];
    } else {
      const std::vector<std::string> chars = characters(v.as_string());
      const auto n = static_cast<int64_t>(chars.size());
      const int64_t i = k < 0 ? k + n : k;
      if (i >= 0 && i < n) {
        std::string c = chars[static_cast<size_t>(i)];
        return v.is_markup() ? Value::markup(std::move(c)) : Value(std::move(c));
      }
    }
    return Value::missing(type + " has no element " + key.repr());
  }
  if (key.is_string())
    return method(v, key.as_string(), max_size).value_or(missing_attribute(v, key.as_string()));
  return Value::missing(type + " has no element " + key.repr());
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
            if (out.size() >= kMaxRange)
              fail("chat template: range() is too big (the sandbox allows {} items)", kMaxRange);
            out.emplace_back(i);
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
          }
          return Value(std::move(out), Flavor::kRange);
        })));
  // HF's dict(): Python's dict(mapping or pairs, **kwargs).
  auto make_dict = [](const Args& a) {
    Dict d;
    if (!a.positional.empty()) {
      const Value& from = a.positional[0];
      if (a.positional.size() > 1) fail("chat template: dict() takes at most 1 argument");
      if (from.is_mapping()) {
        d.items = from.as_dict().items;
      } else {
        for (const Value& pair : iterate(from, "dict()")) {
          if (!pair.is_list() || pair.as_list().size() != 2)
            fail("chat template: dict() takes pairs of a key and a value");
          d.set(pair.as_list()[0].as_string(), pair.as_list()[1]);
        }
      }
    }
    for (const auto& [k, v] : a.keywords) d.set(k, v);
    return d;
  };
  g.set("dict", Value(Function([make_dict](const Args& a) { return Value(make_dict(a)); })));
  g.set("namespace", Value(Function([make_dict](const Args& a) {
          Dict ns = make_dict(a);
          ns.is_namespace = true;
          for (const auto& [k, v] : ns.items) {
            if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
              fail(
                  "chat template: a namespace cannot hold '{}' (names starting with '_' are "
                  "refused, as HF's sandbox refuses them)",
                  k.as_string());
          }
          return Value(std::move(ns));
        })));
  // jinja2 has these too; no template here needs them, so calling one is an error.
  for (const char* name : {"cycler", "lipsum"}) {
    const std::string n = name;
    g.set(name, Value(Function([n](const Args&) -> Value {
            fail("chat template: {}() is not supported", n);
          })));
  }
  // joiner(sep): returns "" the first time it is called and `sep` after that.
  g.set("joiner", Value(Function([](const Args& a) {
          const Value* sep = a.get(0, "sep");
          const std::string text = sep != nullptr ? sep->to_string() : ", ";
          auto used = std::make_shared<bool>(false);
          return Value(Function([text, used](const Args&) {
            if (!*used) {
              *used = true;
              return Value("");
            }
            return Value(text);
          }));
        })));
  return g;
}

}  // namespace inferd::jinja
