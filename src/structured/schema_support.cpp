#include "structured/schema_support.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace inferd::structured {
namespace {

// Ordered: the grammar writes properties in the order the schema lists them.
using json = nlohmann::ordered_json;
using Keys = std::set<std::string_view>;

// Keywords that describe and do not constrain; $defs and definitions hold schemas that $ref
// reaches (checked as well).
const Keys kAnnotations = {"title",    "description", "default",  "examples",
                           "$schema",  "$id",         "$comment", "deprecated",
                           "readOnly", "writeOnly",   "$defs",    "definitions"};
// Per type, the keywords the grammar engine turns into grammar rules.
const Keys kObjectKeys = {
    "properties",    "required",      "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties",        "unevaluatedProperties"};
const Keys kArrayKeys = {"items",    "prefixItems",      "minItems",
                         "maxItems", "unevaluatedItems", "uniqueItems"};
const Keys kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const Keys kNumberKeys = {"minimum",          "maximum",    "exclusiveMinimum",
                          "exclusiveMaximum", "multipleOf", "format"};
const Keys kCombinators = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
const Keys kTypes = {"object", "array", "string", "integer", "number", "boolean", "null"};
// String formats the engine has a pattern for; others would be any string.
const Keys kFormats = {"date",          "time",
                       "date-time",     "duration",
                       "email",         "hostname",
                       "ipv4",          "ipv6",
                       "uuid",          "uri",
                       "uri-reference", "uri-template",
                       "json-pointer",  "relative-json-pointer"};
// The largest integer multipleOf the engine enforces (it ignores larger ones).
constexpr int64_t kMaxMultipleOf = 1024;

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  void check(const json& s, const std::string& path) {
    if (s.is_boolean()) return;
    if (!s.is_object()) fail("the schema at {} must be an object or a boolean", where(path));
    std::vector<std::string_view> combinators;
    for (const auto& [key, value] : s.items()) {
      if (kCombinators.contains(key)) combinators.push_back(kCombinators.find(key)->data());
    }
    if (combinators.size() > 1) {
      fail("{} and {} together at {} are not supported: the grammar would enforce only one",
           combinators[0], combinators[1], where(path));
    }
    for (const char* defs : {"$defs", "definitions"}) {
      if (const auto it = s.find(defs); it != s.end()) {
        if (!it->is_object()) fail("'{}' at {} must be an object", defs, where(path));
        for (const auto& [name, sub] : it->items()) check(sub, path + "/" + defs + "/" + name);
      }
    }
    if (combinators.empty()) {
      check_typed(s, path);
    } else {
      check_combinator(s, path, combinators[0]);
    }
  }

 private:
  static std::string where(const std::string& path) { return path.empty() ? "/" : path; }

