// The interpreter's state, shared by interpreter.cpp (statements, scopes, macros) and
// evaluate.cpp (expressions). Internal to src/tokenizer/jinja.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/interpreter.h"

namespace inferd::jinja::detail {

using Scope = std::map<std::string, Value>;
// Scopes from the outermost (template globals) in; shared, so that a macro keeps the scopes it
// was defined in and sees later assignments to them (jinja2's closures).
using ScopeChain = std::vector<std::shared_ptr<Scope>>;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Dict& globals, const RenderLimits& limits);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  std::string run(const StmtList& program);
  Value eval(const Expr& e);

 private:
  // statements (interpreter.cpp)
  Flow execute(const StmtList& body, std::string& out);
  Flow execute(const Stmt& st, std::string& out);
  Flow execute_unlocated(const Stmt& st, std::string& out);
  Flow run_for(const Stmt& st, std::string& out);
  List loop_items(const Stmt& st);
  Value loop_object(const List& items, size_t i);
  void assign(const Stmt& st, Value value);
  void bind(const std::vector<std::string>& targets, const Value& value, Location where);
  struct MacroInfo {
    ScopeChain closure;
    bool varargs = false;  // the body reads `varargs`: extra positional arguments go there
    bool kwargs = false;   // the body reads `kwargs`: unknown keyword arguments go there
  };
  Value make_macro(const Stmt& st);
  Value call_macro(const Stmt& macro, const MacroInfo& info, const Args& args);
  std::string render_scoped(const StmtList& body, Scope scope);

  // expressions (evaluate.cpp)
  Args arguments(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_slice(const Expr& e);

  // budget and lookups
  void tick(int64_t cost, Location where);
  const Value& checked(const Value& v, Location where);
  Value lookup(const std::string& name) const;
  void emit(std::string& out, const std::string& text, Location where);
  Scope& top() { return *scopes_.back(); }

  RenderLimits limits_;
  ScopeChain scopes_;
  ScopeChain captured_;  // scopes macros close over, emptied at the end (see ~Interpreter)
  int call_depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace inferd::jinja::detail
