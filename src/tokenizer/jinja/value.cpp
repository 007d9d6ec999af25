// Jinja values: truthiness, Python's str() and repr(), equality, and JSON as HF's tojson
// writes it. Containers nest at most kMaxNesting deep here, so printing never overflows.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/error.h"

namespace inferd::jinja {
namespace {

constexpr int kMaxNesting = 100;

void check_nesting(int depth) {
  if (depth > kMaxNesting) fail("chat template: a value is nested more than {} deep", kMaxNesting);
}

// Python's repr() of a float: the shortest text that reads back, with ".0" on integral
// values and an exponent from 1e16 up.
std::string float_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e16) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else if (const auto next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
               c == 0xC2 && next >= 0x80 && (next <= 0xA0 || next == 0xAD)) {
      // C1 controls, no-break space and soft hyphen are not printable to Python.
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string container_text(const Value& v, int depth);

// A dict key as json.dumps writes it: str as is; int, float, bool and None as their JSON.
std::string json_key(const Value& k) {
  if (k.is_string()) return k.as_string();
  if (k.is_none()) return "null";
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return float_text(k.as_number());
  fail("chat template: tojson: keys must be str, int, float, bool or None, not {}", k.type_name());
}

std::string repr_at(const Value& v, int depth) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_range() || v.is_generator() || v.is_callable()) return v.to_string();  // errors
  if (v.is_markup()) return "Markup(" + string_repr(v.as_string()) + ")";
  if (v.is_string()) return string_repr(v.as_string());
  if (v.is_list() || v.is_dict()) return container_text(v, depth);
  return v.to_string();
}

std::string container_text(const Value& v, int depth) {
  check_nesting(depth);
  std::string out;
  if (v.is_list()) {
    const List& items = v.as_list();
    const bool tuple = v.is_tuple();
    out = tuple ? "(" : "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += repr_at(items[i], depth + 1);
    }
    out += tuple ? (items.size() == 1 ? ",)" : ")") : "]";
    switch (v.flavor()) {
      case Flavor::kItemsView:
        return "dict_items(" + out + ")";
      case Flavor::kKeysView:
        return "dict_keys(" + out + ")";
      case Flavor::kValuesView:
        return "dict_values(" + out + ")";
      default:
        return out;
    }
  }
  if (v.as_dict().is_namespace) {
    // jinja2's Namespace repr
    out = "<Namespace {";
    const auto& items = v.as_dict().items;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += repr_at(items[i].first, depth + 1) + ": " + repr_at(items[i].second, depth + 1);
    }
    return out + "}>";
  }
  out = "{";
  const auto& items = v.as_dict().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += repr_at(items[i].first, depth + 1) + ": " + repr_at(items[i].second, depth + 1);
  }
  return out + "}";
}

