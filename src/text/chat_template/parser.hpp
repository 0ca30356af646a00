// The syntax tree of a chat template and the parser that builds it, following Jinja2's grammar
// (jinja2/parser.py): the same precedence, the same places where a bare tuple is allowed.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "value.hpp"

namespace meshnn::text::chat_template_detail {

using FilterFn = Value (*)(Renderer&, const Value& subject, Args& args);
using TestFn = bool (*)(Renderer&, const Value& subject, Args& args);

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

enum class ExprKind {
  Literal,   // value
  Name,      // name
  List,      // operands: the items
  Tuple,     // operands: the items
  Dict,      // operands: key, value, key, value, ...
  Attr,      // operands[0].name
  Item,      // operands[0][operands[1]]
  Slice,     // operands[0][operands[1]:operands[2]:operands[3]], each bound may be null
  Call,      // operands[0](operands[1...], keywords)
  Filter,    // operands[0] | name(operands[1...], keywords), through `filter`
  Test,      // operands[0] is name(operands[1...], keywords), through `test`
  Not,       // not operands[0]
  Negate,    // -operands[0]
  Plus,      // +operands[0]
  Binary,    // operands[0] name operands[1], name one of + - * / // % ** ~
  Compare,   // operands[0] ops[0] operands[1] ops[1] operands[2] ..., chained as Python does
  And,       // operands[0] and operands[1]
  Or,        // operands[0] or operands[1]
  Cond,      // operands[0] if operands[1] else operands[2] (null: undefined)
  Captured,  // the text of a {% filter %} or {% set x | f %} body, which the filters apply to
};

struct Expr {
  ExprKind kind;
  int line;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

struct Stmt;
using StmtPtr = std::unique_ptr<const Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,         // text
  Print,        // {{ expr }}
  If,           // branches (condition, body) in order, then else_body
  For,          // for target in expr [if condition]: body, else_body when nothing was visited
  Set,          // set target = expr (target: a name, a tuple of targets or namespace.attribute)
  SetBlock,     // set target [| filters] %} body: expr applies the filters to the Captured body
  Macro,        // macro text(params with defaults): body
  FilterBlock,  // filter ...: expr applies the filters to the Captured body
  Scope,        // with params: body, and generation: body (each a scope of its own)
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  int line;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

// Throws meshnn::Error naming the line on a syntax error, an unknown tag, filter or test, or a
// construct meshnn does not implement.
Body parse(std::string_view source);

// The filters and tests the parser accepts (builtins.cpp); nullptr when there is none so named.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

}  // namespace meshnn::text::chat_template_detail
