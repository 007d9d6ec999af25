// Interpreter: walks the statement tree with a stack of scopes (a for loop's body and a macro
// call get their own, as in jinja2), charging every step against a budget.
#include "tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"

namespace inferd::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

// True when `v` holds a namespace anywhere inside; storing such a value into a namespace is
// refused, which keeps namespaces from containing themselves (a cycle nothing could print).
bool holds_namespace(const Value& v, int depth) {
  if (depth > 100) return true;
  if (v.is_dict()) {
    if (v.as_dict().is_namespace) return true;
    for (const auto& [k, x] : v.as_dict().items) {
      if (holds_namespace(x, depth + 1)) return true;
    }
  }
  if (v.is_list()) {
    for (const Value& x : v.as_list()) {
      if (holds_namespace(x, depth + 1)) return true;
    }
  }
  return false;
}

class Interpreter {
 public:
  Interpreter(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
    scopes_.emplace_back();
    for (const auto& [k, v] : default_globals(limits.max_output_bytes / kBytesPerItem).items)
      scopes_.back()[k] = v;
    for (const auto& [k, v] : globals.items) scopes_.back()[k] = v;
  }

  std::string run(const StmtList& program) {
    std::string out;
    execute(program, out);
    return out;
  }

  Value eval(const Expr& e);

 private:
  void tick(int64_t cost, Location where) {
    steps_ += cost;
    if (steps_ > limits_.max_steps) syntax_error(where, "template takes too many steps to render");
  }

