// Interpreter: walks the statement tree with a chain of scopes as jinja2 scopes names: a for
// loop's iteration, a macro call, a call/filter block and {% generation %} get their own; `if`
// and `set` at the top level do not. Macros see the scopes they were defined in (late bound),
// never their caller's. Every step is charged against a budget.
#include "tokenizer/jinja/interpreter.h"

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter_impl.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/operators.h"
#include "util/error.h"

namespace inferd::jinja {
namespace detail {
namespace {

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

// Whether the expression or statement tree reads `name` (a macro's varargs/kwargs/caller).
bool reads(const Expr* e, const std::string& name) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  if (reads(e->object.get(), name)) return true;
  for (const auto* list : {&e->items, &e->keys, &e->keyword_values}) {
    for (const auto& x : *list) {
      if (reads(x.get(), name)) return true;
    }
  }
  return false;
}
bool reads(const StmtList& body, const std::string& name) {
  for (const auto& st : body) {
    if (reads(st->expr.get(), name) || reads(st->loop_filter.get(), name)) return true;
    for (const auto& c : st->conditions) {
      if (reads(c.get(), name)) return true;
    }
    for (const auto& d : st->defaults) {
      if (reads(d.get(), name)) return true;
    }
    for (const auto& b : st->branches) {
      if (reads(b, name)) return true;
    }
  }
  return false;
}

}  // namespace

Interpreter::Interpreter(const Dict& globals, const RenderLimits& limits) : limits_(limits) {
  scopes_.push_back(std::make_shared<Scope>());
  for (const auto& [k, v] : default_globals(limits.max_output_bytes / kBytesPerItem).items)
    top()[k.as_string()] = v;
  for (const auto& [k, v] : globals.items) top()[k.to_string()] = v;
}

Interpreter::~Interpreter() {
  // A macro stored in a scope it closes over is a reference cycle; emptying the captured
  // scopes breaks every such cycle.
  for (const auto& scope : captured_) scope->clear();
}

std::string Interpreter::run(const StmtList& program) {
  std::string out;
  execute(program, out);
  return out;
}

void Interpreter::tick(int64_t cost, Location where) {
  steps_ += cost;
  if (steps_ > limits_.max_steps) syntax_error(where, "template takes too many steps to render");
}

// Charges for building a large value and refuses one larger than the output limit.
const Value& Interpreter::checked(const Value& v, Location where) {
  const size_t size = v.is_string() ? v.as_string().size()
                      : v.is_list() ? v.as_list().size() * kBytesPerItem
                                    : 0;
  if (size > limits_.max_output_bytes) syntax_error(where, "a value exceeds the size limit");
  tick(static_cast<int64_t>(size / 64), where);
  return v;
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    if (auto found = (*it)->find(name); found != (*it)->end()) return found->second;
  }
  return Value::undefined(name);
}

void Interpreter::emit(std::string& out, const std::string& text, Location where) {
  out += text;
  if (out.size() > limits_.max_output_bytes)
    syntax_error(where, "template output exceeds the size limit");
}

Flow Interpreter::execute(const StmtList& body, std::string& out) {
  for (const auto& st : body) {
    const Flow flow = execute(*st, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

// Errors raised without a place (by values, filters, raise_exception) get this statement's.
Flow Interpreter::execute(const Stmt& st, std::string& out) {
  try {
    return execute_unlocated(st, out);
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind("chat template line ", 0) == 0) throw;
    const std::string prefix = "chat template: ";
    syntax_error(st.where, message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message);
  }
}

Flow Interpreter::execute_unlocated(const Stmt& st, std::string& out) {
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
      // The captured text is the body rendered in a scope of its own, then run through the
      // block's filters if it has any.
      const std::string captured = render_scoped(st.branches[0], {});
      if (!st.expr) {
        assign(st, Value(captured));
        return Flow::kNormal;
      }
      scopes_.push_back(std::make_shared<Scope>(Scope{{kBlockName, Value(captured)}}));
      Value filtered = eval(*st.expr);
      scopes_.pop_back();
      assign(st, filtered);
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      top()[st.targets[0]] = make_macro(st);
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      // The callee gets the block's body as a macro defined here, as its `caller` argument.
      Value callee = eval(*st.expr->object);
      if (!callee.is_callable()) syntax_error(st.where, "{% call %} of a " + callee.type_name());
      Args args = arguments(*st.expr);
      args.keywords.emplace_back("caller", make_macro(st));
      emit(out, checked(callee.as_callable()(args), st.where).to_string(), st.where);
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      const std::string body = render_scoped(st.branches[0], {});
      scopes_.push_back(std::make_shared<Scope>(Scope{{kBlockName, Value(body)}}));
      Value filtered = eval(*st.expr);
      scopes_.pop_back();
      emit(out, filtered.to_string(), st.where);
      return Flow::kNormal;
    }
    case Stmt::Kind::kScope:
      emit(out, render_scoped(st.branches[0], {}), st.where);
      return Flow::kNormal;
  }
  return Flow::kNormal;
}