  static std::vector<std::string> types_of(const json& s, const std::string& path) {
    const auto it = s.find("type");
    if (it == s.end()) return {};
    std::vector<std::string> types;
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const json& t : *it) {
        if (!t.is_string()) fail("'type' at {} must hold strings", where(path));
        types.push_back(t.get<std::string>());
      }
    } else {
      fail("'type' at {} must be a string or a non-empty array", where(path));
    }
    for (const std::string& t : types) {
      if (!kTypes.contains(t)) fail("unknown type '{}' at {}", t, where(path));
    }
    return types;
  }

  static bool has_type(const json& value, const std::string& type) {
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "integer")
      return value.is_number_integer() ||
             (value.is_number_float() &&
              value.get<double>() == static_cast<int64_t>(value.get<double>()));
    if (type == "number") return value.is_number();
    if (type == "boolean") return value.is_boolean();
    return value.is_null();
  }

  // $ref, const, enum, anyOf, oneOf or allOf: only annotations beside it (and `type` beside
  // const or enum, when every value has that type).
  void check_combinator(const json& s, const std::string& path, std::string_view keyword) {
    const std::vector<std::string> types = types_of(s, path);
    for (const auto& [key, value] : s.items()) {
      if (key == keyword || kAnnotations.contains(key)) continue;
      if (key == "type" && (keyword == "const" || keyword == "enum")) continue;
      fail("'{}' beside '{}' at {} is not supported: the grammar would enforce only '{}'", key,
           keyword, where(path), keyword);
    }
    const json& value = s.at(std::string(keyword));
    const std::string at = path + "/" + std::string(keyword);
    auto check_values = [&](const json& v) {
      for (const std::string& t : types) {
        if (!has_type(v, t)) fail("the value {} at {} is not of type '{}'", v.dump(), where(at), t);
      }
    };
    if (keyword == "$ref") {
      if (!value.is_string()) fail("'$ref' at {} must be a string", where(path));
      resolve(value.get<std::string>(), path);
    } else if (keyword == "const") {
      check_values(value);
    } else if (keyword == "enum") {
      if (!value.is_array() || value.empty())
        fail("'enum' at {} must be a non-empty array", where(path));
      for (const json& v : value) check_values(v);
    } else {
      if (!value.is_array() || value.empty())
        fail("'{}' at {} must be a non-empty array", keyword, where(path));
      if (keyword == "allOf" && value.size() > 1) {
        fail("'allOf' with {} schemas at {} is not supported (one schema only)", value.size(),
             where(path));
      }
      for (size_t i = 0; i < value.size(); ++i) check(value[i], at + "/" + std::to_string(i));
      if (keyword == "oneOf") check_disjoint(value, at);
    }
  }

  void check_typed(const json& s, const std::string& path) {
    std::vector<std::string> types = types_of(s, path);
    const bool untyped = types.empty();
    if (untyped) {
      // The engine reads an untyped schema as an object when it has object keywords, as an
      // array when it has array keywords, and as any value otherwise.
      const bool object =
          std::any_of(kObjectKeys.begin(), kObjectKeys.end(),
                      [&](std::string_view k) { return s.contains(std::string(k)); });
      const bool array = std::any_of(kArrayKeys.begin(), kArrayKeys.end(), [&](std::string_view k) {
        return s.contains(std::string(k));
      });
      if (object && array) fail("object and array keywords without 'type' at {}", where(path));
      if (object) types.push_back("object");
      if (array) types.push_back("array");
    }
    auto allowed = [&](std::string_view key) {
      if (key == "type" || kAnnotations.contains(key)) return true;
      for (const std::string& t : types) {
        if (t == "object" && kObjectKeys.contains(key)) return true;
        if (t == "array" && kArrayKeys.contains(key)) return true;
        if (t == "string" && kStringKeys.contains(key)) return true;
        if ((t == "integer" || t == "number") && kNumberKeys.contains(key)) return true;
      }
      return false;
    };
    for (const auto& [key, value] : s.items()) {
      if (allowed(key)) continue;
      const bool known = kObjectKeys.contains(key) || kArrayKeys.contains(key) ||
                         kStringKeys.contains(key) || kNumberKeys.contains(key);
      if (known) {
        fail("'{}' at {} does not apply to {}", key, where(path),
             untyped ? std::string("a schema without 'type'") : "type " + s.at("type").dump());
      }
      fail("unsupported JSON Schema keyword '{}' at {}", key, where(path));
    }
    const auto has = [&](const std::string& t) {
      return std::find(types.begin(), types.end(), t) != types.end();
    };
    if (has("object")) check_object(s, path);
    if (has("array")) check_array(s, path);
    if (has("string")) check_string(s, path);
    if (has("integer") || has("number")) check_number(s, path, has("number"));
  }

  void check_object(const json& s, const std::string& path) {
    if (const auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) fail("'properties' at {} must be an object", where(path));
      for (const auto& [name, sub] : it->items()) check(sub, path + "/properties/" + name);
    }
    if (const auto it = s.find("patternProperties"); it != s.end()) {
      if (!it->is_object()) fail("'patternProperties' at {} must be an object", where(path));
      for (const auto& [name, sub] : it->items()) check(sub, path + "/patternProperties/" + name);
    }
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) fail("'required' at {} must be an array", where(path));
      for (const json& name : *it)
        if (!name.is_string()) fail("'required' at {} must hold strings", where(path));
    }
    for (const char* key : {"additionalProperties", "unevaluatedProperties", "propertyNames"}) {
      if (const auto it = s.find(key); it != s.end()) check(*it, path + "/" + key);
    }
  }

  void check_array(const json& s, const std::string& path) {
    if (const auto it = s.find("items"); it != s.end()) {
      if (it->is_array())
        fail("'items' at {} is a list (draft 4 tuples): use 'prefixItems'", where(path));
      check(*it, path + "/items");
    }
    if (const auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) fail("'prefixItems' at {} must be an array", where(path));
      for (size_t i = 0; i < it->size(); ++i)
        check((*it)[i], path + "/prefixItems/" + std::to_string(i));
    }
    if (const auto it = s.find("unevaluatedItems"); it != s.end())
      check(*it, path + "/unevaluatedItems");
    if (const auto it = s.find("uniqueItems"); it != s.end() && *it != false) {
      fail("'uniqueItems' at {} is not supported", where(path));
    }
  }

  static void check_string(const json& s, const std::string& path) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    for (const char* key : {"minLength", "maxLength"}) {
      const auto it = s.find(key);
      if (it != s.end() &&
          !(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0))) {
        fail("'{}' at {} must be a non-negative integer", key, where(path));
      }
    }
    if (s.contains("minLength") && s.contains("maxLength") &&
        s["minLength"].get<int64_t>() > s["maxLength"].get<int64_t>()) {
      fail("'minLength' is greater than 'maxLength' at {}", where(path));
    }
    if (const auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) fail("'format' at {} must be a string", where(path));
      if (!kFormats.contains(it->get<std::string>()))
        fail("string format '{}' at {} is not supported", it->get<std::string>(), where(path));
      if (lengths) fail("'format' with minLength/maxLength at {} is not supported", where(path));
    }
    if (const auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) fail("'pattern' at {} must be a string", where(path));
      if (lengths) fail("'pattern' with minLength/maxLength at {} is not supported", where(path));
    }
  }

  static void check_number(const json& s, const std::string& path, bool number) {
    const auto it = s.find("multipleOf");
    if (it == s.end()) return;
    if (number) fail("'multipleOf' for type number at {} is not supported", where(path));
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxMultipleOf)
      fail("'multipleOf' at {} must be an integer from 1 to {}", where(path), kMaxMultipleOf);
  }

  // A local reference: "#" or a JSON pointer into this schema.
  const json& resolve(const std::string& ref, const std::string& path) const {
    if (ref == "#") return root_;
    if (ref.rfind("#/", 0) != 0)
      fail("'$ref' {} at {} is not supported (only references inside the schema)", ref,
           where(path));
    try {
      const json::json_pointer pointer(ref.substr(1));
      if (!root_.contains(pointer)) fail("'$ref' {} at {} points at nothing", ref, where(path));
      return root_.at(pointer);
    } catch (const json::exception&) {
      fail("'$ref' {} at {} is not a valid JSON pointer", ref, where(path));
    }
  }

  // oneOf means exactly one branch: enforced only when no value can match two branches, which
  // is proven here for branches of different types, or objects that require one property with
  // different constant values (a tagged union).
  void check_disjoint(const json& branches, const std::string& path) const {
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        if (!disjoint(deref(branches[i]), deref(branches[j]))) {
          fail(
              "'oneOf' at {}: branches {} and {} may both match a value, which constrained "
              "decoding cannot rule out; use 'anyOf'",
              where(path), i, j);
        }
      }
    }
  }

  const json& deref(const json& s) const {
    const json* at = &s;
    for (int depth = 0; depth < 32 && at->is_object() && at->contains("$ref"); ++depth)
      at = &resolve(at->at("$ref").get<std::string>(), "");
    return *at;
  }

  static std::string single_type(const json& s) {
    if (!s.is_object()) return {};
    if (const auto it = s.find("type"); it != s.end() && it->is_string())
      return it->get<std::string>();
    if (s.contains("properties")) return "object";
    return {};
  }

  // The constant a branch requires for property `name`, if any.
  static const json* tag(const json& s, const std::string& name) {
    const auto req = s.find("required");
    if (req == s.end() || std::find(req->begin(), req->end(), name) == req->end()) return nullptr;
    const auto props = s.find("properties");
    if (props == s.end() || !props->contains(name)) return nullptr;
    const json& p = props->at(name);
    if (!p.is_object()) return nullptr;
    if (const auto c = p.find("const"); c != p.end()) return &*c;
    if (const auto e = p.find("enum"); e != p.end() && e->is_array() && e->size() == 1)
      return &(*e)[0];
    return nullptr;
  }

  static bool disjoint(const json& a, const json& b) {
    const std::string ta = single_type(a), tb = single_type(b);
    if (!ta.empty() && !tb.empty() && ta != tb) {
      const bool numeric =
          (ta == "integer" || ta == "number") && (tb == "integer" || tb == "number");
      return !numeric;
    }
    if (ta != "object" || tb != "object") return false;
    const auto props = a.find("properties");
    if (props == a.end() || !props->is_object()) return false;
    for (const auto& [name, unused] : props->items()) {
      const json* x = tag(a, name);
      const json* y = tag(b, name);
      if (x != nullptr && y != nullptr && *x != *y) return true;
    }
    return false;
  }

  const json& root_;
};

}  // namespace

