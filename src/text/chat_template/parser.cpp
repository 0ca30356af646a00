#include "parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "lexer.hpp"

namespace meshnn::text::chat_template_detail {
namespace {

// Deeper nesting than any template needs; it keeps a hostile one from exhausting the stack.
constexpr int kMaxNesting = 200;

bool one_of(std::string_view s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() { return subparse({}); }

 private:
  // ---- tokens ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool at_name(std::string_view name) const { return cur().type == TokenType::Name && cur().text == name; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool skip_op(std::string_view op) { return at_op(op) ? (next(), true) : false; }
  bool skip_name(std::string_view name) { return at_name(name) ? (next(), true) : false; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::End: return "end of template";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::VarEnd: return "end of print statement";
      case TokenType::String: return "string";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void unexpected(std::string_view wanted) const {
    syntax_error(cur().line, fmt::format("expected {}, got {}", wanted, describe(cur())));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected(fmt::format("'{}'", op));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) unexpected("end of statement block");
    next();
  }

  struct Nesting {
    explicit Nesting(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) syntax_error(p_.cur().line, "template nested too deeply");
    }
    ~Nesting() { --p_.depth_; }
    Parser& p_;
  };

  static std::unique_ptr<Expr> node(ExprKind kind, int line, std::vector<ExprPtr> operands = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->operands = std::move(operands);
    return e;
  }
  static std::vector<ExprPtr> pair(ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    v.push_back(std::move(b));
    return v;
  }

  // ---- statements ----

  // Statements up to a {% tag %} named in `end_tags`, left as the current token.
  Body subparse(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::End) {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (std::string_view tag : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
        syntax_error(t.line, "unexpected end of template, expected " + wanted);
      }
      if (t.type == TokenType::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->line = t.line;
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == TokenType::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Print;
        s->line = t.line;
        s->expr = parse_tuple(true, {});
        if (cur().type != TokenType::VarEnd) unexpected("end of print statement");
        next();
        body.push_back(std::move(s));
      } else {
        next();  // {%
        if (cur().type == TokenType::Name && one_of(cur().text, end_tags)) return body;
        body.push_back(parse_statement());
      }
    }
  }

  // The body of a macro or call block, which Jinja2 compiles to a Python function: the loops
  // around it are not its loops.
  Body function_body(std::initializer_list<std::string_view> end_tags) {
    const int outer_loops = loop_depth_;
    loop_depth_ = 0;
    Body body = subparse(end_tags);
    loop_depth_ = outer_loops;
    return body;
  }

  // The name of the end tag subparse() stopped at, which is consumed with its %}.
  std::string end_tag() {
    std::string name = next().text;
    expect_block_end();
    return name;
  }