std::string Interpreter::render_scoped(const StmtList& body, Scope scope) {
  scopes_.push_back(std::make_shared<Scope>(std::move(scope)));
  std::string out;
  try {
    execute(body, out);
  } catch (...) {
    scopes_.pop_back();
    throw;
  }
  scopes_.pop_back();
  return out;
}

void Interpreter::assign(const Stmt& st, Value value) {
  if (st.attribute.empty()) {
    bind(st.targets, value, st.where);
    return;
  }
  Value ns = lookup(st.targets[0]);
  if (!ns.is_namespace()) {
    syntax_error(st.where, "cannot set an attribute of '" + st.targets[0] + "' (a " +
                               ns.type_name() + ", not a namespace)");
  }
  if (st.attribute[0] == '_')
    syntax_error(st.where, "a namespace attribute cannot start with '_' (HF's sandbox refuses it)");
  if (holds_namespace(value, 0))
    syntax_error(st.where, "a namespace cannot be stored in a namespace");
  ns.as_dict().set(st.attribute, std::move(value));
}

// Assigns one name, or unpacks an iterable into several as Python does.
void Interpreter::bind(const std::vector<std::string>& targets, const Value& value,
                       Location where) {
  if (targets.size() == 1) {
    top()[targets[0]] = value;
    return;
  }
  if (value.is_undefined()) undefined_error(value, where);
  const List items = iterate(value, "unpacking");
  if (items.size() != targets.size()) {
    syntax_error(where, "cannot unpack " + std::to_string(items.size()) + " values into " +
                            std::to_string(targets.size()) + " names");
  }
  for (size_t k = 0; k < targets.size(); ++k) top()[targets[k]] = items[k];
}

List Interpreter::loop_items(const Stmt& st) {
  Value iterable = eval(*st.expr);
  if (iterable.is_none() || iterable.is_namespace() || iterable.is_number() || iterable.is_bool() ||
      iterable.is_callable())
    syntax_error(st.where, "'" + iterable.type_name() + "' object is not iterable");
  List items = iterate(iterable, "for");
  tick(static_cast<int64_t>(items.size() / 16), st.where);
  if (!st.loop_filter) return items;
  List kept;
  for (const Value& item : items) {
    scopes_.push_back(std::make_shared<Scope>());
    bind(st.targets, item, st.where);
    const bool keep = eval(*st.loop_filter).truthy();
    scopes_.pop_back();
    if (keep) kept.push_back(item);
  }
  return kept;
}

Value Interpreter::loop_object(const List& items, size_t i) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  Dict loop;
  loop.set("index", Value(k + 1));
  loop.set("index0", Value(k));
  loop.set("revindex", Value(n - k));
  loop.set("revindex0", Value(n - k - 1));
  loop.set("first", Value(k == 0));
  loop.set("last", Value(k == n - 1));
  loop.set("length", Value(n));
  loop.set("depth", Value(1));
  loop.set("depth0", Value(0));
  loop.set("previtem", i > 0 ? items[i - 1] : Value::missing("there is no previous item"));
  loop.set("nextitem", k + 1 < n ? items[i + 1] : Value::missing("there is no next item"));
  loop.set("cycle", Value(Function([k](const Args& a) {
             if (a.positional.empty()) fail("chat template: loop.cycle() needs at least one value");
             return a.positional[static_cast<size_t>(k) % a.positional.size()];
           })));
  return Value(std::move(loop));
}

