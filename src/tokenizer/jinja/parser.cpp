#include "tokenizer/jinja/parser.h"

#include "tokenizer/jinja/lexer.h"

namespace inferd::jinja {
namespace {

constexpr int kMaxNesting = 64;  // deeper expressions or blocks are not real chat templates

// Parses the tokens of one tag.
class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOperator && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
  }
  bool accept_op(const char* op) { return is_op(op) ? (++pos_, true) : false; }
  bool accept_name(const char* name) { return is_name(name) ? (++pos_, true) : false; }
  void expect_op(const char* op) {
    if (!accept_op(op))
      syntax_error(peek().where, std::string("expected '") + op + "', found '" + peek().text + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::kName)
      syntax_error(peek().where, "expected a name, found '" + peek().text + "'");
    return tokens_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) syntax_error(peek().where, "unexpected '" + peek().text + "'");
  }

  ExprPtr expression() {
    if (++depth_ > kMaxNesting) syntax_error(peek().where, "expression nested too deeply");
    ExprPtr e = or_expr();
    if (is_name("if")) {
      auto cond = node(Expr::Kind::kConditional);
      ++pos_;
      cond->items.push_back(std::move(e));
      cond->items.push_back(or_expr());
      cond->items.push_back(accept_name("else") ? expression() : nullptr);
      e = std::move(cond);
    }
    --depth_;
    return e;
  }

 private:
  ExprPtr node(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->where = peek().where;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = node(Expr::Kind::kBinary);
    e->name = op;
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      auto e = node(Expr::Kind::kUnary);
      ++pos_;
      e->name = "not";
      e->object = not_expr();
      return e;
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr e = concat();
    while (true) {
      if (is_name("in")) {
        ++pos_;
        e = binary("in", std::move(e), concat());
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        e = binary("not in", std::move(e), concat());
      } else if (is_name("is")) {
        e = test(std::move(e));
      } else if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") ||
                 is_op(">=")) {
        std::string op = tokens_[pos_++].text;
        e = binary(op, std::move(e), concat());
      } else {
        return e;
      }
    }
  }
  ExprPtr test(ExprPtr subject) {
    auto e = node(Expr::Kind::kTest);
    ++pos_;  // is
    e->negated = accept_name("not");
    e->name = peek().kind == Token::Kind::kName ? expect_name()
                                                : tokens_[pos_++].text;  // `is none`, `is ==`?
    e->object = std::move(subject);
    if (accept_op("(")) arguments(*e);
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = additive();
    while (accept_op("~")) e = binary("~", std::move(e), additive());
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (is_op("+") || is_op("-")) {
      std::string op = tokens_[pos_++].text;
      e = binary(op, std::move(e), multiplicative());
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%") || is_op("**")) {
      std::string op = tokens_[pos_++].text;
      e = binary(op, std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      auto e = node(Expr::Kind::kUnary);
      e->name = tokens_[pos_++].text;
      e->object = unary();
      return e;
    }
    return filtered(postfix(primary()));
  }
  ExprPtr filtered(ExprPtr e) {
    while (accept_op("|")) {
      auto f = node(Expr::Kind::kFilter);
      f->name = expect_name();
      f->object = std::move(e);
      if (accept_op("(")) arguments(*f);
      e = postfix(std::move(f));
    }
    return e;
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        auto a = node(Expr::Kind::kAttribute);
        a->name = expect_name();
        a->object = std::move(e);
        e = std::move(a);
      } else if (accept_op("[")) {
        e = subscript(std::move(e));
      } else if (accept_op("(")) {
        auto c = node(Expr::Kind::kCall);
        c->object = std::move(e);
        arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr subscript(ExprPtr object) {
    auto e = node(Expr::Kind::kSubscript);
    e->object = std::move(object);
    ExprPtr first = is_op(":") ? nullptr : expression();
    if (!is_op(":")) {
      expect_op("]");
      e->items.push_back(std::move(first));
      return e;
    }
    e->kind = Expr::Kind::kSlice;
    e->items.push_back(std::move(first));
    for (int part = 0; part < 2 && accept_op(":"); ++part) {
      e->items.push_back(is_op(":") || is_op("]") ? nullptr : expression());
    }
    e->items.resize(3);
    expect_op("]");
    return e;
  }
  // After '(' : positional and keyword arguments up to ')'.
  void arguments(Expr& call) {
    while (!accept_op(")")) {
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        call.keyword_names.push_back(expect_name());
        ++pos_;
        call.keyword_values.push_back(expression());
      } else {
        call.items.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }
  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::kString || t.kind == Token::Kind::kNumber) {
      auto e = node(Expr::Kind::kLiteral);
      std::string text;
      // Adjacent string literals concatenate, as in Python.
      while (peek().kind == Token::Kind::kString) text += tokens_[pos_++].text;
      if (t.kind == Token::Kind::kNumber) {
        e->value = tokens_[pos_++].number;
      } else {
        e->value = Value(text);
      }
      return e;
    }
    if (t.kind == Token::Kind::kName) return name_or_constant();
    if (accept_op("(")) {
      ExprPtr e = expression();
      if (accept_op(",")) {  // a tuple: treated as a list
        auto list = node(Expr::Kind::kList);
        list->items.push_back(std::move(e));
        while (!is_op(")")) {
          list->items.push_back(expression());
          if (!is_op(")")) expect_op(",");
        }
        e = std::move(list);
      }
      expect_op(")");
      return e;
    }
    if (accept_op("[")) return list_literal();
    if (accept_op("{")) return dict_literal();
    syntax_error(t.where, t.kind == Token::Kind::kEnd ? "expression ends too early"
                                                      : "unexpected '" + t.text + "'");
  }
  ExprPtr name_or_constant() {
    auto e = node(Expr::Kind::kLiteral);
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
  ExprPtr list_literal() {
    auto e = node(Expr::Kind::kList);
    while (!accept_op("]")) {
      e->items.push_back(expression());
      if (!is_op("]")) expect_op(",");
    }
    return e;
  }
  ExprPtr dict_literal() {
    auto e = node(Expr::Kind::kDict);
    while (!accept_op("}")) {
      e->keys.push_back(expression());
      expect_op(":");
      e->items.push_back(expression());
      if (!is_op("}")) expect_op(",");
    }
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Parses the segment list into statements; block statements recurse until their end tag.
class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  StmtList parse_all() {
    std::string stop;
    StmtList body = parse_body({}, stop, nullptr);
    return body;
  }

 private:
  // Parses statements until one of `stops` opens a statement tag; `stop` gets that keyword and
  // `rest` (when given) the parser positioned after it.
  StmtList parse_body(const std::vector<std::string>& stops, std::string& stop,
                      std::unique_ptr<ExprParser>* rest) {
    if (++depth_ > kMaxNesting) syntax_error(where(), "blocks nested too deeply");
    StmtList body;
    while (index_ < segments_.size()) {
      const Segment& seg = segments_[index_++];
      if (seg.kind == Segment::Kind::kText) {
        auto st = make(Stmt::Kind::kText, seg.where);
        st->text = seg.text;
        body.push_back(std::move(st));
        continue;
      }
      auto p = std::make_unique<ExprParser>(tokenize_tag(seg));
      if (seg.kind == Segment::Kind::kExpression) {
        auto st = make(Stmt::Kind::kOutput, seg.where);
        st->expr = p->expression();
        p->expect_end();
        body.push_back(std::move(st));
        continue;
      }
      const std::string keyword = p->expect_name();
      for (const std::string& s : stops) {
        if (keyword == s) {
          stop = keyword;
          if (rest != nullptr) *rest = std::move(p);
          --depth_;
          return body;
        }
      }
      if (auto st = statement(keyword, *p, seg.where)) body.push_back(std::move(st));
    }
    if (!stops.empty()) syntax_error(where(), "missing {% " + stops.back() + " %}");
    --depth_;
    return body;
  }

  std::unique_ptr<Stmt> statement(const std::string& keyword, ExprParser& p, Location at) {
    if (keyword == "if") return if_statement(p, at);
    if (keyword == "for") return for_statement(p, at);
    if (keyword == "set") return set_statement(p, at);
    if (keyword == "macro") return macro_statement(p, at);
    if (keyword == "break" || keyword == "continue") {
      p.expect_end();
      auto st = make(Stmt::Kind::kOutput, at);
      st->targets = {keyword};  // loop control, carried out by the interpreter
      return st;
    }
    if (keyword == "generation" || keyword == "endgeneration") return nullptr;  // HF marker tags
    syntax_error(at, "unknown or misplaced statement '" + keyword + "'");
  }

  std::unique_ptr<Stmt> if_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kIf, at);
    st->conditions.push_back(p.expression());
    p.expect_end();
    while (true) {
      std::string stop;
      std::unique_ptr<ExprParser> rest;
      st->branches.push_back(parse_body({"elif", "else", "endif"}, stop, &rest));
      if (stop == "endif") break;
      st->conditions.push_back(stop == "elif" ? rest->expression() : nullptr);
      rest->expect_end();
    }
    return st;
  }

  std::unique_ptr<Stmt> for_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kFor, at);
    st->targets.push_back(p.expect_name());
    while (p.accept_op(",")) st->targets.push_back(p.expect_name());
    if (!p.accept_name("in")) syntax_error(p.peek().where, "expected 'in' in for loop");
    st->expr = p.expression();
    if (st->expr->kind == Expr::Kind::kConditional && st->expr->items[2] == nullptr) {
      // `for x in xs if cond`: parsed as a conditional without else; it is a loop filter.
      st->loop_filter = std::move(st->expr->items[1]);
      st->expr = std::move(st->expr->items[0]);
    }
    p.expect_end();
    std::string stop;
    st->branches.push_back(parse_body({"else", "endfor"}, stop, nullptr));
    if (stop == "else") st->branches.push_back(parse_body({"endfor"}, stop, nullptr));
    return st;
  }

  std::unique_ptr<Stmt> set_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kSet, at);
    st->targets.push_back(p.expect_name());
    if (p.accept_op(".")) st->targets.push_back(p.expect_name());
    if (p.accept_op("=")) {
      st->expr = p.expression();
      p.expect_end();
      return st;
    }
    p.expect_end();
    st->kind = Stmt::Kind::kSetBlock;
    std::string stop;
    st->branches.push_back(parse_body({"endset"}, stop, nullptr));
    return st;
  }

  std::unique_ptr<Stmt> macro_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kMacro, at);
    st->targets.push_back(p.expect_name());
    p.expect_op("(");
    while (!p.accept_op(")")) {
      st->parameters.push_back(p.expect_name());
      st->defaults.push_back(p.accept_op("=") ? p.expression() : nullptr);
      if (!p.is_op(")")) p.expect_op(",");
    }
    p.expect_end();
    std::string stop;
    st->branches.push_back(parse_body({"endmacro"}, stop, nullptr));
    return st;
  }

  static std::unique_ptr<Stmt> make(Stmt::Kind kind, Location at) {
    auto st = std::make_unique<Stmt>();
    st->kind = kind;
    st->where = at;
    return st;
  }
  Location where() const {
    return index_ < segments_.size() ? segments_[index_].where : Location{};
  }

  std::vector<Segment> segments_;
  size_t index_ = 0;
  int depth_ = 0;
};

}  // namespace

StmtList parse_template(std::string_view source) {
  return TemplateParser(split_template(source)).parse_all();
}

}  // namespace inferd::jinja
