// Jinja values: undefined, none, bool, int, float, string, list, dict (insertion-ordered,
// also used for namespace objects) and built-in callables. Lists and dicts are shared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace inferd::jinja {

class Value;
struct Args;
using List = std::vector<Value>;
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // `namespace()` objects allow attribute assignment
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};
using Function = std::function<Value(const Args& args)>;

// What a missing variable or key evaluates to; `name` says what was missing, for errors.
struct Undefined {
  std::string name;
};

class Value {
 public:
  Value() : data_(Undefined{}) {}
  static Value none() { return Value(std::monostate{}); }
  static Value undefined(std::string name) { return Value(Undefined{std::move(name)}); }
  Value(bool v) : data_(v) {}  // NOLINT: implicit on purpose, values are built inline
  Value(int64_t v) : data_(v) {}
  Value(int v) : data_(int64_t{v}) {}
  Value(double v) : data_(v) {}
  Value(std::string v) : data_(std::move(v)) {}
  Value(const char* v) : data_(std::string(v)) {}
  Value(List v) : data_(std::make_shared<List>(std::move(v))) {}
  Value(Dict v) : data_(std::make_shared<Dict>(std::move(v))) {}
  Value(Function f) : data_(std::make_shared<Function>(std::move(f))) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<std::monostate>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(data_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(data_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Function>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_number() const {
    return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_);
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  Function& as_callable() const { return *std::get<std::shared_ptr<Function>>(data_); }
  const std::string& undefined_name() const { return std::get<Undefined>(data_).name; }

  bool truthy() const;
  // Python's str(): what {{ value }} prints. Undefined prints as "", none as "None".
  std::string to_string() const;
  // Python's repr(), as str() of a container shows its items: 'text' with escapes.
  std::string repr() const;
  std::string type_name() const;

 private:
  explicit Value(std::monostate v) : data_(v) {}
  explicit Value(Undefined v) : data_(std::move(v)) {}
  std::variant<Undefined, std::monostate, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Function>>
      data_;
};

// Arguments of a call: positional, then keyword (`tojson(indent=2)`).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  // The argument at `index` or named `name`; nullptr when neither was given.
  const Value* get(size_t index, const char* name) const;
  const Value* keyword(const char* name) const;
};

// Python's ==, where 1 == 1.0 == True.
bool equal(const Value& a, const Value& b);

// JSON as HF's tojson writes it: json.dumps with ensure_ascii=False; `indent` < 0 for one line.
struct JsonOptions {
  bool ensure_ascii = false;  // write non-ASCII characters as \uXXXX
  int indent = -1;
  bool sort_keys = false;
  std::string item_separator;  // empty: json.dumps' default ", " (or "," when indenting)
  std::string key_separator = ": ";
};
std::string to_json(const Value& v, const JsonOptions& options, int depth = 0);

// A string's characters (UTF-8 code points), since Jinja strings index and measure by
// character as Python's do.
std::vector<std::string> characters(const std::string& s);

}  // namespace inferd::jinja
