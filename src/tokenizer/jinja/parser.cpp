// Template parser: segments -> statement tree. Block statements recurse until their end tag;
// an unknown or unclosed statement is an error naming its line and column.
#include "tokenizer/jinja/parser.h"

#include "tokenizer/jinja/expr_parser.h"
#include "tokenizer/jinja/lexer.h"

namespace inferd::jinja {
namespace {

class TemplateParser {
 public:
  explicit TemplateParser(Lexed lexed) : lexed_(std::move(lexed)) {}

  StmtList parse_all() {
    std::string stop;
    return parse_body({}, stop, nullptr, {});
  }

 private:
  // Parses statements until one of `stops` opens a statement tag; `stop` gets that keyword and
  // `rest` (when given) the parser positioned after it. `opener` is where the block began.
  StmtList parse_body(const std::vector<std::string>& stops, std::string& stop,
                      std::unique_ptr<ExprParser>* rest, Location opener) {
    if (++depth_ > kMaxNesting) syntax_error(opener, "blocks nested too deeply");
    StmtList body;
    const auto& segments = lexed_.segments;
    while (index_ < segments.size()) {
      const Segment& seg = segments[index_++];
      if (seg.kind == Segment::Kind::kText) {
        auto st = make(Stmt::Kind::kText, lexed_.lines.at(seg.offset));
        st->text = seg.text;
        body.push_back(std::move(st));
        continue;
      }
      auto p = std::make_unique<ExprParser>(tokenize_tag(seg, lexed_.lines));
      if (seg.kind == Segment::Kind::kExpression) {
        auto st = make(Stmt::Kind::kOutput, seg.where);
        st->expr = p->expression();
        if (p->is_op(",")) st->expr = p->tuple_rest(std::move(st->expr));  // {{ a, b }}
        p->expect_end();
        body.push_back(std::move(st));
        continue;
      }
      const std::string keyword = p->expect_name();
      for (const std::string& s : stops) {
        if (keyword == s) {
          stop = keyword;
          if (rest != nullptr) {
            *rest = std::move(p);
          } else {
            p->expect_end();
          }
          --depth_;
          return body;
        }
      }
      if (auto st = statement(keyword, *p, seg.where)) body.push_back(std::move(st));
    }
    if (!stops.empty()) {
      syntax_error(opener, "missing {% " + stops.back() + " %} for the block opened here");
    }
    --depth_;
    return body;
  }

  std::unique_ptr<Stmt> statement(const std::string& keyword, ExprParser& p, Location at) {
    if (keyword == "if") return if_statement(p, at);
    if (keyword == "for") return for_statement(p, at);
    if (keyword == "set") return set_statement(p, at);
    if (keyword == "macro") return macro_statement(p, at);
    if (keyword == "call") return call_statement(p, at);
    if (keyword == "filter") {
      auto st = make(Stmt::Kind::kFilterBlock, at);
      st->expr = p.block_filters(false);
      p.expect_end();
      st->branches.push_back(block_body("endfilter", at));
      return st;
    }
    if (keyword == "break" || keyword == "continue") {
      p.expect_end();
      if (loops_ == 0) syntax_error(at, "{% " + keyword + " %} outside a for loop");
      auto st = make(Stmt::Kind::kOutput, at);
      st->targets = {keyword};  // loop control, carried out by the interpreter
      return st;
    }
    // HF's AssistantTracker marks assistant text with this; the body renders as it is, in
    // its own scope (jinja2 runs it as a call block's caller).
    if (keyword == "generation") {
      p.expect_end();
      auto st = make(Stmt::Kind::kScope, at);
      st->branches.push_back(block_body("endgeneration", at));
      return st;
    }
    syntax_error(at, "unknown or misplaced statement '" + keyword +
                         "' (supported: if, for, set, macro, call, filter, generation, break, "
                         "continue)");
  }

  // A body up to `end`, as a caller's or filter's: loop controls of an enclosing loop do not
  // reach into it.
  StmtList block_body(const char* end, Location at) {
    std::string stop;
    const int outer_loops = loops_;
    loops_ = 0;
    StmtList body = parse_body({end}, stop, nullptr, at);
    loops_ = outer_loops;
    return body;
  }

