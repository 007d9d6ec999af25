// Methods of Python objects that templates call (`text.strip()`, `d.items()`, `xs.index(x)`),
// with the results Python gives. Methods that mutate (list.append, dict.update, ...) are
// refused as HF's ImmutableSandboxedEnvironment refuses them. A Markup string's methods
// return Markup and escape their string arguments, as markupsafe's do.
#include <algorithm>
#include <cctype>
#include <optional>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/text.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

const Value* arg_at(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v != nullptr && !v->is_none() ? v : nullptr;
}
std::string string_arg(const Args& a, size_t i, const char* name, bool required = false) {
  const Value* v = arg_at(a, i, name);
  if (v == nullptr) {
    if (required) fail("chat template: str method needs its '{}' argument", name);
    return "";
  }
  if (!v->is_string()) fail("chat template: '{}' must be a str, not {}", name, v->type_name());
  return v->as_string();
}
int64_t int_arg(const Args& a, size_t i, const char* name, int64_t fallback) {
  const Value* v = arg_at(a, i, name);
  if (v == nullptr) return fallback;
  if (!v->is_int()) fail("chat template: '{}' must be an int, not {}", name, v->type_name());
  return v->as_int();
}

int64_t char_count(const std::string& s) {
  return static_cast<int64_t>(characters(s).size());
}

// startswith/endswith take one string or a tuple of them.
bool affix_matches(const std::string& s, const Value* arg, bool starts) {
  if (arg == nullptr) fail("chat template: startswith/endswith need an argument");
  const List options = arg->is_tuple() ? arg->as_list() : List{*arg};
  for (const Value& o : options) {
    if (!o.is_string())
      fail("chat template: startswith/endswith take a str or a tuple of str, not {}",
           o.type_name());
    const std::string& p = o.as_string();
    if (p.size() <= s.size() &&
        (starts ? s.compare(0, p.size(), p) : s.compare(s.size() - p.size(), p.size(), p)) == 0)
      return true;
  }
  return false;
}

bool all_chars(const std::string& s, int (*predicate)(int)) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c >= 0x80) fail("chat template: str.is...() of non-ASCII text is not supported");
    if (!predicate(c)) return false;
  }
  return true;
}

