// Runs a parsed template: statements, expressions and Jinja2's scopes. A for loop's body (each
// iteration afresh), a macro call, {% with %} and {% generation %} get a scope of their own, so
// `set` inside them leaves the outer variable alone; {% if %} does not.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "parser.hpp"
#include "value.hpp"

namespace meshnn::text::chat_template_detail {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

class Renderer {
 public:
  // Limits on a runaway template: output (also any one string it builds), nested macro calls
  // and loop iterations over the whole render.
  static constexpr size_t kMaxOutput = size_t{64} << 20;
  static constexpr int kMaxMacroDepth = 100;
  static constexpr int64_t kMaxIterations = 1'000'000;
  // Statements and expressions being run inside one another, macro calls included: deep
  // expressions in deep recursion must fail before the stack runs out.
  static constexpr int kMaxDepth = 500;

  explicit Renderer(std::time_t now) : now_(now) {}
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  std::string render(const Body& body, std::shared_ptr<Scope> globals);

  std::time_t now() const { return now_; }
  // Fails when a text of `bytes` would pass kMaxOutput.
  static void check_size(size_t bytes);
  Value call_macro(const Stmt& macro, std::shared_ptr<Scope> defining, Args& args);
  // namespace() registers what it makes, to be emptied when the render ends.
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void assign(const Expr& target, const Value& value);
  // The text `body` writes when run in `scope`.
  std::string capture(const Body& body, std::shared_ptr<Scope> scope);
  void emit(const std::string& text);
  Value define_macro(const Stmt& s);

  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Args eval_args(const Expr& e);

  std::time_t now_;
  std::shared_ptr<Scope> scope_;
  std::shared_ptr<Scope> globals_;
  std::vector<Value> namespaces_;
  std::string* out_ = nullptr;
  Value captured_;  // the body text a filter block's filters start from
  int macro_depth_ = 0;
  int depth_ = 0;
  int64_t iterations_ = 0;
};

// Python's operators on values (operators.cpp).
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool compare_op(const std::string& op, const Value& a, const Value& b);
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Jinja2's sandboxed lookups (methods.cpp): `a.b` tries the attribute (a method) before the
// item, `a[b]` the item before the attribute; a missing one is undefined.
Value get_attribute(const Value& object, const std::string& name);
// Python's getattr alone (the attr filter): methods, and a namespace's or loop's attributes;
// nullopt when there is none.
std::optional<Value> python_attribute(const Value& object, const std::string& name);
Value no_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);

// The globals transformers' environment has: range, dict, namespace, raise_exception,
// strftime_now (builtins.cpp).
void add_globals(Scope& scope);
// A filter or test by a name known only at run time (map('upper'), select('odd')).
Value apply_filter(Renderer& r, const std::string& name, const Value& subject, Args& args);
bool apply_test(Renderer& r, const std::string& name, const Value& subject, Args& args);

}  // namespace meshnn::text::chat_template_detail