  std::unique_ptr<Stmt> if_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kIf, at);
    st->conditions.push_back(p.expression());
    p.expect_end();
    while (true) {
      std::string stop;
      std::unique_ptr<ExprParser> rest;
      st->branches.push_back(parse_body({"elif", "else", "endif"}, stop, &rest, at));
      if (stop == "endif") {
        rest->expect_end();
        break;
      }
      if (stop == "else" && st->conditions.back() == nullptr)
        syntax_error(at, "{% if %} has two {% else %} branches");
      st->conditions.push_back(stop == "elif" ? rest->expression() : nullptr);
      rest->expect_end();
    }
    return st;
  }

  std::unique_ptr<Stmt> for_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kFor, at);
    const bool parenthesized = p.accept_op("(");
    st->targets.push_back(p.expect_name());
    while (p.accept_op(",") && !p.is_op(")") && !p.is_name("in"))
      st->targets.push_back(p.expect_name());
    if (parenthesized) p.expect_op(")");
    if (!p.accept_name("in")) syntax_error(p.peek().where, "expected 'in' in the for loop");
    st->expr = p.expression(false);
    if (p.accept_name("if")) st->loop_filter = p.expression(false);
    if (p.is_name("recursive")) syntax_error(p.peek().where, "recursive loops are not supported");
    p.expect_end();
    std::string stop;
    ++loops_;
    st->branches.push_back(parse_body({"else", "endfor"}, stop, nullptr, at));
    --loops_;
    if (stop == "else") st->branches.push_back(parse_body({"endfor"}, stop, nullptr, at));
    return st;
  }

  // `set x = v`, `set a, b = v`, `set ns.x = v`, or a block `set x %}...{% endset` with
  // optional filters (`set x | trim %}`).
  std::unique_ptr<Stmt> set_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kSet, at);
    const bool parenthesized = p.accept_op("(");
    st->targets.push_back(p.expect_name());
    if (!parenthesized && p.accept_op(".")) {
      st->attribute = p.expect_name();
    } else {
      while (p.accept_op(",") && !p.is_op(")") && !p.is_op("="))
        st->targets.push_back(p.expect_name());
      if (parenthesized) p.expect_op(")");
    }
    if (p.accept_op("=")) {
      st->expr = p.expression();
      if (p.is_op(",")) st->expr = p.tuple_rest(std::move(st->expr));  // `set a, b = 1, 2`
      p.expect_end();
      return st;
    }
    if (st->targets.size() > 1) syntax_error(at, "a {% set %} block assigns one name");
    if (p.is_op("|")) st->expr = p.block_filters(true);
    p.expect_end();
    st->kind = Stmt::Kind::kSetBlock;
    std::string stop;
    st->branches.push_back(parse_body({"endset"}, stop, nullptr, at));
    return st;
  }

  void parameter_list(ExprParser& p, Stmt& st) {
    p.expect_op("(");
    while (!p.accept_op(")")) {
      st.parameters.push_back(p.expect_name());
      st.defaults.push_back(p.accept_op("=") ? p.expression() : nullptr);
      if (!p.is_op(")")) p.expect_op(",");
    }
  }

  std::unique_ptr<Stmt> macro_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kMacro, at);
    st->targets.push_back(p.expect_name());
    parameter_list(p, *st);
    p.expect_end();
    // a loop around the macro's definition does not make `break` valid inside it
    st->branches.push_back(block_body("endmacro", at));
    return st;
  }

  // `{% call m(args) %}` or `{% call(params) m(args) %}`: m's caller() renders the body.
  std::unique_ptr<Stmt> call_statement(ExprParser& p, Location at) {
    auto st = make(Stmt::Kind::kCallBlock, at);
    if (p.is_op("(")) parameter_list(p, *st);
    st->expr = p.expression();
    if (st->expr->kind != Expr::Kind::kCall) syntax_error(at, "{% call %} needs a macro call");
    p.expect_end();
    st->branches.push_back(block_body("endcall", at));
    return st;
  }

  static std::unique_ptr<Stmt> make(Stmt::Kind kind, Location at) {
    auto st = std::make_unique<Stmt>();
    st->kind = kind;
    st->where = at;
    return st;
  }

  Lexed lexed_;
  size_t index_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // enclosing for loops, for break/continue
};

}  // namespace

StmtList parse_template(std::string_view source) {
  return TemplateParser(split_template(source)).parse_all();
}

}  // namespace inferd::jinja
