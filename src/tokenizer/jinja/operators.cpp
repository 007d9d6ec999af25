// Jinja operators: Python semantics for numbers (bool counts as int), strings and lists.
#include "tokenizer/jinja/operators.h"

#include <cmath>
#include <optional>

#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/lexer.h"

namespace inferd::jinja {
namespace {

bool numeric(const Value& v) {
  return v.is_number() || v.is_bool();
}
bool integral(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t int_of(const Value& v) {
  return v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
}
double float_of(const Value& v) {
  return v.is_bool() ? double{static_cast<double>(v.as_bool())} : v.as_number();
}

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b,
                             Location where) {
  syntax_error(where, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                          b.type_name() + "'");
}

// x op y for + - *, with overflow (Python would switch to big integers) as an error.
int64_t checked(char op, int64_t x, int64_t y, Location where) {
  int64_t r = 0;
  const bool overflowed = op == '+'   ? __builtin_add_overflow(x, y, &r)
                          : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r);
  if (overflowed) syntax_error(where, "integer overflow");
  return r;
}

Value repeat(const Value& seq, int64_t count, Location where, size_t max_size) {
  count = std::max<int64_t>(count, 0);
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
  if (seq.is_list()) max_size /= kBytesPerItem;
  if (count > 0 && unit > max_size / static_cast<uint64_t>(count))
    syntax_error(where, "repetition exceeds the size limit");
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out += seq.as_string();
    return Value(std::move(out), seq.flavor());
  }
  List out;
  for (int64_t i = 0; i < count; ++i)
    out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out), seq.flavor());
}

Value integer_op(const std::string& op, int64_t x, int64_t y, Location where) {
  if (op == "+" || op == "-" || op == "*") return Value(checked(op[0], x, y, where));
  if (y == 0 && (op == "//" || op == "%")) syntax_error(where, "division by zero");
  if (x == INT64_MIN && y == -1) syntax_error(where, "integer overflow");
  if (op == "//") return Value(x / y - ((x % y != 0 && (x < 0) != (y < 0)) ? 1 : 0));
  if (op == "%") return Value(x % y != 0 && (x < 0) != (y < 0) ? x % y + y : x % y);
  // "**" with a non-negative exponent stays an integer.
  int64_t result = 1;
  for (int64_t base = x, e = y; e > 0; e >>= 1) {
    if (e & 1) result = checked('*', result, base, where);
    if (e > 1) base = checked('*', base, base, where);
  }
  return Value(result);
}

Value float_op(const std::string& op, double x, double y, Location where) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) syntax_error(where, "division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  double m = std::fmod(x, y);  // Python's % takes the sign of the divisor
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value(m);
}

}  // namespace

void undefined_error(const Value& v, Location where) {
  syntax_error(where, v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
}

Value binary_op(const std::string& op, const Value& a, const Value& b, Location where,
                size_t max_size) {
  if (op == "~") return Value(a.to_string() + b.to_string());
  if (a.is_undefined()) undefined_error(a, where);
  if (b.is_undefined()) undefined_error(b, where);
  if (op == "+" && a.is_string() && b.is_string()) {
    // Markup + str escapes the str (and str + Markup too): markupsafe's __add__/__radd__.
    if (a.is_markup() || b.is_markup()) {
      return Value::markup((a.is_markup() ? a.as_string() : escape_html(a.as_string())) +
                           (b.is_markup() ? b.as_string() : escape_html(b.as_string())));
    }
    return Value(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.flavor() == b.flavor() &&
      (a.flavor() == Flavor::kPlain || a.is_tuple())) {
    if (a.as_list().size() + b.as_list().size() > max_size / kBytesPerItem)
      syntax_error(where, "list exceeds the size limit");
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out), a.flavor());
  }
  if (op == "%" && a.is_string()) {
    std::string text = percent_format(a.as_string(), b, a.is_markup());
    return a.is_markup() ? Value::markup(std::move(text)) : Value(std::move(text));
  }
  const bool a_seq = a.is_string() || (a.is_list() && !a.is_view() && !a.is_range());
  const bool b_seq = b.is_string() || (b.is_list() && !b.is_view() && !b.is_range());
  if (op == "*" && a_seq && integral(b)) return repeat(a, int_of(b), where, max_size);
  if (op == "*" && integral(a) && b_seq) return repeat(b, int_of(a), where, max_size);
  if (!numeric(a) || !numeric(b)) type_error(op, a, b, where);
  if (op == "/") return float_op(op, float_of(a), float_of(b), where);
  if (integral(a) && integral(b) && !(op == "**" && int_of(b) < 0))
    return integer_op(op, int_of(a), int_of(b), where);
  return float_op(op, float_of(a), float_of(b), where);
}

bool compare_op(const std::string& op, const Value& a, const Value& b, Location where) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) type_error(op, a, b, where);
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& v : b.as_list()) found = found || equal(a, v);
    } else if (b.is_mapping()) {
      found = b.as_dict().find(a) != nullptr;
    } else if (b.is_generator()) {
      // `in` consumes a generator up to the match, as Python's does.
      Generator& g = b.as_generator();
      while (!found && g.next < g.items.size()) found = equal(a, g.items[g.next++]);
    } else if (!b.is_undefined()) {
      type_error(op, a, b, where);
    }
    return found == (op == "in");
  }
  if (a.is_undefined()) undefined_error(a, where);
  if (b.is_undefined()) undefined_error(b, where);
  std::optional<int> order;
  if (a.is_list() && b.is_list() && !a.is_view() && !b.is_view() && a.is_tuple() == b.is_tuple()) {
    // Python compares sequences item by item.
    const List &x = a.as_list(), &y = b.as_list();
    size_t i = 0;
    while (i < x.size() && i < y.size() && equal(x[i], y[i])) ++i;
    if (i < x.size() && i < y.size()) return compare_op(op, x[i], y[i], where);
    order = x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    order = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else if (numeric(a) && numeric(b)) {
    const double x = float_of(a), y = float_of(b);
    if (integral(a) && integral(b)) {
      order = int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b) ? 1 : 0;
    } else if (std::isnan(x) || std::isnan(y)) {
      return false;
    } else {
      order = x < y ? -1 : x > y ? 1 : 0;
    }
  }
  if (!order) type_error(op, a, b, where);
  if (op == "<") return *order < 0;
  if (op == ">") return *order > 0;
  if (op == "<=") return *order <= 0;
  return *order >= 0;
}

}  // namespace inferd::jinja