  StmtPtr parse_statement() {
    const Nesting nesting(*this);
    if (cur().type != TokenType::Name) unexpected("a tag name");
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    const std::string tag = next().text;
    if (tag == "if") {
      s->kind = StmtKind::If;
      std::string end = "elif";
      while (end == "elif") {
        ExprPtr condition = parse_tuple(false, {});
        expect_block_end();
        Body body = subparse({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(condition), std::move(body));
        end = next().text;
        if (end != "elif") expect_block_end();
      }
      if (end == "else") {
        s->else_body = subparse({"endif"});
        end_tag();
      }
    } else if (tag == "for") {
      s->kind = StmtKind::For;
      s->target = parse_target({"in"});
      if (!skip_name("in")) unexpected("'in'");
      s->expr = parse_tuple(false, {"recursive"});
      if (skip_name("if")) s->condition = parse_expression(true);
      if (at_name("recursive")) syntax_error(cur().line, "recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->body = subparse({"endfor", "else"});
      --loop_depth_;
      if (end_tag() == "else") {
        s->else_body = subparse({"endfor"});
        end_tag();
      }
    } else if (tag == "set") {
      parse_set(*s);
    } else if (tag == "macro") {
      parse_macro(*s);
    } else if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filters(node(ExprKind::Captured, s->line), true);
      expect_block_end();
      s->body = subparse({"endfilter"});
      end_tag();
    } else if (tag == "with") {
      s->kind = StmtKind::Scope;
      while (cur().type != TokenType::BlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string name = expect_name();
        expect_op("=");
        s->params.emplace_back(std::move(name), parse_expression(true));
      }
      expect_block_end();
      s->body = subparse({"endwith"});
      end_tag();
    } else if (tag == "generation") {
      s->kind = StmtKind::Scope;  // transformers renders it through a call block: a scope of its own
      expect_block_end();
      s->body = function_body({"endgeneration"});
      end_tag();
    } else if (tag == "print") {
      s->kind = StmtKind::Print;
      s->expr = parse_tuple(true, {});
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
      // Jinja2 compiles the body to Python, where a break outside a loop is a syntax error.
      if (loop_depth_ == 0) syntax_error(s->line, fmt::format("'{}' outside a for loop", tag));
      expect_block_end();
    } else if (one_of(tag, {"block", "extends", "include", "import", "from", "call", "autoescape"})) {
      syntax_error(s->line, fmt::format("the '{}' tag is not supported", tag));
    } else {
      syntax_error(s->line, fmt::format("unknown tag '{}'", tag));
    }
    return s;
  }

  void parse_set(Stmt& s) {
    if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == ".") {
      auto target = node(ExprKind::Attr, cur().line);
      auto name = node(ExprKind::Name, cur().line);
      name->name = next().text;
      next();  // .
      target->name = expect_name();
      target->operands.push_back(std::move(name));
      s.target = std::move(target);
    } else {
      s.target = parse_target({});
    }
    if (skip_op("=")) {
      s.kind = StmtKind::Set;
      s.expr = parse_tuple(true, {});
      expect_block_end();
      return;
    }
    if (s.target->kind != ExprKind::Name) syntax_error(s.line, "a block set assigns one name");
    s.kind = StmtKind::SetBlock;
    s.expr = parse_filters(node(ExprKind::Captured, s.line), false);
    expect_block_end();
    s.body = subparse({"endset"});
    end_tag();
  }