  // Charges for building a large value and refuses one larger than the output limit.
  const Value& checked(const Value& v, Location where) {
    const size_t size = v.is_string() ? v.as_string().size()
                        : v.is_list() ? v.as_list().size() * kBytesPerItem
                                      : 0;
    if (size > limits_.max_output_bytes) syntax_error(where, "a value exceeds the size limit");
    tick(static_cast<int64_t>(size / 64), where);
    return v;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto found = it->find(name); found != it->end()) return found->second;
    }
    return Value::undefined(name);
  }

  void emit(std::string& out, const std::string& text, Location where) {
    out += text;
    if (out.size() > limits_.max_output_bytes)
      syntax_error(where, "template output exceeds the size limit");
  }

  Flow execute(const StmtList& body, std::string& out) {
    for (const auto& st : body) {
      const Flow flow = execute(*st, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow execute(const Stmt& st, std::string& out) {
    tick(1, st.where);
    switch (st.kind) {
      case Stmt::Kind::kText:
        emit(out, st.text, st.where);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        if (!st.targets.empty()) return st.targets[0] == "break" ? Flow::kBreak : Flow::kContinue;
        emit(out, eval(*st.expr).to_string(), st.where);
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < st.branches.size(); ++i) {
          if (st.conditions[i] == nullptr || eval(*st.conditions[i]).truthy())
            return execute(st.branches[i], out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return run_for(st, out);
      case Stmt::Kind::kSet:
        assign(st, eval(*st.expr));
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        execute(st.branches[0], captured);
        assign(st, Value(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        define_macro(st);
        return Flow::kNormal;
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& st, Value value) {
    if (st.targets.size() == 1) {
      scopes_.back()[st.targets[0]] = std::move(value);
      return;
    }
    Value ns = lookup(st.targets[0]);
    if (!ns.is_dict() || !ns.as_dict().is_namespace) {
      syntax_error(st.where, "cannot set an attribute of '" + st.targets[0] + "' (a " +
                                 ns.type_name() + ", not a namespace)");
    }
    if (holds_namespace(value, 0))
      syntax_error(st.where, "a namespace cannot be stored in a namespace");
    ns.as_dict().set(st.targets[1], std::move(value));
  }

  List loop_items(const Stmt& st) {
    Value iterable = eval(*st.expr);
    List items;
    if (iterable.is_list()) {
      items = iterable.as_list();
    } else if (iterable.is_dict() && !iterable.as_dict().is_namespace) {
      for (const auto& [k, v] : iterable.as_dict().items) items.push_back(Value(k));
    } else if (iterable.is_string()) {
      for (std::string& c : characters(iterable.as_string())) items.push_back(Value(std::move(c)));
    } else if (!iterable.is_undefined()) {
      syntax_error(st.where, "cannot loop over a " + iterable.type_name());
    }
    tick(static_cast<int64_t>(items.size() / 16), st.where);
    if (!st.loop_filter) return items;
    List kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      bind_targets(st, item);
      if (eval(*st.loop_filter).truthy()) kept.push_back(item);
      scopes_.pop_back();
    }
    return kept;
  }

  Flow run_for(const Stmt& st, std::string& out) {
    const List items = loop_items(st);
    if (items.empty()) return st.branches.size() > 1 ? execute(st.branches[1], out) : Flow::kNormal;
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      tick(4, st.where);  // an iteration builds a scope and a loop object
      scopes_.emplace_back();
      bind_targets(st, items[static_cast<size_t>(i)]);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("previtem",
               i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem",
               i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
      scopes_.back()["loop"] = Value(std::move(loop));
      const Flow flow = execute(st.branches[0], out);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind_targets(const Stmt& st, const Value& item) {
    if (st.targets.size() == 1) {
      scopes_.back()[st.targets[0]] = item;
      return;
    }
    if (!item.is_list() || item.as_list().size() != st.targets.size()) {
      syntax_error(st.where, "cannot unpack a " + item.type_name() + " into " +
                                 std::to_string(st.targets.size()) + " names");
    }
    for (size_t k = 0; k < st.targets.size(); ++k)
      scopes_.back()[st.targets[k]] = item.as_list()[k];
  }

  void define_macro(const Stmt& st) {
    const Stmt* macro = &st;
    scopes_.back()[st.targets[0]] =
        Value(Function([this, macro](const Args& args) { return call_macro(*macro, args); }));
  }

  Value call_macro(const Stmt& macro, const Args& args) {
    if (call_depth_ >= limits_.max_call_depth)
      syntax_error(macro.where, "macro calls nested too deeply");
    if (args.positional.size() > macro.parameters.size())
      syntax_error(macro.where, "macro '" + macro.targets[0] + "' called with too many arguments");
    std::map<std::string, Value> scope;
    for (size_t i = 0; i < macro.parameters.size(); ++i) {
      const Value* given = args.get(i, macro.parameters[i].c_str());
      scope[macro.parameters[i]] = given != nullptr    ? *given
                                   : macro.defaults[i] ? eval(*macro.defaults[i])
                                                       : Value::undefined(macro.parameters[i]);
    }
    ++call_depth_;
    scopes_.push_back(std::move(scope));
    std::string out;
    execute(macro.branches[0], out);
    scopes_.pop_back();
    --call_depth_;
    return Value(out);
  }

  Args arguments(const Expr& e) {
    Args args;
    for (const auto& a : e.items) args.positional.push_back(eval(*a));
    for (size_t i = 0; i < e.keyword_names.size(); ++i)
      args.keywords.emplace_back(e.keyword_names[i], eval(*e.keyword_values[i]));
    return args;
  }

  Value eval_compare(const Expr& e) {
    Value left = eval(*e.items[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.items[i + 1]);
      if (!compare_op(e.ops[i], left, right, e.where)) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  Value eval_slice(const Expr& e);

  RenderLimits limits_;
  std::vector<std::map<std::string, Value>> scopes_;
  int call_depth_ = 0;
  int64_t steps_ = 0;
};

Value Interpreter::eval(const Expr& e) {
  tick(1, e.where);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList: {
      List out;
      for (const auto& item : e.items) out.push_back(eval(*item));
      return Value(std::move(out));
    }
    case Expr::Kind::kDict: {
      Dict out;
      for (size_t i = 0; i < e.items.size(); ++i)
        out.set(eval(*e.keys[i]).to_string(), eval(*e.items[i]));
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
        syntax_error(e.where, "a " + callee.type_name() + " is not callable");
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
      return e.items[2] ? eval(*e.items[2]) : Value::undefined("");
  }
  return Value();
}

Value Interpreter::eval_slice(const Expr& e) {
  Value object = eval(*e.object);
  if (!object.is_list() && !object.is_string())
    syntax_error(e.where, "cannot slice a " + object.type_name());
  const std::vector<std::string> chars =
      object.is_string() ? characters(object.as_string()) : std::vector<std::string>{};
  const auto n = static_cast<int64_t>(object.is_list() ? object.as_list().size() : chars.size());
  auto bound = [&](const ExprPtr& x, int64_t fallback) {
    if (!x) return fallback;
    Value v = eval(*x);
    if (v.is_none()) return fallback;
    if (!v.is_int()) syntax_error(e.where, "slice bounds must be integers");
    return v.as_int();
  };
  const int64_t step = bound(e.items[2], 1);
  if (step == 0) syntax_error(e.where, "slice step cannot be zero");
  // Python's rule: a negative index counts from the end; what is still out of range clamps.
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0 && (i += n) < 0) return lo;
    return std::min(i, hi);
  };
  const int64_t start =
      step > 0 ? clamp(bound(e.items[0], 0), 0, n) : clamp(bound(e.items[0], n - 1), -1, n - 1);
  const int64_t stop = step > 0 ? clamp(bound(e.items[1], n), 0, n)
                                : (e.items[1] ? clamp(bound(e.items[1], -n - 1), -1, n - 1) : -1);
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
  return object.is_list() ? Value(std::move(list_out)) : Value(string_out);
}

}  // namespace

std::string render(const StmtList& program, const Dict& globals, const RenderLimits& limits) {
  return Interpreter(globals, limits).run(program);
}

}  // namespace inferd::jinja
