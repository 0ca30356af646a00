// Python's arithmetic, comparison, membership and slicing, which Jinja2 hands its operators to.
#include <fmt/format.h>

#include <cmath>

#include "evaluate.hpp"

namespace meshnn::text::chat_template_detail {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

// a op b for op one of __builtin_{add,sub,mul}_overflow, failing where Python would grow a bignum.
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t result;
  if (op(a, b, &result)) fail("integer overflow (meshnn's integers are 64-bit)");
  return result;
}
const auto add = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
const auto sub = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
const auto mul = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };

// CPython's float floor division and modulo (float_divmod): the remainder takes the divisor's sign.
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0.0) fail("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t times) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(times, 0));
  if (seq.is_string()) {
    Renderer::check_size(seq.str().size() * n);
    std::string out;
    for (size_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  Renderer::check_size(seq.items().size() * n * sizeof(Value));
  List out;
  for (size_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is(Value::Kind::List) ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_integer() && b.is_integer()) {
    const int64_t x = a.integer(), y = b.integer();
    if (op == "+") return Value(checked(add, x, y));
    if (op == "-") return Value(checked(sub, x, y));
    if (op == "*") return Value(checked(mul, x, y));
    if (op == "/") {
      if (y == 0) fail("division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) fail("integer overflow (meshnn's integers are 64-bit)");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    // **
    if (y < 0) {
      if (x == 0) fail("0.0 cannot be raised to a negative power");
      return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    }
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if (e & 1) result = checked(mul, result, base);
      if (e > 1) base = checked(mul, base, base);
    }
    return Value(result);
  }
  const double x = a.number(), y = b.number();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") {
    if (y == 0.0) fail("float division by zero");
    return Value(x / y);
  }
  if (op == "//") return Value(float_divmod(x, y).first);
  if (op == "%") return Value(float_divmod(x, y).second);
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  return Value(std::pow(x, y));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string())
        fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& v : container.items())
        if (equal(v, item)) return true;
      return false;
    case Value::Kind::Dict: return container.dict().find(item) != nullptr;
    case Value::Kind::Undefined: return false;
    default: fail(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

// A slice bound as PySlice_AdjustIndices clips it.
int64_t slice_bound(const Value& v, int64_t n, int64_t step, bool is_start) {
  if (v.is(Value::Kind::None)) return is_start ? (step > 0 ? 0 : n - 1) : (step > 0 ? n : -1);
  if (!v.is_integer()) fail("slice indices must be integers or None");
  int64_t i = v.integer();
  if (i < 0) {
    i += n;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= n) {
    i = step < 0 ? n - 1 : n;
  }
  return i;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  if (a.is_undefined()) fail(a.undefined_reason());
  if (b.is_undefined()) fail(b.undefined_reason());
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      Renderer::check_size(a.str().size() + b.str().size());
      return Value(a.str() + b.str());
    }
    if (a.kind() == b.kind() && a.is_sequence()) {
      List items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is(Value::Kind::List) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && b.is_integer()) return repeat(a, b.integer());
    if (a.is_integer() && (b.is_string() || b.is_sequence())) return repeat(b, a.integer());
  }
  if (op == "%" && a.is_string()) fail("printf-style formatting of strings (str % values) is not supported");
  unsupported(op, a, b);
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equal(a, b);
  if (op == ">=") return less(b, a) || equal(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);  // not in
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) fail(object.undefined_reason());
  if (!object.is_string() && !object.is_sequence()) return Value::undefined(fmt::format("'{}' object cannot be sliced", type_name(object)));
  if (!step.is(Value::Kind::None) && !step.is_integer()) fail("slice indices must be integers or None");
  const int64_t by = step.is(Value::Kind::None) ? 1 : step.integer();
  if (by == 0) fail("slice step cannot be zero");
  const std::u32string chars = object.is_string() ? decode(object.str()) : std::u32string();
  const int64_t n = object.is_string() ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(object.items().size());
  const int64_t from = slice_bound(start, n, by, true), to = slice_bound(stop, n, by, false);
  std::u32string text;
  List items;
  for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
    if (object.is_string()) {
      text += chars[i];
    } else {
      items.push_back(object.items()[i]);
    }
  }
  if (object.is_string()) return Value(encode(text));
  return object.is(Value::Kind::List) ? Value::list(std::move(items)) : Value::tuple(std::move(items));
}

}  // namespace meshnn::text::chat_template_detail