  void parse_macro(Stmt& s) {
    s.kind = StmtKind::Macro;
    s.text = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (skip_op(")")) break;
      std::string name = expect_name();
      ExprPtr default_value = skip_op("=") ? parse_expression(true) : nullptr;
      if (!default_value && !s.params.empty() && s.params.back().second)
        syntax_error(s.line, "non-default argument follows default argument");
      s.params.emplace_back(std::move(name), std::move(default_value));
    }
    expect_block_end();
    s.body = function_body({"endmacro"});
    end_tag();
  }

  // An assignment target: a name, or names and parenthesized targets separated by commas.
  ExprPtr parse_target(std::initializer_list<std::string_view> end_names) {
    std::vector<ExprPtr> items;
    bool tuple = false;
    const int line = cur().line;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        tuple = true;
        if (cur().type == TokenType::BlockEnd || at_op("=") || at_op(")") ||
            (cur().type == TokenType::Name && one_of(cur().text, end_names)))
          break;
      }
      if (skip_op("(")) {
        items.push_back(parse_target({}));
        expect_op(")");
      } else {
        auto name = node(ExprKind::Name, cur().line);
        name->name = expect_name();
        if (one_of(name->name, {"true", "false", "none", "True", "False", "None"}))
          syntax_error(name->line, fmt::format("cannot assign to '{}'", name->name));
        items.push_back(std::move(name));
      }
    }
    if (!tuple) return std::move(items[0]);
    return node(ExprKind::Tuple, line, std::move(items));
  }

  // ---- expressions ----

  bool at_tuple_end(std::initializer_list<std::string_view> extra_end_names) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || (t.type == TokenType::Operator && t.text == ")"))
      return true;
    return t.type == TokenType::Name && one_of(t.text, extra_end_names);
  }

  // Expressions separated by commas make a tuple (`{{ a, b }}`, `set a, b = 1, 2`).
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end_names,
                      bool explicit_parentheses = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end_names)) break;
      items.push_back(parse_expression(with_condexpr));
      if (!at_op(",")) break;
      tuple = true;
    }
    if (!tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) unexpected("an expression");
    }
    return node(ExprKind::Tuple, line, std::move(items));
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      std::vector<ExprPtr> ops = pair(std::move(expr), std::move(condition));
      ops.push_back(std::move(otherwise));
      expr = node(ExprKind::Cond, line, std::move(ops));
    }
    return expr;
  }

  ExprPtr parse_or() { return binary_level({"or"}, &Parser::parse_and); }
  ExprPtr parse_and() { return binary_level({"and"}, &Parser::parse_not); }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Nesting nesting(*this);
      const int line = next().line;
      std::vector<ExprPtr> operand;
      operand.push_back(parse_not());
      return node(ExprKind::Not, line, std::move(operand));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> operands;
    std::vector<std::string> ops;
    while (true) {
      std::string op;
      if (cur().type == TokenType::Operator && one_of(cur().text, {"==", "!=", "<", ">", "<=", ">="})) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (at_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (operands.empty()) operands.push_back(std::move(first));
      operands.push_back(parse_math1());
      ops.push_back(std::move(op));
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::Compare, line, std::move(operands));
    e->ops = std::move(ops);
    return e;
  }

  // Left-associative binary operators of one precedence level, each operand from `operand`.
  template <typename Operand>
  ExprPtr binary_level(std::initializer_list<std::string_view> operators, Operand operand) {
    ExprPtr left = (this->*operand)();
    while ((cur().type == TokenType::Operator || cur().type == TokenType::Name) && one_of(cur().text, operators)) {
      const Token& op = next();
      const ExprKind kind = op.text == "and" ? ExprKind::And : op.text == "or" ? ExprKind::Or : ExprKind::Binary;
      auto e = node(kind, op.line, pair(std::move(left), (this->*operand)()));
      e->name = op.text;
      left = std::move(e);
    }
    return left;
  }
  ExprPtr parse_math1() { return binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const Nesting nesting(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& op = next();
      std::vector<ExprPtr> operand;
      operand.push_back(parse_unary(false));
      e = node(op.text == "-" ? ExprKind::Negate : ExprKind::Plus, op.line, std::move(operand));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filters(std::move(e), false) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Nesting nesting(*this);
    const Token& t = cur();
    if (t.type == TokenType::Name) {
      next();
      if (one_of(t.text, {"true", "false", "True", "False", "none", "None"})) {
        auto e = node(ExprKind::Literal, t.line);
        e->value = t.text == "none" || t.text == "None" ? Value::none() : Value(t.text[0] == 't' || t.text[0] == 'T');
        return e;
      }
      auto e = node(ExprKind::Name, t.line);
      e->name = t.text;
      return e;
    }
    if (t.type == TokenType::String) {
      std::string s;
      while (cur().type == TokenType::String) s += next().text;  // "a" "b" is "ab", as in Python
      auto e = node(ExprKind::Literal, t.line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::Integer || t.type == TokenType::Float) {
      next();
      auto e = node(ExprKind::Literal, t.line);
      if (t.type == TokenType::Float) {
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
      } else {
        int64_t v = 0;
        const auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) syntax_error(t.line, "integer literal beyond 64 bits");
        e->value = Value(v);
      }
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (at_op("[") || at_op("{")) {
      const bool list = next().text == "[";
      const char* close = list ? "]" : "}";
      auto e = node(list ? ExprKind::List : ExprKind::Dict, t.line);
      auto& items = e->operands;
      while (!skip_op(close)) {
        if (!items.empty()) expect_op(",");
        if (skip_op(close)) break;
        items.push_back(parse_expression(true));
        if (!list) {
          expect_op(":");
          items.push_back(parse_expression(true));
        }
      }
      return e;
    }
    unexpected("an expression");
  }

  // .attr, [subscript] and (call) after a primary.
  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        if (cur().type == TokenType::Integer) {  // x.0 is x[0]
          auto index = node(ExprKind::Literal, line);
          index->value = Value(static_cast<int64_t>(std::stoll(next().text)));
          e = node(ExprKind::Item, line, pair(std::move(e), std::move(index)));
        } else {
          auto a = node(ExprKind::Attr, line);
          a->name = expect_name();
          a->operands.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(node(ExprKind::Call, cur().line), std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const int line = next().line;  // [
    std::vector<ExprPtr> bounds;   // start, stop, step of a slice
    bool slice = false;
    std::vector<ExprPtr> keys;
    while (!at_op("]")) {
      if (!keys.empty() || slice) {
        if (slice) syntax_error(line, "tuples of slices are not supported");
        expect_op(",");
      }
      ExprPtr first = at_op(":") ? nullptr : parse_expression(true);
      if (!at_op(":")) {
        keys.push_back(std::move(first));
        continue;
      }
      if (!keys.empty()) syntax_error(line, "tuples of slices are not supported");
      slice = true;
      bounds.push_back(std::move(first));
      for (int part = 0; part < 2; ++part) {
        if (skip_op(":") && !at_op("]") && !at_op(",") && !at_op(":")) {
          bounds.push_back(parse_expression(true));
        } else {
          bounds.push_back(nullptr);
        }
        if (!at_op(":")) break;
      }
      while (bounds.size() < 3) bounds.push_back(nullptr);
    }
    next();  // ]
    if (slice) {
      std::vector<ExprPtr> ops;
      ops.push_back(std::move(object));
      for (auto& b : bounds) ops.push_back(std::move(b));
      return node(ExprKind::Slice, line, std::move(ops));
    }
    if (keys.empty()) syntax_error(line, "expected a subscript");
    ExprPtr key = keys.size() == 1 ? std::move(keys[0]) : node(ExprKind::Tuple, line, std::move(keys));
    return node(ExprKind::Item, line, pair(std::move(object), std::move(key)));
  }

  // (positional..., name=value...) into `call`, whose operands[0] is `subject`.
  ExprPtr parse_call(std::unique_ptr<Expr> call, ExprPtr subject) {
    expect_op("(");
    Expr& c = *call;
    c.operands.insert(c.operands.begin(), std::move(subject));
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (at_op("*") || at_op("**")) syntax_error(cur().line, "*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        std::string name = next().text;
        next();
        c.keywords.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!c.keywords.empty()) syntax_error(cur().line, "a positional argument follows keyword arguments");
        c.operands.push_back(parse_expression(true));
      }
    }
    return call;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  // `| filter(args)` and `is [not] test arg` after a unary expression; `starts_with_name` when
  // the first filter comes without its bar ({% filter upper %}).
  ExprPtr parse_filters(ExprPtr e, bool starts_with_name) {
    bool bare = starts_with_name;
    while (true) {
      if (bare || at_op("|")) {
        const int line = bare ? cur().line : next().line;
        bare = false;
        auto f = node(ExprKind::Filter, line);
        Expr& fe = *f;
        fe.name = dotted_name();
        // Unknown here is an error only when it runs, as in Jinja2 since 3.0: a template may name a
        // filter meshnn lacks in a branch it never takes (a tools branch, say).
        fe.filter = find_filter(fe.name);
        if (at_op("(")) {
          e = parse_call(std::move(f), std::move(e));
        } else {
          fe.operands.push_back(std::move(e));
          e = std::move(f);
        }
      } else if (at_name("is")) {
        e = parse_test(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(node(ExprKind::Call, cur().line), std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr subject) {
    const int line = next().line;  // is
    const bool negated = skip_name("not");
    auto t = node(ExprKind::Test, line);
    Expr& te = *t;
    te.name = dotted_name();
    te.test = find_test(te.name);  // unknown: an error when it runs, as filters
    const TokenType type = cur().type;
    ExprPtr result;
    if (at_op("(")) {
      result = parse_call(std::move(t), std::move(subject));
    } else {
      te.operands.push_back(std::move(subject));
      const bool argument_follows = type == TokenType::Name || type == TokenType::String ||
                                    type == TokenType::Integer || type == TokenType::Float || at_op("[") || at_op("{");
      if (argument_follows && !at_name("else") && !at_name("or") && !at_name("and")) {
        if (at_name("is")) syntax_error(cur().line, "tests cannot be chained with 'is'");
        te.operands.push_back(parse_postfix(parse_primary()));
      }
      result = std::move(t);
    }
    if (!negated) return result;
    std::vector<ExprPtr> operand;
    operand.push_back(std::move(result));
    return node(ExprKind::Not, line, std::move(operand));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops around the current statement
};

}  // namespace

Body parse(std::string_view source) { return Parser(tokenize(source)).parse_template(); }

}  // namespace meshnn::text::chat_template_detail