Flow Interpreter::run_for(const Stmt& st, std::string& out) {
  const List items = loop_items(st);
  if (items.empty()) return st.branches.size() > 1 ? execute(st.branches[1], out) : Flow::kNormal;
  for (size_t i = 0; i < items.size(); ++i) {
    tick(4, st.where);  // an iteration builds a scope and a loop object
    // Each iteration starts from the enclosing scopes afresh: jinja2 does not carry names set
    // in one iteration into the next, nor out of the loop.
    scopes_.push_back(std::make_shared<Scope>());
    top()["loop"] = loop_object(items, i);
    bind(st.targets, items[i], st.where);
    Flow flow = Flow::kNormal;
    try {
      flow = execute(st.branches[0], out);
    } catch (...) {
      scopes_.pop_back();
      throw;
    }
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::make_macro(const Stmt& st) {
  const Stmt* macro = &st;
  MacroInfo info;
  info.closure = scopes_;  // the macro closes over the scopes it is defined in
  captured_.insert(captured_.end(), scopes_.begin(), scopes_.end());
  info.varargs = reads(st.branches[0], "varargs");
  info.kwargs = reads(st.branches[0], "kwargs");
  auto shared = std::make_shared<const MacroInfo>(std::move(info));
  return Value(Function(
      [this, macro, shared](const Args& args) { return call_macro(*macro, *shared, args); }));
}

Value Interpreter::call_macro(const Stmt& macro, const MacroInfo& info, const Args& args) {
  const std::string name = macro.kind == Stmt::Kind::kMacro ? macro.targets[0] : "caller";
  if (call_depth_ >= limits_.max_call_depth)
    syntax_error(macro.where, "macro calls nested too deeply");
  if (args.positional.size() > macro.parameters.size() && !info.varargs) {
    fail("chat template: macro '{}' takes not more than {} argument(s)", name,
         macro.parameters.size());
  }
  auto scope = std::make_shared<Scope>();
  Dict extra_keywords;
  for (const auto& [k, v] : args.keywords) {
    const bool known =
        std::find(macro.parameters.begin(), macro.parameters.end(), k) != macro.parameters.end();
    if (k == "caller" && !known) {
      (*scope)["caller"] = v;
    } else if (!known && !info.kwargs) {
      fail("chat template: macro '{}' takes no keyword argument '{}'", name, k);
    } else if (!known) {
      extra_keywords.set(k, v);
    }
  }
  ScopeChain saved = std::move(scopes_);
  scopes_ = info.closure;
  scopes_.push_back(scope);
  ++call_depth_;
  std::string out;
  try {
    // Parameters are bound in order, so a default can read the parameters before it.
    for (size_t i = 0; i < macro.parameters.size(); ++i) {
      const std::string& p = macro.parameters[i];
      const Value* keyword = args.keyword(p.c_str());
      if (keyword != nullptr && i < args.positional.size())
        fail("chat template: macro '{}' got multiple values for argument '{}'", name, p);
      const Value* given = i < args.positional.size() ? &args.positional[i] : keyword;
      (*scope)[p] = given != nullptr    ? *given
                    : macro.defaults[i] ? eval(*macro.defaults[i])
                                        : Value::missing("parameter '" + p + "' was not provided");
    }
    List rest;
    for (size_t i = macro.parameters.size(); i < args.positional.size(); ++i)
      rest.push_back(args.positional[i]);
    (*scope)["varargs"] = Value::tuple(std::move(rest));
    (*scope)["kwargs"] = Value(std::move(extra_keywords));
    execute(macro.branches[0], out);
  } catch (...) {
    scopes_ = std::move(saved);
    --call_depth_;
    throw;
  }
  scopes_ = std::move(saved);
  --call_depth_;
  return Value(out);
}

}  // namespace detail

std::string render(const StmtList& program, const Dict& globals, const RenderLimits& limits) {
  return detail::Interpreter(globals, limits).run(program);
}

}  // namespace inferd::jinja
