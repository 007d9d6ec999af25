// Expression parser: Jinja's grammar, following the precedence of its own parser so that
// `-2 ** 2`, `a ~ b + c` and `1 + x is number` group as they do in jinja2.
#include "tokenizer/jinja/expr_parser.h"

#include <algorithm>

namespace inferd::jinja {
namespace {

// Counts one level of recursion for the lifetime of a parsing function.
class NestingGuard {
 public:
  NestingGuard(int& nesting, Location where) : nesting_(nesting) {
    if (++nesting_ > kMaxNesting) syntax_error(where, "expression nested too deeply");
  }
  ~NestingGuard() { --nesting_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  int& nesting_;
};

bool is_compare_op(const Token& t) {
  static const char* const kOps[] = {"==", "!=", "<", ">", "<=", ">="};
  return t.kind == Token::Kind::kOperator &&
         std::any_of(std::begin(kOps), std::end(kOps),
                     [&](const char* op) { return t.text == op; });
}

}  // namespace

const Token& ExprParser::peek(size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}
bool ExprParser::is_op(const char* op, size_t ahead) const {
  return peek(ahead).kind == Token::Kind::kOperator && peek(ahead).text == op;
}
bool ExprParser::is_name(const char* name, size_t ahead) const {
  return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
}
bool ExprParser::accept_op(const char* op) {
  return is_op(op) ? (++pos_, true) : false;
}
bool ExprParser::accept_name(const char* name) {
  return is_name(name) ? (++pos_, true) : false;
}
void ExprParser::expect_op(const char* op) {
  if (accept_op(op)) return;
  syntax_error(peek().where, std::string("expected '") + op + "', found " +
                                 (at_end() ? "the end of the tag" : "'" + peek().text + "'"));
}
std::string ExprParser::expect_name() {
  if (peek().kind != Token::Kind::kName) {
    syntax_error(peek().where, "expected a name, found " +
                                   (at_end() ? "the end of the tag" : "'" + peek().text + "'"));
  }
  return tokens_[pos_++].text;
}
void ExprParser::expect_end() {
  if (!at_end())
    syntax_error(peek().where, "expected the end of the tag, found '" + peek().text + "'");
}

ExprPtr ExprParser::node(Expr::Kind kind, Location where) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->where = where;
  return e;
}

// Records the height of a finished node and refuses trees too tall to walk safely.
ExprPtr ExprParser::finish(ExprPtr e) const {
  int height = 0;
  auto see = [&](const ExprPtr& child) {
    if (child) height = std::max(height, child->depth);
  };
  see(e->object);
  for (const auto& c : e->items) see(c);
  for (const auto& c : e->keys) see(c);
  for (const auto& c : e->keyword_values) see(c);
  e->depth = height + 1;
  if (e->depth > kMaxExprDepth) syntax_error(e->where, "expression is too long or too deep");
  return e;
}

ExprPtr ExprParser::binary(const std::string& op, ExprPtr left, ExprPtr right,
                           Location where) const {
  auto e = node(Expr::Kind::kBinary, where);
  e->name = op;
  e->items.push_back(std::move(left));
  e->items.push_back(std::move(right));
  return finish(std::move(e));
}

ExprPtr ExprParser::expression(bool with_condition) {
  NestingGuard guard(nesting_, peek().where);
  ExprPtr e = or_expr();
  while (with_condition && is_name("if")) {
    auto cond = node(Expr::Kind::kConditional, peek().where);
    ++pos_;
    cond->items.push_back(std::move(e));
    cond->items.push_back(or_expr());
    cond->items.push_back(accept_name("else") ? expression() : nullptr);
    e = finish(std::move(cond));
  }
  return e;
}

ExprPtr ExprParser::or_expr() {
  ExprPtr e = and_expr();
  while (is_name("or")) {
    const Location at = tokens_[pos_++].where;
    e = binary("or", std::move(e), and_expr(), at);
  }
  return e;
}

ExprPtr ExprParser::and_expr() {
  ExprPtr e = not_expr();
  while (is_name("and")) {
    const Location at = tokens_[pos_++].where;
    e = binary("and", std::move(e), not_expr(), at);
  }
  return e;
}

ExprPtr ExprParser::not_expr() {
  if (!is_name("not")) return comparison();
  NestingGuard guard(nesting_, peek().where);
  auto e = node(Expr::Kind::kUnary, tokens_[pos_++].where);
  e->name = "not";
  e->object = not_expr();
  return finish(std::move(e));
}

ExprPtr ExprParser::comparison() {
  const Location at = peek().where;
  ExprPtr first = additive();
  auto e = node(Expr::Kind::kCompare, at);
  while (true) {
    if (is_compare_op(peek())) {
      e->ops.push_back(tokens_[pos_++].text);
    } else if (is_name("in")) {
      ++pos_;
      e->ops.push_back("in");
    } else if (is_name("not") && is_name("in", 1)) {
      pos_ += 2;
      e->ops.push_back("not in");
    } else {
      break;
    }
    if (e->items.empty()) e->items.push_back(std::move(first));
    e->items.push_back(additive());
  }
  return e->ops.empty() ? std::move(first) : finish(std::move(e));
}

ExprPtr ExprParser::additive() {
  ExprPtr e = concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = tokens_[pos_++];
    e = binary(op.text, std::move(e), concat(), op.where);
  }
  return e;
}