void check_json_schema(const json& schema) {
  Checker(schema).check(schema, "");
}

namespace {

// Calendar dates as RFC 3339 and datetime parsers take them: years 0001-9999, the days each
// month has, February 29 in leap years only (divisible by 4, centuries by 400).
constexpr const char* kYear = R"((\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3}))";
constexpr const char* kMonthDay =
    R"(((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
constexpr const char* kLeapYear =
    R"((\d\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
// Times with a time zone; seconds 00-59 (a leap second's 60 is refused by most parsers).
// Optional parts are written (|x) rather than (x)?: XGrammar 0.2.8 compiles an optional group
// that holds a repetition as if only its first element were optional.
// Fractions of a second to the nanosecond.
constexpr const char* kTime =
    R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(|\.\d{1,9})(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
constexpr const char* kOctet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
constexpr const char* kLabel = R"(([a-z0-9](|[a-z0-9-]{0,61}[a-z0-9])))";

std::string date_pattern() {
  return fmt::format("({}-{}|{}-02-29)", kYear, kMonthDay, kLeapYear);
}

// Up to four labels: a hostname, unlike a sampled loop, ends.
std::string hostname_pattern() {
  return fmt::format(R"({0}(|\.{0}(|\.{0}(|\.{0}))))", kLabel);
}

// An address as mail systems take it: a local part of word characters with at most one dot
// inside (at most 64 characters, RFC 5321), a domain of two or three labels, the last letters.
std::string email_pattern() {
  return fmt::format(
      R"([A-Za-z0-9_%+-]{{1,32}}(|\.[A-Za-z0-9_%+-]{{1,31}})@{0}\.(|{0}\.)[a-z]{{2,24}})", kLabel);
}

// ISO 8601 durations as RFC 3339 appendix A writes them (P1Y2M3DT4H5M6S, PT30M, P2W), each
// number at most four digits.
std::string duration_pattern() {
  const std::string n = R"(\d{1,4})";
  const std::string date = fmt::format("({0}D|{0}M(|{0}D)|{0}Y(|{0}M(|{0}D)))", n);
  const std::string time = fmt::format("T({0}S|{0}M(|{0}S)|{0}H(|{0}M(|{0}S)))", n);
  return fmt::format("P({0}(|{1})|{1}|{2}W)", date, time, n);
}

// Absolute http(s) URIs: a host name, an optional port, up to four path segments and a query.
std::string uri_pattern() {
  // No '%': a percent sign must start an escape of two hex digits.
  const std::string segment = R"(/[A-Za-z0-9._~!$&'()*+,;=:@-]{1,32})";
  return fmt::format(
      R"(https?://{0}(|:[1-9]\d{{0,4}})(|{1}(|{1}(|{1}(|{1}))))(|\?[A-Za-z0-9._~=&-]{{1,64}}))",
      hostname_pattern(), segment);
}

// A JSON string of min..max characters (max < 0: no bound). The grammar engine's own
// length-limited strings count characters with a repetition rule whose token masks it cannot
// precompute (milliseconds per token with a 262K vocabulary); a pattern becomes an automaton
// whose masks it can (tens of microseconds). The engine keeps the quote, the backslash and the
// control characters out of a pattern's string, so such strings hold no escapes.
constexpr int64_t kMaxPatternRepeat = 128;

std::string bounded_string_pattern(int64_t min, int64_t max) {
  // One character of the Basic Multilingual Plane, by the length of its UTF-8 form, without
  // surrogates. (One class of all of them, or a negated class, lets the engine take overlong
  // forms such as E0 9F B4; its patterns have no escape for characters past U+FFFF.)
  constexpr const char* kChar = R"(([ !#-\[\]-~]|[\u0080-\u07FF]|[\u0800-\uD7FF]|[\uE000-\uFFFF]))";
  return max < 0 ? fmt::format("^{}{{{},}}$", kChar, min)
                 : fmt::format("^{}{{{},{}}}$", kChar, min, max);
}

// Where a schema holds subschemas: lists of them, maps of them, single ones.
const char* const kSchemaLists[] = {"prefixItems", "anyOf", "oneOf", "allOf"};
const char* const kSchemaMaps[] = {"properties", "patternProperties", "$defs", "definitions"};
const char* const kSchemaValues[] = {"items", "additionalProperties", "unevaluatedProperties",
                                     "unevaluatedItems", "propertyNames"};

// Calls fn on each direct subschema of s.
template <typename Fn>
void for_each_subschema(json& s, Fn&& fn) {
  for (const char* key : kSchemaLists)
    if (const auto it = s.find(key); it != s.end() && it->is_array())
      for (json& sub : *it) fn(sub);
  for (const char* key : kSchemaMaps)
    if (const auto it = s.find(key); it != s.end() && it->is_object())
      for (auto& [name, sub] : it->items()) fn(sub);
  for (const char* key : kSchemaValues)
    if (const auto it = s.find(key); it != s.end()) fn(*it);
}

void tighten_formats(json& s) {
  if (!s.is_object()) return;
  if (const auto it = s.find("format"); it != s.end() && it->is_string()) {
    const std::string format = it->get<std::string>();
    std::string pattern;
    if (format == "date") pattern = date_pattern();
    if (format == "date-time") pattern = date_pattern() + "T" + kTime;
    if (format == "time") pattern = kTime;
    if (format == "ipv4") pattern = fmt::format(R"({0}(\.{0}){{3}})", kOctet);
    if (format == "hostname") pattern = hostname_pattern();
    if (format == "email") pattern = email_pattern();
    if (format == "duration") pattern = duration_pattern();
    if (format == "uri") pattern = uri_pattern();
    if (!pattern.empty()) {
      s.erase("format");
      s["pattern"] = "^" + pattern + "$";
    }
  }
  const auto type = s.find("type");
  const bool string = type != s.end() && *type == "string";
  if (string && !s.contains("pattern") && !s.contains("format") &&
      (s.contains("minLength") || s.contains("maxLength"))) {
    // check_json_schema has made sure both are non-negative integers where present.
    const int64_t min = s.value("minLength", int64_t{0});
    const int64_t max = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : -1;
    // XGrammar 0.2.8 fails an internal check compiling a pattern whose repetition counts past
    // 128: longer strings keep its own (slower) rule.
    if (std::max(min, max) <= kMaxPatternRepeat) {
      s.erase("minLength");
      s.erase("maxLength");
      s["pattern"] = bounded_string_pattern(min, max);
    }
  }
  for_each_subschema(s, tighten_formats);
}

// Draft 4's tuples ("items": [A, B], "additionalItems": C) said in 2020-12's words
// ("prefixItems": [A, B], "items": C): the same constraint, which the grammar compiler reads.
void upgrade_draft4_tuples(json& s) {
  if (!s.is_object()) return;
  const auto items = s.find("items");
  if (items != s.end() && items->is_array() && !s.contains("prefixItems")) {
    json tuple = std::move(*items);
    s.erase("items");
    s["prefixItems"] = std::move(tuple);
    if (const auto rest = s.find("additionalItems"); rest != s.end()) {
      json after = std::move(*rest);
      s.erase("additionalItems");
      s["items"] = std::move(after);
    }
  }
  for_each_subschema(s, upgrade_draft4_tuples);
}

}  // namespace

json prepare_json_schema(const json& schema) {
  json out = schema;
  upgrade_draft4_tuples(out);
  check_json_schema(out);
  tighten_formats(out);
  return out;
}

}  // namespace inferd::structured
