// The dynamic value of the chat template interpreter: what a Python object is to Jinja2, cut down
// to the types templates meet. Lists and dicts are shared, as Python's are, and never mutated
// once built (the immutable sandbox forbids append, update, pop, ...); only a namespace's
// attributes change, which is what templates use namespace() for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace meshnn::text::chat_template_detail {

// A failure while rendering; `line` is filled in by the innermost node that knows its line.
struct RenderError {
  std::string message;
  int line = 0;
};

// raise_exception(): its message is shown as the template wrote it, without a line.
struct RaisedError {
  std::string message;
};

[[noreturn]] void fail(std::string message);

class Value;
using List = std::vector<Value>;
// Insertion-ordered, as Python's dict; looked up by Python equality (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
};

class Renderer;
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
struct Callable {
  std::string name;  // for messages: "range", "str.strip", "macro 'render'"
  std::function<Value(Renderer&, Args&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Tuple,
    Dict,
    Namespace,  // namespace(): attributes that `set ns.x = ...` may change
    Loop,       // the `loop` of a for: read-only attributes
    Callable,
  };

  Value() : kind_(Kind::Undefined), data_(std::string()) {}
  // An undefined value that says, when used, why it is undefined ("'x' is undefined").
  static Value undefined(std::string why) { return Value(Kind::Undefined, std::move(why)); }
  static Value none() { return Value(Kind::None, std::monostate()); }
  Value(bool b) : kind_(Kind::Bool), data_(b) {}
  Value(int64_t i) : kind_(Kind::Int), data_(i) {}
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f) : kind_(Kind::Float), data_(f) {}
  Value(std::string s) : kind_(Kind::String), data_(std::move(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items) { return Value(Kind::List, std::make_shared<const List>(std::move(items))); }
  static Value tuple(List items) { return Value(Kind::Tuple, std::make_shared<const List>(std::move(items))); }
  static Value dict(Dict d) { return Value(Kind::Dict, std::make_shared<Dict>(std::move(d))); }
  static Value name_space(Dict attrs) { return Value(Kind::Namespace, std::make_shared<Dict>(std::move(attrs))); }
  static Value loop(Dict attrs) { return Value(Kind::Loop, std::make_shared<Dict>(std::move(attrs))); }
  static Value callable(std::string name, std::function<Value(Renderer&, Args&)> f) {
    return Value(Kind::Callable, std::make_shared<const Callable>(Callable{std::move(name), std::move(f)}));
  }

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_mapping() const { return kind_ == Kind::Dict; }
  // int, bool (a Python int) or float
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Bool || kind_ == Kind::Float; }
  bool is_integer() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }

  bool boolean() const { return std::get<bool>(data_); }
  int64_t integer() const { return kind_ == Kind::Bool ? std::get<bool>(data_) : std::get<int64_t>(data_); }
  double number() const { return kind_ == Kind::Float ? std::get<double>(data_) : static_cast<double>(integer()); }
  const std::string& str() const { return std::get<std::string>(data_); }
  const std::string& undefined_reason() const { return std::get<std::string>(data_); }
  const List& items() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  Dict& attributes() const { return *std::get<std::shared_ptr<Dict>>(data_); }  // Namespace, Loop
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  bool same_object(const Value& other) const { return kind_ == other.kind_ && data_ == other.data_; }

 private:
  using Data = std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<const List>,
                            std::shared_ptr<Dict>, std::shared_ptr<const Callable>>;
  Value(Kind k, Data d) : kind_(k), data_(std::move(d)) {}
  Kind kind_;
  Data data_;
};

// Python's type(x).__name__, for messages.
std::string type_name(const Value& v);
// Python's bool(x).
bool truthy(const Value& v);
// Python's str(x) (printing, ~, join) and repr(x) (inside printed lists and dicts).
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string float_repr(double f);
// Python's == (deep; 1 == 1.0; a list never equals a tuple) and < (numbers, strings, sequences
// element by element; anything else is a TypeError, as sorting mixed types is in Python).
bool equal(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);
// What `for x in v` visits: items of a list or tuple, keys of a dict, characters of a string,
// nothing for undefined; anything else is a TypeError.
List iterate(const Value& v);
// len(v), in code points for strings.
int64_t length(const Value& v);

// Strings as Python sees them, code point by code point (the text is valid UTF-8).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
bool is_space(char32_t c);  // str.isspace

}  // namespace meshnn::text::chat_template_detail