// Code point of the UTF-8 sequence at s[i] (advancing i); a stray byte stands for itself.
uint32_t decode(const std::string& s, size_t& i) {
  const auto lead = static_cast<unsigned char>(s[i++]);
  const int extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  uint32_t cp = extra == 0 ? lead : lead & (0x3F >> extra);
  for (int k = 0; k < extra && i < s.size(); ++k) cp = (cp << 6) | (s[i++] & 0x3F);
  return cp;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && ensure_ascii) {
      const uint32_t cp = decode(s, i);
      if (cp >= 0x10000) {
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + ((cp - 0x10000) >> 10),
                           0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

namespace {

void check_hashable(const Value& key) {
  if ((key.is_list() && !key.is_tuple()) || key.is_dict() || key.is_generator())
    fail("chat template: unhashable type: '{}'", key.type_name());
}

}  // namespace

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  check_hashable(key);
  for (const auto& [k, v] : items) {
    if (equal(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(Value(key), std::move(value));
}

const Value* Dict::find(const char* key) const {
  return find(std::string(key));
}

void Dict::set(const char* key, Value value) {
  set(std::string(key), std::move(value));
}

void Dict::set(const Value& key, Value value) {
  check_hashable(key);
  for (auto& [k, v] : items) {
    if (equal(k, key)) {
      v = std::move(value);  // Python keeps the first key object
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* Args::get(size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  return keyword(name);
}

const Value* Args::keyword(const char* name) const {
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::generator(List items) {
  auto g = std::make_shared<Generator>();
  g->items = std::move(items);
  return Value(std::move(g));
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_number() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return as_dict().is_namespace || !as_dict().items.empty();
  return true;  // generators and functions, as in Python
}

std::string Value::to_string() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_text(as_number());
  if (is_string()) return as_string();
  if (is_generator()) {
    fail(
        "chat template: cannot print a generator (jinja2 prints its memory address); "
        "convert it with |list");
  }
  if (is_callable()) fail("chat template: cannot print a function (jinja2 prints its address)");
  if (is_range()) fail("chat template: printing a range() is not supported; convert it with |list");
  return container_text(*this, 0);
}

std::string Value::repr() const {
  return repr_at(*this, 0);
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_markup()) return "Markup";
  if (is_string()) return "str";
  if (is_tuple()) return "tuple";
  if (is_range()) return "range";
  if (flavor_ == Flavor::kItemsView) return "dict_items";
  if (flavor_ == Flavor::kKeysView) return "dict_keys";
  if (flavor_ == Flavor::kValuesView) return "dict_values";
  if (is_list()) return "list";
  if (is_dict()) return as_dict().is_namespace ? "Namespace" : "dict";
  if (is_generator()) return "generator";
  return "function";
}

List iterate(const Value& v, const std::string& what) {
  if (v.is_list()) return v.as_list();
  List out;
  if (v.is_mapping()) {
    for (const auto& [k, val] : v.as_dict().items) out.push_back(k);
  } else if (v.is_string()) {
    for (std::string& c : characters(v.as_string())) {
      out.push_back(v.is_markup() ? Value::markup(std::move(c)) : Value(std::move(c)));
    }
  } else if (v.is_generator()) {
    Generator& g = v.as_generator();
    out.assign(g.items.begin() + static_cast<std::ptrdiff_t>(g.next), g.items.end());
    g.next = g.items.size();
  } else if (!v.is_undefined()) {
    fail("chat template: {} cannot iterate over a {} ('{}' object is not iterable)", what,
         v.type_name(), v.type_name());
  }
  return out;
}

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options, int depth) {
  check_nesting(depth);
  if (v.is_none()) return "null";
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) {
    if (std::isnan(v.as_number())) return "NaN";
    if (std::isinf(v.as_number())) return v.as_number() > 0 ? "Infinity" : "-Infinity";
    return float_text(v.as_number());
  }
  if (v.is_string()) return json_string(v.as_string(), options.ensure_ascii);
  if ((!v.is_list() && !v.is_mapping()) || v.is_view() || v.is_range()) {
    // As json.dumps: "Object of type generator is not JSON serializable".
    fail("chat template: tojson: Object of type {} is not JSON serializable", v.type_name());
  }
  const bool indenting = options.indent >= 0 || !options.indent_text.empty();
  std::string pad, close;  // newline and indentation before an item and before the closer
  if (indenting) {
    std::string unit = options.indent_text.empty()
                           ? std::string(static_cast<size_t>(std::max(options.indent, 0)), ' ')
                           : options.indent_text;
    pad = "\n";
    close = "\n";
    for (int i = 0; i < depth; ++i) close += unit;
    pad = close + unit;
  }
  const std::string sep = !options.item_separator.empty() ? options.item_separator
                          : indenting                     ? ","
                                                          : ", ";
  std::string out;
  if (v.is_list()) {
    if (v.as_list().empty()) return "[]";
    out = "[";
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      out += (i > 0 ? sep : "") + pad + to_json(v.as_list()[i], options, depth + 1);
    }
    return out + close + "]";
  }
  auto items = v.as_dict().items;
  if (items.empty()) return "{}";
  if (options.sort_keys) {
    // json.dumps sorts the keys themselves: numbers among numbers, strings among strings.
    const bool strings = std::all_of(items.begin(), items.end(),
                                     [](const auto& item) { return item.first.is_string(); });
    const bool numbers = std::all_of(items.begin(), items.end(), [](const auto& item) {
      return item.first.is_number() || item.first.is_bool();
    });
    if (!strings && !numbers) fail("chat template: tojson(sort_keys=true) of mixed key types");
    std::stable_sort(items.begin(), items.end(), [strings](const auto& a, const auto& b) {
      if (strings) return a.first.as_string() < b.first.as_string();
      auto number = [](const Value& k) {
        return k.is_bool() ? static_cast<double>(k.as_bool()) : k.as_number();
      };
      return number(a.first) < number(b.first);
    });
  }
  out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i > 0 ? sep : "") + pad + json_string(json_key(items[i].first), options.ensure_ascii) +
           options.key_separator + to_json(items[i].second, options, depth + 1);
  }
  return out + close + "}";
}

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead >= 0xF0) {
      len = 4;
    } else if (lead >= 0xE0) {
      len = 3;
    } else if (lead >= 0xC0) {
      len = 2;
    }
    len = std::min(len, s.size() - i);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
  check_nesting(depth);
  // Python's bool is an int: True == 1.
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.is_bool() ? a.as_bool() : a.as_number();
    const double y = b.is_bool() ? b.as_bool() : b.as_number();
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return x == y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_list() && b.is_list()) {
    if (a.flavor() != b.flavor()) return false;  // a tuple, list or range are never equal
    const List &x = a.as_list(), &y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!equal_at(x[i], y[i], depth + 1)) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    if (a.as_dict().is_namespace || b.as_dict().is_namespace) return &a.as_dict() == &b.as_dict();
    const auto& x = a.as_dict().items;
    if (x.size() != b.as_dict().items.size()) return false;
    for (const auto& [k, v] : x) {
      const Value* other = b.as_dict().find(k);
      if (other == nullptr || !equal_at(v, *other, depth + 1)) return false;
    }
    return true;
  }
  if (a.is_callable() && b.is_callable()) return &a.as_callable() == &b.as_callable();
  if (a.is_generator() && b.is_generator()) return &a.as_generator() == &b.as_generator();
  return false;
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

}  // namespace inferd::jinja
