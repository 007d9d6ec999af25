#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "util/error.h"

namespace inferd::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
    scopes_.emplace_back();
    for (const auto& [k, v] : globals.items) scopes_.back()[k] = v;
  }

  std::string run(const StmtList& program) {
    std::string out;
    execute(program, out);
    return out;
  }

 private:
  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto found = it->find(name); found != it->end()) return found->second;
    }
    return Value();
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
      syntax_error(st.where,
                   "cannot set an attribute of '" + st.targets[0] + "' (not a namespace)");
    }
    ns.as_dict().set(st.targets[1], std::move(value));
  }

  Flow run_for(const Stmt& st, std::string& out) {
    Value iterable = eval(*st.expr);
    List items;
    if (iterable.is_list()) {
      items = iterable.as_list();
    } else if (iterable.is_dict()) {
      for (const auto& [k, v] : iterable.as_dict().items) items.push_back(Value(k));
    } else if (iterable.is_string()) {
      for (std::string& c : characters(iterable.as_string())) items.push_back(Value(std::move(c)));
    } else if (!iterable.is_undefined() && !iterable.is_none()) {
      syntax_error(st.where, "cannot loop over a " + iterable.type_name());
    }
    if (st.loop_filter) {
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind_targets(st, item);
        if (eval(*st.loop_filter).truthy()) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (static_cast<int64_t>(items.size()) > limits_.max_loop_iterations)
      syntax_error(st.where, "loop is too long");
    if (items.empty()) return st.branches.size() > 1 ? execute(st.branches[1], out) : Flow::kNormal;
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
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
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value());
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
    scopes_.back()[st.targets[0]] = Value(Function([this, macro](std::vector<Value>& args) {
      if (++call_depth_ > limits_.max_call_depth)
        syntax_error(macro->where, "macro calls nested too deeply");
      scopes_.emplace_back();
      for (size_t i = 0; i < macro->parameters.size(); ++i) {
        Value v =
            i < args.size() ? args[i] : (macro->defaults[i] ? eval(*macro->defaults[i]) : Value());
        scopes_.back()[macro->parameters[i]] = v;
      }
      std::string out;
      execute(macro->branches[0], out);
      scopes_.pop_back();
      --call_depth_;
      return Value(out);
    }));
  }

  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_subscript(const Expr& e);
  Value eval_slice(const Expr& e);

  RenderLimits limits_;
  std::vector<std::map<std::string, Value>> scopes_;
  int call_depth_ = 0;
};