ExprPtr ExprParser::concat() {
  ExprPtr e = multiplicative();
  while (is_op("~")) {
    const Location at = tokens_[pos_++].where;
    e = binary("~", std::move(e), multiplicative(), at);
  }
  return e;
}

ExprPtr ExprParser::multiplicative() {
  ExprPtr e = power();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = tokens_[pos_++];
    e = binary(op.text, std::move(e), power(), op.where);
  }
  return e;
}

ExprPtr ExprParser::power() {
  ExprPtr e = unary(true);
  while (is_op("**")) {
    const Location at = tokens_[pos_++].where;
    e = binary("**", std::move(e), unary(true), at);
  }
  return e;
}

// As in jinja2, a sign applies before postfix and filters: `-x|abs` is abs(-x).
ExprPtr ExprParser::unary(bool with_filter) {
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    NestingGuard guard(nesting_, peek().where);
    e = node(Expr::Kind::kUnary, peek().where);
    e->name = tokens_[pos_++].text;
    e->object = unary(false);
    e = finish(std::move(e));
  } else {
    e = primary();
  }
  e = postfix(std::move(e));
  return with_filter ? filters_and_tests(std::move(e)) : std::move(e);
}

ExprPtr ExprParser::postfix(ExprPtr e) {
  while (true) {
    const Location at = peek().where;
    if (accept_op(".")) {
      auto a = node(Expr::Kind::kAttribute, at);
      if (peek().kind == Token::Kind::kNumber && peek().number.is_int()) {
        a->kind = Expr::Kind::kSubscript;  // `x.0` is `x[0]`
        auto index = node(Expr::Kind::kLiteral, at);
        index->value = tokens_[pos_++].number;
        a->items.push_back(std::move(index));
      } else {
        a->name = expect_name();
      }
      a->object = std::move(e);
      e = finish(std::move(a));
    } else if (accept_op("[")) {
      e = subscript(std::move(e));
    } else if (accept_op("(")) {
      e = call(std::move(e), at);
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::filters_and_tests(ExprPtr e) {
  while (true) {
    const Location at = peek().where;
    if (accept_op("|")) {
      auto f = node(Expr::Kind::kFilter, at);
      f->name = expect_name();
      f->object = std::move(e);
      if (accept_op("(")) arguments(*f);
      e = finish(std::move(f));
    } else if (is_name("is")) {
      e = test(std::move(e));
    } else if (accept_op("(")) {
      e = call(std::move(e), at);
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::call(ExprPtr callee, Location at) {
  auto c = node(Expr::Kind::kCall, at);
  c->object = std::move(callee);
  arguments(*c);
  return finish(std::move(c));
}

// `x is [not] name`, `x is name(args)` or `x is name arg` (one primary, as in `is divisibleby 3`).
ExprPtr ExprParser::test(ExprPtr subject) {
  auto e = node(Expr::Kind::kTest, tokens_[pos_++].where);
  e->negated = accept_name("not");
  e->name = expect_name();
  e->object = std::move(subject);
  const Token& t = peek();
  if (accept_op("(")) {
    arguments(*e);
  } else if ((t.kind == Token::Kind::kNumber || t.kind == Token::Kind::kString ||
              (t.kind == Token::Kind::kName && t.text != "else" && t.text != "or" &&
               t.text != "and" && t.text != "is") ||
              is_op("[") || is_op("{")) &&
             !(t.kind == Token::Kind::kName &&
               (t.text == "if" || t.text == "in" || t.text == "not"))) {
    e->items.push_back(postfix(primary()));
  }
  return finish(std::move(e));
}

ExprPtr ExprParser::subscript(ExprPtr object) {
  auto e = node(Expr::Kind::kSubscript, object->where);
  e->object = std::move(object);
  ExprPtr first = is_op(":") ? nullptr : expression();
  if (!is_op(":")) {
    expect_op("]");
    e->items.push_back(std::move(first));
    return finish(std::move(e));
  }
  e->kind = Expr::Kind::kSlice;
  e->items.push_back(std::move(first));
  for (int part = 0; part < 2 && accept_op(":"); ++part) {
    e->items.push_back(is_op(":") || is_op("]") ? nullptr : expression());
  }
  e->items.resize(3);
  expect_op("]");
  return finish(std::move(e));
}

// After '(' : positional and keyword arguments up to ')'.
void ExprParser::arguments(Expr& call) {
  while (!accept_op(")")) {
    if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
      call.keyword_names.push_back(expect_name());
      ++pos_;
      call.keyword_values.push_back(expression());
    } else {
      if (!call.keyword_names.empty())
        syntax_error(peek().where, "positional argument after a keyword argument");
      call.items.push_back(expression());
    }
    if (!is_op(")")) expect_op(",");
  }
}

ExprPtr ExprParser::primary() {
  const Token& t = peek();
  if (t.kind == Token::Kind::kString) {
    auto e = node(Expr::Kind::kLiteral, t.where);
    std::string text;
    // Adjacent string literals concatenate, as in Python.
    while (peek().kind == Token::Kind::kString) text += tokens_[pos_++].text;
    e->value = Value(text);
    return e;
  }
  if (t.kind == Token::Kind::kNumber) {
    auto e = node(Expr::Kind::kLiteral, t.where);
    e->value = tokens_[pos_++].number;
    return e;
  }
  if (t.kind == Token::Kind::kName) return name_or_constant();
  if (accept_op("(")) {
    if (accept_op(")")) return finish(node(Expr::Kind::kTuple, t.where));  // `()`
    NestingGuard guard(nesting_, t.where);
    ExprPtr e = expression();
    if (is_op(",")) e = tuple_rest(std::move(e));
    expect_op(")");
    return e;
  }
  if (accept_op("[")) return sequence(Expr::Kind::kList, "]");
  if (accept_op("{")) return sequence(Expr::Kind::kDict, "}");
  syntax_error(t.where, t.kind == Token::Kind::kEnd
                            ? "expected an expression, found the end of the tag"
                            : "expected an expression, found '" + t.text + "'");
}

ExprPtr ExprParser::tuple_rest(ExprPtr first) {
  auto tuple = node(Expr::Kind::kTuple, first->where);
  tuple->items.push_back(std::move(first));
  while (accept_op(",") && !is_op(")") && !at_end()) tuple->items.push_back(expression());
  return finish(std::move(tuple));
}

ExprPtr ExprParser::block_filters(bool leading_bar) {
  auto e = node(Expr::Kind::kName, peek().where);
  e->name = kBlockName;
  for (bool first = true; first ? (!leading_bar || accept_op("|")) : accept_op("|");
       first = false) {
    auto f = node(Expr::Kind::kFilter, peek().where);
    f->name = expect_name();
    f->object = std::move(e);
    if (accept_op("(")) arguments(*f);
    e = finish(std::move(f));
  }
  return e;
}

ExprPtr ExprParser::name_or_constant() {
  auto e = node(Expr::Kind::kLiteral, peek().where);
  const std::string name = expect_name();
  if (name == "true" || name == "True") {
    e->value = Value(true);
  } else if (name == "false" || name == "False") {
    e->value = Value(false);
  } else if (name == "none" || name == "None") {
    e->value = Value::none();
  } else {
    e->kind = Expr::Kind::kName;
    e->name = name;
  }
  return e;
}

// `[a, b]` or `{k: v, ...}` after the opening bracket.
ExprPtr ExprParser::sequence(Expr::Kind kind, const char* close) {
  auto e = node(kind, peek().where);
  while (!accept_op(close)) {
    if (kind == Expr::Kind::kDict) {
      e->keys.push_back(expression());
      expect_op(":");
    }
    e->items.push_back(expression());
    if (!is_op(close)) expect_op(",");
  }
  return finish(std::move(e));
}

}  // namespace inferd::jinja
