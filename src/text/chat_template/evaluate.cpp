#include "evaluate.hpp"

#include <fmt/format.h>

#include <limits>

namespace meshnn::text::chat_template_detail {
namespace {

// Puts the renderer's scope back however the block that replaced it ends.
struct ScopeGuard {
  std::shared_ptr<Scope>& slot;
  std::shared_ptr<Scope> saved;
  ScopeGuard(std::shared_ptr<Scope>& s, std::shared_ptr<Scope> replacement) : slot(s), saved(s) {
    slot = std::move(replacement);
  }
  ~ScopeGuard() { slot = std::move(saved); }
};

struct DepthGuard {
  int& depth;
  DepthGuard(int& d, int limit, const char* what) : depth(d) {
    if (depth >= limit) fail(fmt::format("{} nested more than {} deep", what, limit));
    ++depth;
  }
  ~DepthGuard() { --depth; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

std::shared_ptr<Scope> child_of(std::shared_ptr<Scope> parent) {
  auto s = std::make_shared<Scope>();
  s->parent = std::move(parent);
  return s;
}

}  // namespace

Renderer::~Renderer() {
  // A namespace may hold itself (set ns.me = ns), a cycle of shared pointers: emptying every
  // namespace breaks it.
  for (const Value& ns : namespaces_) ns.attributes().items.clear();
}

void Renderer::check_size(size_t bytes) {
  if (bytes > kMaxOutput) fail(fmt::format("the template built a text of more than {} MiB", kMaxOutput >> 20));
}

std::string Renderer::render(const Body& body, std::shared_ptr<Scope> globals) {
  std::string out;
  out_ = &out;
  globals_ = globals;
  scope_ = std::move(globals);
  exec(body);
  return out;
}

void Renderer::emit(const std::string& text) {
  check_size(out_->size() + text.size());
  *out_ += text;
}

std::string Renderer::capture(const Body& body, std::shared_ptr<Scope> scope) {
  std::string text;
  std::string* const outer = out_;
  out_ = &text;
  try {
    const ScopeGuard guard(scope_, std::move(scope));
    exec(body);
  } catch (...) {
    out_ = outer;
    throw;
  }
  out_ = outer;
  return text;
}

Renderer::Flow Renderer::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& s) {
  try {
    const DepthGuard depth(depth_, kMaxDepth, "statements and expressions");
    switch (s.kind) {
      case StmtKind::Text: emit(s.text); break;
      case StmtKind::Print: emit(to_str(eval(*s.expr))); break;
      case StmtKind::If:
        for (const auto& [condition, body] : s.branches)
          if (truthy(eval(*condition))) return exec(body);
        return exec(s.else_body);
      case StmtKind::For: return exec_for(s);
      case StmtKind::Set: assign(*s.target, eval(*s.expr)); break;
      case StmtKind::SetBlock:
      case StmtKind::FilterBlock: {
        captured_ = Value(capture(s.body, child_of(scope_)));
        const Value value = eval(*s.expr);
        if (s.kind == StmtKind::SetBlock) {
          assign(*s.target, value);
        } else {
          emit(to_str(value));
        }
        break;
      }
      case StmtKind::Macro: scope_->vars[s.text] = define_macro(s); break;
      case StmtKind::Scope: {
        auto scope = child_of(scope_);
        for (const auto& [name, value] : s.params) scope->vars[name] = eval(*value);
        const ScopeGuard guard(scope_, std::move(scope));
        return exec(s.body);
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (RenderError& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_for(const Stmt& s) {
  List items = iterate(eval(*s.expr));
  const std::shared_ptr<Scope> outer = scope_;
  if (s.condition) {  // `for x in xs if c` visits, and counts, only the items that pass
    List kept;
    for (Value& item : items) {
      const ScopeGuard guard(scope_, child_of(outer));
      assign(*s.target, item);
      if (truthy(eval(*s.condition))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    if (++iterations_ > kMaxIterations) fail(fmt::format("more than {} loop iterations", kMaxIterations));
    const ScopeGuard guard(scope_, child_of(outer));
    Dict loop;
    loop.set("index", i + 1);
    loop.set("index0", i);
    loop.set("revindex", n - i);
    loop.set("revindex0", n - i - 1);
    loop.set("first", i == 0);
    loop.set("last", i == n - 1);
    loop.set("length", n);
    loop.set("depth", 1);
    loop.set("depth0", 0);
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [i](Renderer&, Args& args) {
               if (args.positional.empty()) fail("no items for cycling given");
               return args.positional[i % static_cast<int64_t>(args.positional.size())];
             }));
    scope_->vars["loop"] = Value::loop(std::move(loop));
    assign(*s.target, items[i]);
    if (exec(s.body) == Flow::Break) break;
  }
  if (n == 0) {
    const ScopeGuard guard(scope_, child_of(outer));
    exec(s.else_body);
  }
  return Flow::Normal;
}

void Renderer::assign(const Expr& target, const Value& value) {
  if (target.kind == ExprKind::Name) {
    scope_->vars[target.name] = value;
  } else if (target.kind == ExprKind::Tuple) {
    const List items = iterate(value);
    const size_t n = target.operands.size();
    if (items.size() != n)
      fail(items.size() > n ? fmt::format("too many values to unpack (expected {})", n)
                            : fmt::format("not enough values to unpack (expected {}, got {})", n, items.size()));
    for (size_t i = 0; i < n; ++i) assign(*target.operands[i], items[i]);
  } else {  // namespace.attribute
    const Value* ns = scope_->find(target.operands[0]->name);
    if (ns == nullptr || !ns->is(Value::Kind::Namespace)) fail("cannot assign attribute on non-namespace object");
    ns->attributes().set(Value(target.name), value);
  }
}

Value Renderer::define_macro(const Stmt& s) {
  // The macro lives in the scope it reads from: holding that scope weakly keeps them from owning
  // each other. A macro carried out of its scope (set ns.m = m in a loop) reads the globals.
  std::weak_ptr<Scope> defining = scope_;
  const Stmt* macro = &s;
  return Value::callable("macro '" + s.text + "'", [macro, defining](Renderer& r, Args& args) {
    return r.call_macro(*macro, defining.lock(), args);
  });
}

Value Renderer::call_macro(const Stmt& m, std::shared_ptr<Scope> defining, Args& args) {
  if (args.positional.size() > m.params.size())
    fail(fmt::format("macro '{}' takes not more than {} argument(s)", m.text, m.params.size()));
  auto scope = child_of(defining ? std::move(defining) : globals_);
  std::vector<bool> given(m.params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->vars[m.params[i].first] = std::move(args.positional[i]);
    given[i] = true;
  }
  for (auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < m.params.size() && m.params[i].first != name) ++i;
    if (i == m.params.size()) fail(fmt::format("macro '{}' takes no keyword argument '{}'", m.text, name));
    if (given[i]) fail(fmt::format("macro '{}' got multiple values for argument '{}'", m.text, name));
    scope->vars[name] = std::move(value);
    given[i] = true;
  }
  const DepthGuard depth(macro_depth_, kMaxMacroDepth, "macro calls");
  {
    const ScopeGuard guard(scope_, scope);
    for (size_t i = 0; i < m.params.size(); ++i)
      if (!given[i])
        scope->vars[m.params[i].first] =
            m.params[i].second ? eval(*m.params[i].second)
                               : Value::undefined(fmt::format("parameter '{}' was not provided", m.params[i].first));
  }
  return Value(capture(m.body, std::move(scope)));
}

Args Renderer::eval_args(const Expr& e) {
  Args args;
  for (size_t i = 1; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i]));
  for (const auto& [name, value] : e.keywords) args.keyword.emplace_back(name, eval(*value));
  return args;
}

Value Renderer::eval(const Expr& e) {
  try {
    const DepthGuard depth(depth_, kMaxDepth, "statements and expressions");
    return eval_node(e);
  } catch (RenderError& error) {
    if (error.line == 0) error.line = e.line;
    throw;
  }
}

Value Renderer::eval_node(const Expr& e) {
  const auto operand = [&](size_t i) { return e.operands[i] ? eval(*e.operands[i]) : Value::none(); };
  switch (e.kind) {
    case ExprKind::Literal: return e.value;
    case ExprKind::Name: {
      const Value* v = scope_->find(e.name);
      return v != nullptr ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      List items;
      for (const ExprPtr& item : e.operands) items.push_back(eval(*item));
      return e.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Dict d;
      for (size_t i = 0; i < e.operands.size(); i += 2) {
        Value key = eval(*e.operands[i]);
        if (key.is(Value::Kind::List) || key.is(Value::Kind::Dict) || key.is(Value::Kind::Undefined))
          fail(fmt::format("unhashable type: '{}'", type_name(key)));
        d.set(std::move(key), eval(*e.operands[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Attr: return get_attribute(operand(0), e.name);
    case ExprKind::Item: return get_item(operand(0), operand(1));
    case ExprKind::Slice: return slice(operand(0), operand(1), operand(2), operand(3));
    case ExprKind::Call: {
      const Value callee = operand(0);
      Args args = eval_args(e);
      if (callee.is_undefined()) fail(callee.undefined_reason());
      if (!callee.is(Value::Kind::Callable)) fail(fmt::format("'{}' object is not callable", type_name(callee)));
      return callee.callable().call(*this, args);
    }
    case ExprKind::Filter: {
      if (e.filter == nullptr) fail(fmt::format("unknown filter '{}'", e.name));
      const Value subject = operand(0);
      Args args = eval_args(e);
      return e.filter(*this, subject, args);
    }
    case ExprKind::Test: {
      if (e.test == nullptr) fail(fmt::format("unknown test '{}'", e.name));
      const Value subject = operand(0);
      Args args = eval_args(e);
      return Value(e.test(*this, subject, args));
    }
    case ExprKind::Not: return Value(!truthy(operand(0)));
    case ExprKind::Negate:
    case ExprKind::Plus: {
      const Value v = operand(0);
      if (v.is_undefined()) fail(v.undefined_reason());
      if (!v.is_number())
        fail(fmt::format("bad operand type for unary {}: '{}'", e.kind == ExprKind::Negate ? '-' : '+', type_name(v)));
      if (e.kind == ExprKind::Plus) return v.is_integer() ? Value(v.integer()) : v;
      if (!v.is_integer()) return Value(-v.number());
      if (v.integer() == std::numeric_limits<int64_t>::min()) fail("integer overflow (meshnn's integers are 64-bit)");
      return Value(-v.integer());
    }
    case ExprKind::Binary: return binary_op(e.name, operand(0), operand(1));
    case ExprKind::Compare: {
      Value left = operand(0);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = operand(k + 1);
        if (!compare_op(e.ops[k], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::And: {
      Value left = operand(0);
      return truthy(left) ? operand(1) : left;
    }
    case ExprKind::Or: {
      Value left = operand(0);
      return truthy(left) ? left : operand(1);
    }
    case ExprKind::Cond:
      if (truthy(operand(1))) return operand(0);
      return e.operands[2] ? operand(2)
                           : Value::undefined("the inline if-expression evaluated to false and has no else section");
    case ExprKind::Captured: return captured_;
  }
  fail("unknown expression");
}

}  // namespace meshnn::text::chat_template_detail