Value Interpreter::eval(const Expr& e) {
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
    case Expr::Kind::kAttribute: {
      Value object = eval(*e.object);
      if (object.is_dict()) {
        if (const Value* found = object.as_dict().find(e.name)) return *found;
      }
      return method(object, e.name, e.where);
    }
    case Expr::Kind::kSubscript:
      return eval_subscript(e);
    case Expr::Kind::kSlice:
      return eval_slice(e);
    case Expr::Kind::kCall:
      return eval_call(e);
    case Expr::Kind::kFilter: {
      Value object = eval(*e.object);
      std::vector<Value> args;
      for (const auto& a : e.items) args.push_back(eval(*a));
      // The keyword arguments real templates pass: tojson(indent=N), default(value, boolean=...).
      for (size_t i = 0; i < e.keyword_names.size(); ++i) {
        const std::string& key = e.keyword_names[i];
        if (key == "indent" || key == "boolean" || key == "default_value") {
          args.resize(std::max<size_t>(args.size(), key == "boolean" ? 2 : 1));
          args[key == "boolean" ? 1 : 0] = eval(*e.keyword_values[i]);
        }
      }
      if (auto result = apply_filter(e.name, object, args, e.where)) return *result;
      syntax_error(e.where, "unknown filter '" + e.name + "'");
    }
    case Expr::Kind::kTest: {
      Value object = eval(*e.object);
      std::vector<Value> args;
      for (const auto& a : e.items) args.push_back(eval(*a));
      auto result = apply_test(e.name, object, args);
      if (!result) syntax_error(e.where, "unknown test '" + e.name + "'");
      return Value(*result != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.object);
      if (e.name == "not") return Value(!v.truthy());
      if (!v.is_number()) syntax_error(e.where, "unary " + e.name + " of a " + v.type_name());
      if (e.name == "+") return v;
      return v.is_int() ? Value(-v.as_int()) : Value(-v.as_number());
    }
    case Expr::Kind::kBinary:
      return eval_binary(e);
    case Expr::Kind::kConditional:
      if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
      return e.items[2] ? eval(*e.items[2]) : Value();
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  Value a = eval(*e.items[0]);
  if (op == "and") return a.truthy() ? eval(*e.items[1]) : a;
  if (op == "or") return a.truthy() ? a : eval(*e.items[1]);
  Value b = eval(*e.items[1]);
  if (op == "~") return Value(a.to_string() + b.to_string());
  if (op == "==") return Value(equal(a, b));
  if (op == "!=") return Value(!equal(a, b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      found = b.as_string().find(a.to_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& v : b.as_list()) found = found || equal(a, v);
    } else if (b.is_dict()) {
      found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
    }
    return Value(found == (op == "in"));
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (op == "+" && a.is_list() && b.is_list()) {
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "*" && a.is_string() && b.is_int()) {
    const int64_t count = std::max<int64_t>(0, b.as_int());
    if (count > 0 &&
        a.as_string().size() > limits_.max_output_bytes / static_cast<uint64_t>(count)) {
      syntax_error(e.where, "string repetition exceeds the size limit");
    }
    std::string out;
    for (int64_t i = 0; i < count; ++i) out += a.as_string();
    return Value(out);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    if (op == "<") return Value(c < 0);
    if (op == ">") return Value(c > 0);
    if (op == "<=") return Value(c <= 0);
    if (op == ">=") return Value(c >= 0);
  }
  if (!a.is_number() || !b.is_number()) {
    syntax_error(e.where,
                 "cannot apply '" + op + "' to a " + a.type_name() + " and a " + b.type_name());
  }
  const bool ints = a.is_int() && b.is_int();
  const double x = a.as_number(), y = b.as_number();
  if (op == "<") return Value(x < y);
  if (op == ">") return Value(x > y);
  if (op == "<=") return Value(x <= y);
  if (op == ">=") return Value(x >= y);
  if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(x + y);
  if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(x - y);
  if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(x * y);
  if (op == "**") {
    const double p = std::pow(x, y);
    return ints && y >= 0 && std::fabs(p) < 9e15 ? Value(static_cast<int64_t>(p)) : Value(p);
  }
  if ((op == "/" || op == "//" || op == "%") && y == 0) syntax_error(e.where, "division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//")
    return ints ? Value(static_cast<int64_t>(std::floor(x / y))) : Value(std::floor(x / y));
  if (op == "%")
    return ints ? Value(((a.as_int() % b.as_int()) + b.as_int()) % b.as_int())
                : Value(std::fmod(x, y));
  syntax_error(e.where, "unknown operator '" + op + "'");
}

Value Interpreter::eval_call(const Expr& e) {
  Value callee = eval(*e.object);
  std::vector<Value> args;
  for (const auto& a : e.items) args.push_back(eval(*a));
  if (e.object->kind == Expr::Kind::kName && e.object->name == "namespace" &&
      callee.is_undefined()) {
    Dict ns;
    ns.is_namespace = true;
    for (size_t i = 0; i < e.keyword_names.size(); ++i)
      ns.set(e.keyword_names[i], eval(*e.keyword_values[i]));
    return Value(std::move(ns));
  }
  if (!callee.is_callable()) syntax_error(e.where, "calling something that is not a function");
  return callee.as_callable()(args);
}

Value Interpreter::eval_subscript(const Expr& e) {
  Value object = eval(*e.object);
  Value key = eval(*e.items[0]);
  if (object.is_dict()) {
    const Value* found = object.as_dict().find(key.to_string());
    return found ? *found : Value();
  }
  if ((object.is_list() || object.is_string()) && key.is_int()) {
    const List items = object.is_list() ? object.as_list() : List{};
    const std::vector<std::string> chars =
        object.is_string() ? characters(object.as_string()) : std::vector<std::string>{};
    const auto n = static_cast<int64_t>(object.is_list() ? items.size() : chars.size());
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i < 0 || i >= n) return Value();
    return object.is_list() ? items[static_cast<size_t>(i)] : Value(chars[static_cast<size_t>(i)]);
  }
  return method(object, key.to_string(), e.where);
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
    if (!v.is_int()) syntax_error(e.where, "slice bounds must be integers");
    return v.as_int();
  };
  const int64_t step = bound(e.items[2], 1);
  if (step == 0) syntax_error(e.where, "slice step cannot be zero");
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    return std::clamp(i < 0 ? i + n : i, lo, hi);
  };
  int64_t start =
      step > 0 ? clamp(bound(e.items[0], 0), 0, n) : clamp(bound(e.items[0], n - 1), -1, n - 1);
  int64_t stop = step > 0 ? clamp(bound(e.items[1], n), 0, n)
                          : (e.items[1] ? clamp(bound(e.items[1], 0), -1, n - 1) : -1);
  List list_out;
  std::string string_out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object.is_list()) {
      list_out.push_back(object.as_list()[static_cast<size_t>(i)]);
    } else {
      string_out += chars[static_cast<size_t>(i)];
    }
  }
  return object.is_list() ? Value(std::move(list_out)) : Value(string_out);
}

}  // namespace

std::string render(const StmtList& program, const Dict& globals, const RenderLimits& limits) {
  return Interpreter(globals, limits).run(program);
}

}  // namespace inferd::jinja
