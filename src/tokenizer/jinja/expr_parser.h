// Expression parser for the tokens of one tag: recursive descent in Jinja's precedence order
// (conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary, postfix, filters/tests).
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace inferd::jinja {

// Nesting this deep (brackets, `not`, unary signs) is no chat template; it stops hostile input
// before it can exhaust the stack.
constexpr int kMaxNesting = 64;
// Height of an expression tree (long `a + b + ...` chains too), kept small for the same reason.
constexpr int kMaxExprDepth = 256;

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& peek(size_t ahead = 0) const;
  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  bool is_op(const char* op, size_t ahead = 0) const;
  bool is_name(const char* name, size_t ahead = 0) const;
  bool accept_op(const char* op);
  bool accept_name(const char* name);
  void expect_op(const char* op);
  std::string expect_name();
  void expect_end();

  // A full expression, with `x if c else y`; `with_condition` false stops before `if`
  // (a for loop's iterable, whose `if` is its filter).
  ExprPtr expression(bool with_condition = true);
  // After `first` and a ",": the rest of a tuple written without brackets (`a, b`).
  ExprPtr tuple_rest(ExprPtr first);
  // A {% filter %} or {% set x | f %} chain: `f(args) | g ...` applied to kBlockName.
  ExprPtr block_filters(bool leading_bar);

 private:
  ExprPtr node(Expr::Kind kind, Location where) const;
  ExprPtr finish(ExprPtr e) const;
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, Location where) const;
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr comparison();
  ExprPtr additive();
  ExprPtr concat();
  ExprPtr multiplicative();
  ExprPtr power();
  ExprPtr unary(bool with_filter);
  ExprPtr postfix(ExprPtr e);
  ExprPtr filters_and_tests(ExprPtr e);
  ExprPtr test(ExprPtr subject);
  ExprPtr call(ExprPtr callee, Location at);  // after "(": the arguments up to ")"
  ExprPtr subscript(ExprPtr object);
  void arguments(Expr& call);
  ExprPtr primary();
  ExprPtr name_or_constant();
  ExprPtr sequence(Expr::Kind kind, const char* close);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace inferd::jinja
