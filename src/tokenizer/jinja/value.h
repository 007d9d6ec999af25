// Jinja values as jinja2 sees Python's: undefined, none, bool, int, float, str (plain or
// Markup), list (or tuple, or a dict view), dict (insertion-ordered, also used for namespace
// objects), generator (one pass, what map/select/... return) and callables. Containers are
// shared, as Python's objects are.
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
// A Python dict: keys are any hashable value (strings mostly; 1, 1.0 and True are one key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;  // `namespace()` objects allow attribute assignment
  const Value* find(const std::string& key) const;
  const Value* find(const Value& key) const;  // an unhashable key (list, dict) is an error
  void set(const std::string& key, Value value);
  void set(const Value& key, Value value);
  // String literals are string keys (without these, "x" would be ambiguous).
  const Value* find(const char* key) const;
  void set(const char* key, Value value);
};
// A Python generator: its items are produced once; iterating it again yields what is left.
struct Generator {
  List items;
  size_t next = 0;
};
using Function = std::function<Value(const Args& args)>;

// What a missing variable or key evaluates to; `hint` is jinja2's message for using it
// ("'x' is undefined", "'dict object' has no attribute 'y'").
struct Undefined {
  std::string hint;
};

// What kind of Python object a string or list value is, where jinja2 can tell them apart:
// tuples print as (..), Markup (`|safe`) escapes what is added to it, a range() is no list
// (it prints as range(a, b), which is not kept, so printing one is an error), dict views print
// as dict_items([..]).
enum class Flavor : uint8_t { kPlain, kTuple, kMarkup, kRange, kItemsView, kKeysView, kValuesView };

class Value {
 public:
  Value() : data_(Undefined{}) {}
  static Value none() { return Value(std::monostate{}); }
  static Value undefined(const std::string& name) {
    return Value(Undefined{name.empty() ? "a value is undefined" : "'" + name + "' is undefined"});
  }
  static Value missing(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value tuple(List items) { return Value(std::move(items), Flavor::kTuple); }
  static Value markup(std::string s) { return Value(std::move(s), Flavor::kMarkup); }
  static Value generator(List items);
  Value(bool v) : data_(v) {}  // NOLINT: implicit on purpose, values are built inline
  Value(int64_t v) : data_(v) {}
  Value(int v) : data_(int64_t{v}) {}
  Value(double v) : data_(v) {}
  Value(std::string v) : data_(std::move(v)) {}
  Value(const char* v) : data_(std::string(v)) {}
  Value(List v) : data_(std::make_shared<List>(std::move(v))) {}
  Value(List v, Flavor f) : data_(std::make_shared<List>(std::move(v))), flavor_(f) {}
  Value(std::string v, Flavor f) : data_(std::move(v)), flavor_(f) {}
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
  bool is_generator() const { return std::holds_alternative<std::shared_ptr<Generator>>(data_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Function>>(data_); }
  bool is_namespace() const { return is_dict() && as_dict().is_namespace; }
  bool is_mapping() const { return is_dict() && !as_dict().is_namespace; }
  Flavor flavor() const { return flavor_; }
  bool is_tuple() const { return is_list() && flavor_ == Flavor::kTuple; }
  bool is_markup() const { return is_string() && flavor_ == Flavor::kMarkup; }
  bool is_range() const { return is_list() && flavor_ == Flavor::kRange; }
  // keys(), values() or items() of a dict: iterable and sized, but not indexable.
  bool is_view() const { return is_list() && flavor_ >= Flavor::kItemsView; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_number() const {
    return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_);
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  Generator& as_generator() const { return *std::get<std::shared_ptr<Generator>>(data_); }
  Function& as_callable() const { return *std::get<std::shared_ptr<Function>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }

  bool truthy() const;
  // Python's str(): what {{ value }} prints. Undefined prints as "", none as "None". A
  // generator is an error: Python prints its memory address.
  std::string to_string() const;
  // Python's repr(), as str() of a container shows its items: 'text' with escapes.
  std::string repr() const;
  // Python's type name as jinja2's messages use it ("dict", "str", "NoneType", ...).
  std::string type_name() const;

 private:
  explicit Value(std::monostate v) : data_(v) {}
  explicit Value(Undefined v) : data_(std::move(v)) {}
  explicit Value(std::shared_ptr<Generator> g) : data_(std::move(g)) {}
  std::variant<Undefined, std::monostate, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Generator>, std::shared_ptr<Function>>
      data_;
  Flavor flavor_ = Flavor::kPlain;
};

// Arguments of a call: positional, then keyword (`tojson(indent=2)`).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  // The argument at `index` or named `name`; nullptr when neither was given.
  const Value* get(size_t index, const char* name) const;
  const Value* keyword(const char* name) const;
};

// Python's ==, where 1 == 1.0 == True and a tuple never equals a list.
bool equal(const Value& a, const Value& b);

// The items of an iterable as a Python for loop sees them: a list's items, a dict's keys, a
// string's characters, what is left of a generator (consuming it), nothing for undefined.
// Anything else is an error naming `what` iterates.
List iterate(const Value& v, const std::string& what);

// JSON as HF's tojson writes it: json.dumps with ensure_ascii=False; `indent` < 0 for one line.
struct JsonOptions {
  bool ensure_ascii = false;  // write non-ASCII characters as \uXXXX
  int indent = -1;
  std::string indent_text;  // a string indent (json.dumps takes one too); overrides `indent`
  bool sort_keys = false;
  std::string item_separator;  // empty: json.dumps' default ", " (or "," when indenting)
  std::string key_separator = ": ";
};
std::string to_json(const Value& v, const JsonOptions& options, int depth = 0);

// Markup's escape(): & < > ' " as HTML entities, as `Markup + str` escapes the str.
std::string escape_html(const std::string& s);

// A string's characters (UTF-8 code points), since Jinja strings index and measure by
// character as Python's do.
std::vector<std::string> characters(const std::string& s);

}  // namespace inferd::jinja