std::optional<Value> string_method(const Value& self, const std::string& name, size_t max_size) {
  const std::string s = self.as_string();
  const bool markup = self.is_markup();
  // Markup's methods return Markup and escape the strings they take in.
  auto result = [markup](std::string text) {
    return markup ? Value::markup(std::move(text)) : Value(std::move(text));
  };
  auto in = [markup](const std::string& text) { return markup ? escape_html(text) : text; };
  auto bind = [](auto f) { return Value(Function(std::move(f))); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([=](const Args& a) {
      const Value* chars = arg_at(a, 0, "chars");
      if (chars != nullptr && chars->as_string().empty()) return result(s);
      return result(strip(s, string_arg(a, 0, "chars"), left, right));
    });
  }
  if (name == "upper") return bind([=](const Args&) { return result(to_upper(s)); });
  if (name == "lower" || name == "casefold")
    return bind([=](const Args&) { return result(to_lower(s)); });
  if (name == "title") return bind([=](const Args&) { return result(title(s)); });
  if (name == "capitalize") return bind([=](const Args&) { return result(capitalize(s)); });
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bind([=](const Args& a) {
      if (a.positional.size() > 1)
        fail("chat template: {}() with start/end is not supported", name);
      return Value(affix_matches(s, a.get(0, "prefix"), starts));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bind([=](const Args& a) {
      const Value* sep = arg_at(a, 0, "sep");
      if (sep != nullptr && sep->is_string() && sep->as_string().empty())
        fail("chat template: split(): empty separator");
      const int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
      List out;
      for (std::string& part : right ? rsplit(s, string_arg(a, 0, "sep"), maxsplit)
                                     : split(s, string_arg(a, 0, "sep"), maxsplit))
        out.push_back(result(std::move(part)));
      return Value(std::move(out));
    });
  }
  if (name == "splitlines") {
    return bind([=](const Args& a) {
      if (const Value* keep = a.get(0, "keepends"); keep != nullptr && keep->truthy())
        fail("chat template: splitlines(keepends=True) is not supported");
      List out;
      for (std::string& line : splitlines(s)) out.push_back(result(std::move(line)));
      return Value(std::move(out));
    });
  }
  if (name == "replace") {
    return bind([=](const Args& a) {
      return result(replace(s, in(string_arg(a, 0, "old", true)), in(string_arg(a, 1, "new", true)),
                            int_arg(a, 2, "count", -1), max_size));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([=](const Args& a) {
      if (a.positional.size() > 1)
        fail("chat template: {}() with start/end is not supported", name);
      const std::string sub = string_arg(a, 0, "sub", true);
      if (name == "count") {
        if (sub.empty()) return Value(char_count(s) + 1);
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++n;
        return Value(n);
      }
      const size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name.find("index") != std::string::npos)
          fail("chat template: str.{}(): substring not found", name);
        return Value(int64_t{-1});
      }
      return Value(char_count(s.substr(0, at)));  // Python counts characters, not bytes
    });
  }
  if (name == "join") {
    return bind([=](const Args& a) {
      const Value* items = a.get(0, "iterable");
      if (items == nullptr) fail("chat template: join() needs an iterable");
      std::string out;
      const List parts = iterate(*items, "str.join");
      for (size_t i = 0; i < parts.size(); ++i) {
        if (!parts[i].is_string())
          fail("chat template: join(): item {} is a {}, not a str", i, parts[i].type_name());
        out += (i ? s : "") + in(parts[i].as_string());
        if (out.size() > max_size) fail("chat template: join() exceeds the size limit");
      }
      return result(out);
    });
  }
  if (name == "format")
    return bind([=](const Args& a) { return result(str_format(s, a, markup)); });
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return bind([=](const Args& a) {
      const std::string affix = string_arg(a, 0, prefix ? "prefix" : "suffix", true);
      if (affix.size() <= s.size() &&
          (prefix ? s.compare(0, affix.size(), affix) == 0
                  : s.compare(s.size() - affix.size(), affix.size(), affix) == 0))
        return result(prefix ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
      return result(s);
    });
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return bind([=](const Args&) { return Value(all_chars(s, ::isdigit)); });
  if (name == "isalpha") return bind([=](const Args&) { return Value(all_chars(s, ::isalpha)); });
  if (name == "isalnum") return bind([=](const Args&) { return Value(all_chars(s, ::isalnum)); });
  if (name == "isspace")
    return bind([=](const Args&) { return Value(!s.empty() && strip(s, "", true, true).empty()); });
  if (name == "islower" || name == "isupper") {
    const bool lower = name == "islower";
    return bind([=](const Args&) { return Value(is_cased(s, lower)); });
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    const Flavor flavor = name == "items"  ? Flavor::kItemsView
                          : name == "keys" ? Flavor::kKeysView
                                           : Flavor::kValuesView;
    return Value(Function([self, flavor](const Args&) {
      List out;
      for (const auto& [k, v] : self.as_dict().items) {
        out.push_back(flavor == Flavor::kItemsView  ? Value::tuple(List{k, v})
                      : flavor == Flavor::kKeysView ? k
                                                    : v);
      }
      return Value(std::move(out), flavor);
    }));
  }
  if (name == "get") {
    return Value(Function([self](const Args& a) {
      const Value* key = a.get(0, "key");
      if (key == nullptr) fail("chat template: dict.get() needs a key");
      const Value* found = self.as_dict().find(*key);
      const Value* fallback = a.get(1, "default");
      return found ? *found : (fallback ? *fallback : Value::none());
    }));
  }
  if (name == "copy") {
    return Value(Function([self](const Args&) { return Value(Dict{self.as_dict().items}); }));
  }
  static const char* const kMutating[] = {"update", "pop", "popitem", "setdefault", "clear"};
  if (std::find(std::begin(kMutating), std::end(kMutating), name) != std::end(kMutating))
    return Value::missing("access to attribute '" + name + "' of 'dict' object is unsafe.");
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    const bool count = name == "count";
    return Value(Function([self, count](const Args& a) {
      const Value* x = a.get(0, "value");
      if (x == nullptr) fail("chat template: list.index()/count() needs a value");
      int64_t n = 0;
      const List& items = self.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equal(items[i], *x)) continue;
        if (!count) return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (!count) fail("chat template: list.index(x): x not in list");
      return Value(n);
    }));
  }
  const std::string type = self.type_name();
  static const char* const kMutating[] = {"append", "extend",  "insert", "pop",
                                          "remove", "reverse", "sort",   "clear"};
  if (std::find(std::begin(kMutating), std::end(kMutating), name) != std::end(kMutating))
    return Value::missing("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  return std::nullopt;
}

}  // namespace

std::optional<Value> method(const Value& v, const std::string& name, size_t max_size) {
  if (v.is_string()) return string_method(v, name, max_size);
  if (v.is_mapping()) return dict_method(v, name);
  if (v.is_list() && !v.is_view()) return list_method(v, name);
  return std::nullopt;
}

Value missing_attribute(const Value& v, const std::string& name) {
  const std::string type = v.is_none() ? "None" : "'" + v.type_name() + " object'";
  return Value::missing(type + " has no attribute '" + name + "'");
}

}  // namespace inferd::jinja
