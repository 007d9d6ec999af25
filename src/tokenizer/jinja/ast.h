// Jinja syntax tree: expressions and statements as parsed from a template, each node keeping
// its line and column for error messages.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace inferd::jinja {

struct Location {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // value
    kName,         // name
    kList,         // items
    kTuple,        // items, as a tuple
    kDict,         // keys[i]: items[i]
    kAttribute,    // object.name
    kSubscript,    // object[items[0]]
    kSlice,        // object[items[0]:items[1]:items[2]] (null items for absent bounds)
    kCall,         // object(items..., keyword args in names/keyword_values)
    kFilter,       // object | name(items...)
    kTest,         // object is [not] name(items...)
    kUnary,        // op object
    kBinary,       // items[0] op items[1] (arithmetic, `~`, `and`, `or`)
    kCompare,      // items[0] ops[0] items[1] ops[1] items[2] ... (chained, as in Python)
    kConditional,  // items[0] if items[1] else items[2]
  };
  Kind kind;
  Location where;
  Value value;
  std::string name;              // name, attribute, filter or test name, or operator
  std::vector<std::string> ops;  // kCompare: "==", "<", "in", "not in", ...
  int depth = 1;                 // height of this subtree, capped by the parser
  bool negated = false;          // `is not`
  ExprPtr object;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> keys;
  std::vector<std::string> keyword_names;
  std::vector<ExprPtr> keyword_values;
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,    // {% call m(args) %}: expr is the call, branches[0] the caller's body
    kFilterBlock,  // {% filter f %}: expr filters the body, which it reads as kBlockName
    kScope,        // a body with its own scope: {% generation %} (HF's extension)
  };
  Kind kind;
  Location where;
  std::string text;  // kText
  ExprPtr expr;      // kOutput value, kIf/kFor condition or iterable, kSet value
  // kFor loop variables, kSet targets (several: tuple unpacking), kMacro name
  std::vector<std::string> targets;
  std::string attribute;            // kSet/kSetBlock `ns.attribute`: targets[0] is the namespace
  std::vector<ExprPtr> conditions;  // kIf: condition of each branch (null for else)
  std::vector<StmtList> branches;   // kIf branches; kFor body and else; kMacro/kSetBlock body
  ExprPtr loop_filter;              // kFor: `for x in y if cond`
  std::vector<std::string> parameters;  // kMacro (and kCallBlock's caller) parameter names
  std::vector<ExprPtr> defaults;        // their default values (null when none)
};

// The name a {% filter %} block's rendered body has while its filters run; not a valid Jinja
// name, so no template can read it.
inline constexpr const char* kBlockName = " block";

}  // namespace inferd::jinja
