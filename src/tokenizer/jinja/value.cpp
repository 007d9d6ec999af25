#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace inferd::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_number() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().items.empty();
  return true;
}

static std::string float_to_string(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e16)
    return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string Value::to_string() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_to_string(as_number());
  if (is_string()) return as_string();
  if (is_callable()) return "<function>";
  // Python's repr of containers, with single-quoted strings.
  auto repr = [](const Value& v) {
    return v.is_string() ? "'" + v.as_string() + "'" : v.to_string();
  };
  std::string out;
  if (is_list()) {
    out = "[";
    for (size_t i = 0; i < as_list().size(); ++i) {
      if (i > 0) out += ", ";
      out += repr(as_list()[i]);
    }
    return out + "]";
  }
  out = "{";
  const auto& items = as_dict().items;
  for (size_t i = 0; i < items.size(); ++i) {
    out += i > 0 ? ", '" : "'";
    out += items[i].first;
    out += "': ";
    out += repr(items[i].second);
  }
  return out + "}";
}

static std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
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

std::string Value::to_json(int indent, int depth) const {
  if (is_undefined() || is_none()) return "null";
  if (is_bool()) return as_bool() ? "true" : "false";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_to_string(as_number());
  if (is_string()) return json_string(as_string());
  if (is_callable()) return "null";
  std::string pad, close;  // newline and indentation before an item and before the closing bracket
  if (indent >= 0) {
    pad.assign(static_cast<size_t>(indent * (depth + 1)) + 1, ' ');
    pad[0] = '\n';
    close.assign(static_cast<size_t>(indent * depth) + 1, ' ');
    close[0] = '\n';
  }
  const std::string sep = indent >= 0 ? "," : ", ";
  std::string out;
  if (is_list()) {
    if (as_list().empty()) return "[]";
    out = "[";
    for (size_t i = 0; i < as_list().size(); ++i) {
      if (i > 0) out += sep;
      out += pad;
      out += as_list()[i].to_json(indent, depth + 1);
    }
    return out + close + "]";
  }
  const auto& items = as_dict().items;
  if (items.empty()) return "{}";
  out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += pad;
    out += json_string(items[i].first);
    out += ": ";
    out += items[i].second.to_json(indent, depth + 1);
  }
  return out + close + "}";
}

std::string Value::type_name() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "none";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "string";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  return "function";
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

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_number() == b.as_number();
  if (a.is_bool() && b.is_bool()) return a.as_bool() == b.as_bool();
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if ((a.is_none() || a.is_undefined()) && (b.is_none() || b.is_undefined()))
    return a.is_none() == b.is_none();
  if (a.is_list() && b.is_list()) {
    if (a.as_list().size() != b.as_list().size()) return false;
    for (size_t i = 0; i < a.as_list().size(); ++i) {
      if (!equal(a.as_list()[i], b.as_list()[i])) return false;
    }
    return true;
  }
  return false;
}

}  // namespace inferd::jinja
