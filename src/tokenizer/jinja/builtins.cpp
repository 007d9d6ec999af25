#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/lexer.h"

namespace inferd::jinja {
namespace {

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  auto drop = [&](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0
                         : chars.find(c) != std::string::npos;
  };
  while (left && begin < end && drop(s[begin])) ++begin;
  while (right && end > begin && drop(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

std::string transform(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

Value length_of(const Value& v, Location where) {
  if (v.is_string()) return Value(static_cast<int64_t>(characters(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  syntax_error(where, "length of a " + v.type_name());
}

Value items_of(const Value& v) {
  List out;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.as_dict().items) out.push_back(Value(List{Value(k), val}));
  }
  return Value(std::move(out));
}

std::string arg_string(const std::vector<Value>& args, size_t i, const std::string& fallback = "") {
  return i < args.size() && args[i].is_string() ? args[i].as_string() : fallback;
}

}  // namespace

std::optional<Value> apply_filter(const std::string& name, const Value& v, std::vector<Value>& args,
                                  Location where) {
  if (name == "trim") return Value(strip_chars(v.to_string(), arg_string(args, 0), true, true));
  if (name == "upper") return Value(transform(v.to_string(), ::toupper));
  if (name == "lower") return Value(transform(v.to_string(), ::tolower));
  if (name == "capitalize") {
    std::string s = transform(v.to_string(), ::tolower);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value(s);
  }
  if (name == "length" || name == "count") return length_of(v, where);
  if (name == "string") return Value(v.to_string());
  if (name == "tojson") {
    int indent = -1;
    if (!args.empty() && args[0].is_int()) indent = static_cast<int>(args[0].as_int());
    return Value(v.to_json(indent));
  }
  if (name == "first" || name == "last") {
    if (v.is_list()) {
      if (v.as_list().empty()) return Value();
      return name == "first" ? v.as_list().front() : v.as_list().back();
    }
    if (v.is_string() && !v.as_string().empty()) {
      auto chars = characters(v.as_string());
      return Value(name == "first" ? chars.front() : chars.back());
    }
    return Value();
  }
  if (name == "join") {
    std::string out, sep = arg_string(args, 0);
    if (v.is_list()) {
      for (size_t i = 0; i < v.as_list().size(); ++i)
        out += (i ? sep : "") + v.as_list()[i].to_string();
    }
    return Value(out);
  }
  if (name == "replace")
    return Value(replace_all(v.to_string(), arg_string(args, 0), arg_string(args, 1)));
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && args[1].truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return args.empty() ? Value("") : args[0];
    return v;
  }
  if (name == "list") {
    if (v.is_list()) return v;
    List out;
    if (v.is_string()) {
      for (std::string& c : characters(v.as_string())) out.push_back(Value(std::move(c)));
    }
    return Value(std::move(out));
  }
  if (name == "items") return items_of(v);
  if (name == "int") return Value(v.is_number() ? static_cast<int64_t>(v.as_number()) : int64_t{0});
  if (name == "reverse") {
    if (v.is_string()) {
      auto chars = characters(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(out);
    }
    List out = v.is_list() ? v.as_list() : List{};
    std::reverse(out.begin(), out.end());
    return Value(std::move(out));
  }
  return std::nullopt;
}

std::optional<bool> apply_test(const std::string& name, const Value& v,
                               const std::vector<Value>& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence" || name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "even" || name == "odd")
    return v.is_int() && (v.as_int() % 2 == 0) == (name == "even");
  if (name == "divisibleby")
    return v.is_int() && !args.empty() && args[0].is_int() && args[0].as_int() != 0 &&
           v.as_int() % args[0].as_int() == 0;
  if (name == "eq" || name == "equalto" || name == "==") return !args.empty() && equal(v, args[0]);
  if (name == "ne" || name == "!=") return args.empty() || !equal(v, args[0]);
  return std::nullopt;
}

Value method(const Value& v, const std::string& name, Location where) {
  if (v.is_string()) {
    const std::string s = v.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip", right = name != "lstrip";
      return Value(Function([s, left, right](std::vector<Value>& a) {
        return Value(strip_chars(s, arg_string(a, 0), left, right));
      }));
    }
    if (name == "upper" || name == "lower") {
      auto f = name == "upper" ? ::toupper : ::tolower;
      return Value(Function([s, f](std::vector<Value>&) { return Value(transform(s, f)); }));
    }
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return Value(Function([s, starts](std::vector<Value>& a) {
        const std::string p = arg_string(a, 0);
        if (p.size() > s.size()) return Value(false);
        return Value(starts ? s.compare(0, p.size(), p) == 0
                            : s.compare(s.size() - p.size(), p.size(), p) == 0);
      }));
    }
    if (name == "split") {
      return Value(Function([s](std::vector<Value>& a) {
        List out;
        const std::string sep = arg_string(a, 0);
        if (sep.empty()) {
          std::string word;
          for (char c : s + " ") {
            if (std::isspace(static_cast<unsigned char>(c))) {
              if (!word.empty()) out.push_back(Value(word));
              word.clear();
            } else {
              word += c;
            }
          }
          return Value(std::move(out));
        }
        size_t start = 0;
        for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + sep.size())
          out.push_back(Value(s.substr(start, pos - start)));
        out.push_back(Value(s.substr(start)));
        return Value(std::move(out));
      }));
    }
    if (name == "replace") {
      return Value(Function([s](std::vector<Value>& a) {
        return Value(replace_all(s, arg_string(a, 0), arg_string(a, 1)));
      }));
    }
    if (name == "capitalize") {
      return Value(Function([s, where](std::vector<Value>& a) {
        return *apply_filter("capitalize", Value(s), a, where);
      }));
    }
  }
  if (v.is_dict()) {
    const Value self = v;
    if (name == "items")
      return Value(Function([self](std::vector<Value>&) { return items_of(self); }));
    if (name == "keys" || name == "values") {
      const bool keys = name == "keys";
      return Value(Function([self, keys](std::vector<Value>&) {
        List out;
        for (const auto& [k, val] : self.as_dict().items) out.push_back(keys ? Value(k) : val);
        return Value(std::move(out));
      }));
    }
    if (name == "get") {
      return Value(Function([self](std::vector<Value>& a) {
        const Value* found = a.empty() ? nullptr : self.as_dict().find(a[0].to_string());
        return found ? *found : (a.size() > 1 ? a[1] : Value::none());
      }));
    }
  }
  return Value();
}

}  // namespace inferd::jinja
