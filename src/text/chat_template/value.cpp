#include "value.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "../code_points.hpp"

namespace meshnn::text::chat_template_detail {

void fail(std::string message) { throw RenderError{std::move(message)}; }

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equal(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Loop: return "LoopContext";
    case Value::Kind::Callable: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.boolean();
    case Value::Kind::Int: return v.integer() != 0;
    case Value::Kind::Float: return v.number() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !v.items().empty();
    case Value::Kind::Dict: return !v.dict().items.empty();
    default: return true;
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t at = 0; at < s.size();) out += detail::next_code_point(s, at);
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) detail::append_utf8(out, c);
  return out;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Python's repr: the shortest digits that read back as f, in positional notation when the
  // decimal exponent is in [-4, 16), else as d.ddde+XX.
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific).ptr;
  const std::string sci(buf, end);
  const size_t e_at = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e_at; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::stoi(sci.substr(e_at + 1));
  const std::string sign = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return fmt::format("{}0.{}{}", sign, std::string(-exponent - 1, '0'), digits);
    const size_t point = static_cast<size_t>(exponent) + 1;
    if (point >= digits.size()) return fmt::format("{}{}{}.0", sign, digits, std::string(point - digits.size(), '0'));
    return fmt::format("{}{}.{}", sign, digits.substr(0, point), digits.substr(point));
  }
  return fmt::format("{}{}{}{}e{}{:02d}", sign, digits[0], digits.size() > 1 ? "." : "", std::string_view(digits).substr(1),
                     exponent < 0 ? '-' : '+', std::abs(exponent));
}

namespace {

// str.isprintable(): everything but controls, format characters, surrogates, private use,
// unassigned code points and separators other than the space.
bool printable(char32_t c) {
  if (c == U' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    default: return true;
  }
}

std::string string_repr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (printable(c)) {
      detail::append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  return out + quote;
}

// A namespace may hold itself, or a list that holds it. Python's repr prints a container met again
// inside itself as [...], (...) or {...}; so does this, which keeps it from recursing forever.
thread_local std::vector<const void*> containers_in_repr;

struct ReprEntry {
  explicit ReprEntry(const void* container)
      : again(std::find(containers_in_repr.begin(), containers_in_repr.end(), container) != containers_in_repr.end()) {
    if (!again) containers_in_repr.push_back(container);
  }
  ~ReprEntry() {
    if (!again) containers_in_repr.pop_back();
  }
  ReprEntry(const ReprEntry&) = delete;
  ReprEntry& operator=(const ReprEntry&) = delete;
  const bool again;
};

std::string dict_repr(const Dict& d) {
  const ReprEntry entry(&d);
  if (entry.again) return "{...}";
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i)
    out += (i ? ", " : "") + repr(d.items[i].first) + ": " + repr(d.items[i].second);
  return out + "}";
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::String: return string_repr(v.str());
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const bool list = v.is(Value::Kind::List);
      const ReprEntry entry(&v.items());
      if (entry.again) return list ? "[...]" : "(...)";
      std::string out = list ? "[" : "(";
      for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + repr(v.items()[i]);
      if (!list && v.items().size() == 1) out += ",";
      return out + (list ? "]" : ")");
    }
    case Value::Kind::Dict: return dict_repr(v.dict());
    case Value::Kind::Namespace: return "<Namespace " + dict_repr(v.attributes()) + ">";
    case Value::Kind::Loop: {
      const Dict& a = v.attributes();
      return fmt::format("<LoopContext {}/{}>", to_str(*a.find("index")), to_str(*a.find("length")));
    }
    case Value::Kind::Callable: return "<function " + v.callable().name + ">";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.boolean() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.integer());
    case Value::Kind::Float: return float_repr(v.number());
    case Value::Kind::String: return v.str();
    default: return repr(v);
  }
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.integer() == b.integer();
    return a.number() == b.number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List:
    case K::Tuple: {
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.undefined_reason());
  if (b.is_undefined()) fail(b.undefined_reason());
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.integer() < b.integer();
    return a.number() < b.number();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 bytes sort as code points
  if (a.kind() == b.kind() && a.is_sequence()) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    return x.size() < y.size();
  }
  fail(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& item : v.dict().items) keys.push_back(item.first);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      const std::string& s = v.str();
      for (size_t at = 0; at < s.size();) {
        const size_t start = at;
        detail::next_code_point(s, at);
        chars.emplace_back(s.substr(start, at - start));
      }
      return chars;
    }
    default: fail(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: {
      int64_t n = 0;
      for (unsigned char c : v.str()) n += (c & 0xC0) != 0x80;
      return n;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.dict().items.size());
    default: fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

}  // namespace meshnn::text::chat_template_detail
