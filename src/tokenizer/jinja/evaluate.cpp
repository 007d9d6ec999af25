// Expression evaluation: names through the scope chain, literals, attribute and item access,
// slices, calls, filters, tests and operators, each charged against the step budget.
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter_impl.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"

namespace inferd::jinja::detail {

Args Interpreter::arguments(const Expr& e) {
  Args args;
  for (const auto& a : e.items) args.positional.push_back(eval(*a));
  for (size_t i = 0; i < e.keyword_names.size(); ++i)
    args.keywords.emplace_back(e.keyword_names[i], eval(*e.keyword_values[i]));
  return args;
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.items[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i + 1]);
    if (!compare_op(e.ops[i], left, right, e.where)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval(const Expr& e) {
  tick(1, e.where);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List out;
      for (const auto& item : e.items) out.push_back(eval(*item));
      return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(out)) : Value(std::move(out));
    }
    case Expr::Kind::kDict: {
      Dict out;
      for (size_t i = 0; i < e.items.size(); ++i) {
        Value key = eval(*e.keys[i]);
        out.set(key, eval(*e.items[i]));
      }
      return Value(std::move(out));
    }
    case Expr::Kind::kAttribute:
      return attribute(eval(*e.object), e.name, e.where, limits_.max_output_bytes);
    case Expr::Kind::kSubscript: {
      Value object = eval(*e.object);
      return item(object, eval(*e.items[0]), e.where, limits_.max_output_bytes);
    }
    case Expr::Kind::kSlice:
      return checked(eval_slice(e), e.where);
    case Expr::Kind::kCall: {
      Value callee = eval(*e.object);
      if (callee.is_undefined()) undefined_error(callee, e.where);
      if (!callee.is_callable())
        syntax_error(e.where, "'" + callee.type_name() + "' object is not callable");
      return checked(callee.as_callable()(arguments(e)), e.where);
    }
    case Expr::Kind::kFilter: {
      Value object = eval(*e.object);
      auto result = apply_filter(e.name, object, arguments(e), e.where, limits_.max_output_bytes);
      if (!result) syntax_error(e.where, "unknown filter '" + e.name + "'");
      return checked(*result, e.where);
    }
    case Expr::Kind::kTest: {
      Value object = eval(*e.object);
      auto result = apply_test(e.name, object, arguments(e), e.where);
      if (!result) syntax_error(e.where, "unknown test '" + e.name + "'");
      return Value(*result != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.object);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_float()) return Value(e.name == "-" ? -v.as_number() : v.as_number());
      if (e.name == "+" && (v.is_int() || v.is_bool()))
        return binary_op("+", Value(0), v, e.where, 0);
      if (e.name == "+")
        syntax_error(e.where, "bad operand type for unary +: '" + v.type_name() + "'");
      if (!v.is_int() && !v.is_bool())
        syntax_error(e.where, "bad operand type for unary -: '" + v.type_name() + "'");
      return binary_op(e.name, Value(0), v, e.where, limits_.max_output_bytes);
    }
    case Expr::Kind::kBinary: {
      Value a = eval(*e.items[0]);
      if (e.name == "and") return a.truthy() ? eval(*e.items[1]) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.items[1]);
      return checked(binary_op(e.name, a, eval(*e.items[1]), e.where, limits_.max_output_bytes),
                     e.where);
    }
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kConditional:
      if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
      return e.items[2] ? eval(*e.items[2])
                        : Value::missing(
                              "the inline if-expression evaluated to false and no "
                              "else section was defined");
  }
  return Value();
}

// Python's slicing of lists, tuples and strings. jinja2 slices with Python's own subscript
// (not its getitem), so slicing anything else, or with bounds that are not integers, raises.
Value Interpreter::eval_slice(const Expr& e) {
  Value object = eval(*e.object);
  if (object.is_undefined()) undefined_error(object, e.where);
  auto bound_value = [&](const ExprPtr& x) { return x ? eval(*x) : Value::none(); };
  const Value bounds[3] = {bound_value(e.items[0]), bound_value(e.items[1]),
                           bound_value(e.items[2])};
  const bool sliceable = (object.is_list() && !object.is_view()) || object.is_string();
  const bool integral = std::all_of(std::begin(bounds), std::end(bounds), [](const Value& b) {
    return b.is_none() || b.is_int() || b.is_bool();
  });
  if (!sliceable) syntax_error(e.where, "'" + object.type_name() + "' object is not subscriptable");
  if (!integral) syntax_error(e.where, "slice indices must be integers or None");
  const std::vector<std::string> chars =
      object.is_string() ? characters(object.as_string()) : std::vector<std::string>{};
  const auto n = static_cast<int64_t>(object.is_list() ? object.as_list().size() : chars.size());
  auto bound = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    return v.is_bool() ? int64_t{v.as_bool()} : v.as_int();
  };
  const int64_t step = bound(bounds[2], 1);
  if (step == 0) syntax_error(e.where, "slice step cannot be zero");
  // Python's rule: a negative index counts from the end; what is still out of range clamps.
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0 && (i += n) < 0) return lo;
    return std::min(i, hi);
  };
  const int64_t start =
      step > 0 ? clamp(bound(bounds[0], 0), 0, n) : clamp(bound(bounds[0], n - 1), -1, n - 1);
  const int64_t stop = step > 0
                           ? clamp(bound(bounds[1], n), 0, n)
                           : (!bounds[1].is_none() ? clamp(bound(bounds[1], 0), -1, n - 1) : -1);
  List list_out;
  std::string string_out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_list()) {
      list_out.push_back(object.as_list()[static_cast<size_t>(i)]);
    } else {
      string_out += chars[static_cast<size_t>(i)];
    }
    if (step > 0 ? i > INT64_MAX - step : i < INT64_MIN - step) break;
  }
  return object.is_list() ? Value(std::move(list_out), object.flavor())
                          : Value(std::move(string_out), object.flavor());
}

}  // namespace inferd::jinja::detail
