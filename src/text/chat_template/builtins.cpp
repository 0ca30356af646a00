// Jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py) that chat templates use, with
// transformers' tojson, and the globals of its environment.
#include "builtins.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "../code_points.hpp"
#include "evaluate.hpp"

namespace meshnn::text::chat_template_detail {
namespace {

// ---- helpers ----

Value require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined_reason());
  return v;
}

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (items first, as a[b]).
Value lookup_path(const Value& item, const Value& attribute) {
  if (attribute.is(Value::Kind::None)) return item;
  if (attribute.is_integer()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = expect_string(attribute, "attribute");
  for (size_t from = 0;;) {
    const size_t dot = path.find('.', from);
    const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    from = dot + 1;
  }
}

// The sort key of the sorting filters: strings lowercased unless case_sensitive.
Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(str_lower(v.str())) : v;
}

List sorted(List items, bool reverse, const std::function<Value(const Value&)>& key) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  List out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return out;
}

// ---- tojson, as Python's json.dumps ----

struct JsonFormat {
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::string> indent;  // none: all on one line
  std::string item_separator, key_separator;
};

void json_string(const std::string& s, std::string& out, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode(s)) {
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          detail::append_utf8(out, c);
        }
    }
  }
  out += '"';
}

std::string json_number(const Value& v) {
  if (v.is(Value::Kind::Bool)) return v.boolean() ? "true" : "false";
  if (v.is_integer()) return std::to_string(v.integer());
  const double f = v.number();
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

void json_dump(const Value& v, std::string& out, const JsonFormat& format, int level) {
  const auto newline = [&](int depth) {
    if (!format.indent) return;
    out += '\n';
    for (int i = 0; i < depth; ++i) out += *format.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool:
    case Value::Kind::Int:
    case Value::Kind::Float: out += json_number(v); return;
    case Value::Kind::String: json_string(v.str(), out, format.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += format.item_separator;
        newline(level + 1);
        json_dump(v.items()[i], out, format, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<Value, Value>> items = v.dict().items;
      if (format.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return less(a.first, b.first); });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        const Value& key = items[i].first;
        if (i) out += format.item_separator;
        newline(level + 1);
        if (key.is_string()) {
          json_string(key.str(), out, format.ensure_ascii);
        } else if (key.is_number() || key.is(Value::Kind::None)) {
          json_string(key.is(Value::Kind::None) ? "null" : json_number(key), out, false);
        } else {
          fail(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(key)));
        }
        out += format.key_separator;
        json_dump(items[i].second, out, format, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default: fail(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

Value f_tojson(Renderer&, const Value& v, Args& a) {
  const auto p = bind("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonFormat format;
  format.ensure_ascii = truthy(p[0].value_or(Value(false)));
  format.sort_keys = truthy(p[3].value_or(Value(false)));
  const Value indent = p[1].value_or(Value::none());
  if (indent.is_integer()) {
    format.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.integer(), 0)), ' ');
  } else if (indent.is_string()) {
    format.indent = indent.str();
  } else if (!indent.is(Value::Kind::None)) {
    fail(fmt::format("tojson's indent must be an int or a str, not {}", type_name(indent)));
  }
  format.item_separator = format.indent ? "," : ", ";
  format.key_separator = ": ";
  const Value separators = p[2].value_or(Value::none());
  if (!separators.is(Value::Kind::None)) {
    if (!separators.is_sequence() || separators.items().size() != 2) fail("tojson's separators must be a pair");
    format.item_separator = expect_string(separators.items()[0], "a separator");
    format.key_separator = expect_string(separators.items()[1], "a separator");
  }
  std::string out;
  json_dump(v, out, format, 0);
  return Value(std::move(out));
}

// ---- filters on strings ----

Value f_upper(Renderer&, const Value& v, Args& a) {
  bind("upper", a, {});
  return Value(str_upper(to_str(v)));
}
Value f_lower(Renderer&, const Value& v, Args& a) {
  bind("lower", a, {});
  return Value(str_lower(to_str(v)));
}
Value f_capitalize(Renderer&, const Value& v, Args& a) {
  bind("capitalize", a, {});
  return Value(str_capitalize(to_str(v)));
}
Value f_string(Renderer&, const Value& v, Args& a) {
  bind("string", a, {});
  return Value(to_str(v));
}
Value f_trim(Renderer&, const Value& v, Args& a) {
  const auto p = bind("trim", a, {"chars"});
  return Value(str_strip(to_str(v), p[0].value_or(Value::none()), true, true));
}
Value f_replace(Renderer&, const Value& v, Args& a) {
  const auto p = bind("replace", a, {"old", "new", "count"}, 2);
  const Value count = p[2].value_or(Value::none());
  return Value(str_replace(to_str(v), to_str(*p[0]), to_str(*p[1]),
                           count.is(Value::Kind::None) ? -1 : expect_integer(count, "replace's count")));
}

// Jinja2's own title: words begin after runs of -, whitespace, (, {, [ and <.
Value f_title(Renderer&, const Value& v, Args& a) {
  bind("title", a, {});
  const auto delimiter = [](char32_t c) {
    return c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || is_space(c);
  };
  const std::u32string chars = decode(to_str(v));
  std::string out;
  for (size_t i = 0; i < chars.size();) {
    size_t j = i + 1;
    while (j < chars.size() && delimiter(chars[j]) == delimiter(chars[i])) ++j;
    out += str_upper(encode(chars.substr(i, 1))) + str_lower(encode(chars.substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value(std::move(out));
}

Value f_center(Renderer&, const Value& v, Args& a) {
  const auto p = bind("center", a, {"width"});
  const std::string s = to_str(v);
  const int64_t width = expect_integer(p[0].value_or(Value(80)), "center's width"), n = length(Value(s));
  if (n >= width) return Value(s);
  Renderer::check_size(static_cast<size_t>(width));
  const int64_t margin = width - n, left = margin / 2 + (margin & width & 1);
  return Value(std::string(left, ' ') + s + std::string(margin - left, ' '));
}

Value f_indent(Renderer&, const Value& v, Args& a) {
  const auto p = bind("indent", a, {"width", "first", "blank"});
  const Value width = p[0].value_or(Value(4));
  const std::string indent =
      width.is_string() ? width.str() : std::string(std::max<int64_t>(expect_integer(width, "indent's width"), 0), ' ');
  const bool first = truthy(p[1].value_or(Value(false))), blank = truthy(p[2].value_or(Value(false)));
  const std::vector<std::string> lines = str_splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    if (i && (blank || !lines[i].empty())) out += indent;
    out += lines[i];
    Renderer::check_size(out.size());
  }
  return Value(first ? indent + out : out);
}

Value f_wordcount(Renderer&, const Value& v, Args& a) {
  bind("wordcount", a, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : decode(to_str(v))) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool word = c == U'_' || (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
                      (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
    words += word && !in_word;
    in_word = word;
  }
  return Value(words);
}

// ---- filters on numbers ----

Value f_abs(Renderer&, const Value& v, Args& a) {
  bind("abs", a, {});
  require_defined(v);
  if (v.is_integer()) {
    if (v.integer() == std::numeric_limits<int64_t>::min()) fail("integer overflow (meshnn's integers are 64-bit)");
    return Value(std::abs(v.integer()));
  }
  if (v.is(Value::Kind::Float)) return Value(std::fabs(v.number()));
  fail(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

// Python's float(str): surrounding whitespace, underscores between digits, inf and nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = str_strip(text, Value::none(), true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    if (s[i] == 'x' || s[i] == 'X' || s[i] == '(') return std::nullopt;  // strtod's hex and nan(...) forms
    clean += s[i];
  }
  if (clean.empty()) return std::nullopt;
  const std::string lowered = str_lower(clean);
  const std::string unsigned_part = lowered[0] == '+' || lowered[0] == '-' ? lowered.substr(1) : lowered;
  if (std::isalpha(static_cast<unsigned char>(unsigned_part.empty() ? ' ' : unsigned_part[0])) &&
      unsigned_part != "inf" && unsigned_part != "infinity" && unsigned_part != "nan")
    return std::nullopt;
  char* end = nullptr;
  const double f = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return f;
}

Value f_float(Renderer&, const Value& v, Args& a) {
  const auto p = bind("float", a, {"default"});
  const Value fallback = p[0].value_or(Value(0.0));
  require_defined(v);
  if (v.is_number()) return Value(v.number());
  if (v.is_string()) {
    if (const auto f = parse_float(v.str())) return Value(*f);
  }
  return fallback;
}

Value f_int(Renderer&, const Value& v, Args& a) {
  const auto p = bind("int", a, {"default", "base"});
  const Value fallback = p[0].value_or(Value(0));
  const int64_t base = expect_integer(p[1].value_or(Value(10)), "int's base");
  require_defined(v);
  if (v.is_integer()) return Value(v.integer());
  if (v.is(Value::Kind::Float)) {
    if (!std::isfinite(v.number())) fail("cannot convert an infinite or NaN float to an integer");
    return Value(static_cast<int64_t>(std::trunc(v.number())));
  }
  if (!v.is_string()) return fallback;
  std::string s;
  for (char c : str_strip(v.str(), Value::none(), true, true))
    if (c != '_') s += c;
  if (!s.empty() && base >= 2 && base <= 36) {
    errno = 0;
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (end == s.c_str() + s.size() && errno == 0 && !std::isspace(static_cast<unsigned char>(s[0]))) return Value(static_cast<int64_t>(i));
  }
  if (const auto f = parse_float(v.str()); f && std::isfinite(*f)) return Value(static_cast<int64_t>(std::trunc(*f)));
  return fallback;
}

Value f_round(Renderer&, const Value& v, Args& a) {
  const auto p = bind("round", a, {"precision", "method"});
  const int64_t precision = expect_integer(p[0].value_or(Value(0)), "round's precision");
  const std::string method = to_str(p[1].value_or(Value("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  require_defined(v);
  if (!v.is_number()) fail(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common") {
    const double scaled = v.number() * scale;
    return Value((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
  }
  if (v.is_integer() && precision >= 0) return Value(v.integer());
  double rounded;
  if (precision > 0 && precision < 300) {
    // printf rounds the exact binary value half to even, as Python's round does.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.number());
    rounded = std::strtod(buf, nullptr);
  } else {
    const double unit = std::pow(10.0, static_cast<double>(-precision));  // round(x, -2) rounds to hundreds
    rounded = precision <= 0 ? std::nearbyint(v.number() / unit) * unit : v.number();
  }
  if (v.is_integer()) return Value(static_cast<int64_t>(rounded));
  return Value(rounded);
}

// ---- filters on sequences ----

Value f_length(Renderer&, const Value& v, Args& a) {
  bind("length", a, {});
  return Value(length(v));
}

Value f_list(Renderer&, const Value& v, Args& a) {
  bind("list", a, {});
  return Value::list(iterate(v));
}

Value f_first(Renderer&, const Value& v, Args& a) {
  bind("first", a, {});
  const List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Renderer&, const Value& v, Args& a) {
  bind("last", a, {});
  const List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_reverse(Renderer&, const Value& v, Args& a) {
  bind("reverse", a, {});
  if (v.is_string()) {
    std::u32string chars = decode(v.str());
    std::reverse(chars.begin(), chars.end());
    return Value(encode(chars));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_join(Renderer&, const Value& v, Args& a) {
  const auto p = bind("join", a, {"d", "attribute"});
  const std::string separator = to_str(p[0].value_or(Value("")));
  const Value attribute = p[1].value_or(Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += separator;
    out += to_str(lookup_path(item, attribute));
    first = false;
    Renderer::check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_default(Renderer&, const Value& v, Args& a) {
  const auto p = bind("default", a, {"default_value", "boolean"});
  const bool boolean = truthy(p[1].value_or(Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return p[0].value_or(Value(""));
  return v;
}

Value f_items(Renderer&, const Value& v, Args& a) {
  bind("items", a, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_mapping()) fail("Can only get item pairs from a mapping.");
  List pairs;
  for (const auto& [key, value] : v.dict().items) pairs.push_back(Value::tuple({key, value}));
  return Value::list(std::move(pairs));
}

Value f_dictsort(Renderer&, const Value& v, Args& a) {
  const auto p = bind("dictsort", a, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = truthy(p[0].value_or(Value(false)));
  const std::string by = to_str(p[1].value_or(Value("key")));
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  require_defined(v);
  if (!v.is_mapping()) fail(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  List pairs;
  for (const auto& [key, value] : v.dict().items) pairs.push_back(Value::tuple({key, value}));
  const size_t pos = by == "key" ? 0 : 1;
  return Value::list(sorted(std::move(pairs), truthy(p[2].value_or(Value(false))),
                            [&](const Value& pair) { return fold_case(pair.items()[pos], case_sensitive); }));
}

Value f_sort(Renderer&, const Value& v, Args& a) {
  const auto p = bind("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool case_sensitive = truthy(p[1].value_or(Value(false)));
  const Value attribute = p[2].value_or(Value::none());
  // attribute="a,b" sorts by a, then b.
  std::vector<Value> attributes;
  if (attribute.is_string()) {
    for (size_t from = 0;;) {
      const size_t comma = attribute.str().find(',', from);
      attributes.emplace_back(attribute.str().substr(from, comma == std::string::npos ? std::string::npos : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  } else {
    attributes.push_back(attribute);
  }
  return Value::list(sorted(iterate(v), truthy(p[0].value_or(Value(false))), [&](const Value& item) {
    List key;
    for (const Value& attr : attributes) key.push_back(fold_case(lookup_path(item, attr), case_sensitive));
    return Value::list(std::move(key));
  }));
}

Value f_unique(Renderer&, const Value& v, Args& a) {
  const auto p = bind("unique", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(p[0].value_or(Value(false)));
  const Value attribute = p[1].value_or(Value::none());
  List seen, out;
  for (const Value& item : iterate(v)) {
    const Value key = fold_case(lookup_path(item, attribute), case_sensitive);
    if (key.is(Value::Kind::List) || key.is(Value::Kind::Dict)) fail(fmt::format("unhashable type: '{}'", type_name(key)));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value min_or_max(const Value& v, Args& a, bool max) {
  const auto p = bind(max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(p[0].value_or(Value(false)));
  const Value attribute = p[1].value_or(Value::none());
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = fold_case(lookup_path(items[0], attribute), case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = fold_case(lookup_path(items[i], attribute), case_sensitive);
    if (max ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}
Value f_max(Renderer&, const Value& v, Args& a) { return min_or_max(v, a, true); }
Value f_min(Renderer&, const Value& v, Args& a) { return min_or_max(v, a, false); }

Value f_sum(Renderer&, const Value& v, Args& a) {
  const auto p = bind("sum", a, {"attribute", "start"});
  const Value attribute = p[0].value_or(Value::none());
  Value total = p[1].value_or(Value(0));
  if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : iterate(v)) total = binary_op("+", total, lookup_path(item, attribute));
  return total;
}

// map(attribute='x', default=d) or map('filter', args...).
Value f_map(Renderer& r, const Value& v, Args& a) {
  const List items = truthy(v) ? iterate(v) : List();
  List out;
  if (a.positional.empty() && !a.keyword.empty() && a.keyword.front().first == "attribute") {
    const auto p = bind("map", a, {"attribute", "default"});
    for (const Value& item : items) {
      Value mapped = lookup_path(item, *p[0]);
      out.push_back(mapped.is_undefined() && p[1] ? *p[1] : mapped);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) fail("map requires a filter argument");
  const std::string name = expect_string(a.positional.front(), "map's filter name");
  for (const Value& item : items) {
    Args args{List(a.positional.begin() + 1, a.positional.end()), a.keyword};
    out.push_back(apply_filter(r, name, item, args));
  }
  return Value::list(std::move(out));
}

// select, reject, selectattr and rejectattr: keep the items whose (attribute's) test is `keep`.
Value select_items(Renderer& r, const Value& v, Args& a, bool by_attribute, bool keep) {
  const List items = truthy(v) ? iterate(v) : List();
  size_t next = 0;
  Value attribute = Value::none();
  if (by_attribute) {
    if (a.positional.empty()) fail("selectattr and rejectattr need an attribute");
    attribute = a.positional[next++];
  }
  std::optional<std::string> test;
  if (next < a.positional.size()) test = expect_string(a.positional[next++], "the test's name");
  List out;
  for (const Value& item : items) {
    const Value subject = lookup_path(item, attribute);
    bool passes;
    if (test) {
      Args args{List(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end()), a.keyword};
      passes = apply_test(r, *test, subject, args);
    } else {
      passes = truthy(subject);
    }
    if (passes == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Renderer& r, const Value& v, Args& a) { return select_items(r, v, a, false, true); }
Value f_reject(Renderer& r, const Value& v, Args& a) { return select_items(r, v, a, false, false); }
Value f_selectattr(Renderer& r, const Value& v, Args& a) { return select_items(r, v, a, true, true); }
Value f_rejectattr(Renderer& r, const Value& v, Args& a) { return select_items(r, v, a, true, false); }

Value f_attr(Renderer&, const Value& v, Args& a) {
  const auto p = bind("attr", a, {"name"}, 1);
  const std::string name = to_str(*p[0]);
  return python_attribute(v, name).value_or(no_attribute(v, name));
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},         {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length},      {"d", f_default},         {"default", f_default},       {"dictsort", f_dictsort},
      {"first", f_first},       {"float", f_float},       {"indent", f_indent},         {"int", f_int},
      {"items", f_items},       {"join", f_join},         {"last", f_last},             {"length", f_length},
      {"list", f_list},         {"lower", f_lower},       {"map", f_map},               {"max", f_max},
      {"min", f_min},           {"reject", f_reject},     {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse},   {"round", f_round},       {"select", f_select},         {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},     {"sum", f_sum},               {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},         {"unique", f_unique},         {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests ----

// A test's argument: the one it needs, by position or by the name Jinja2 gives it.
Value test_argument(std::string_view test, Args& a) { return *bind(test, a, {"value"}, 1)[0]; }

bool divisible(const Value& v, const Value& by) {
  return equal(binary_op("%", v, by), Value(0));
}

// Python's islower/isupper: some cased character, and none of the other case.
bool all_cased_as(const Value& v, bool lower) {
  bool cased = false;
  for (char32_t c : decode(to_str(v))) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LT) {
      if (lower) return false;
      cased = true;
    } else if (category == UTF8PROC_CATEGORY_LL) {
      if (!lower) return false;
      cased = true;
    }
  }
  return cased;
}

bool same_object(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::None:
    case Value::Kind::Bool: return equal(a, b);
    case Value::Kind::Int: return a.integer() == b.integer() && a.integer() >= -5 && a.integer() <= 256;  // CPython's cached ints
    case Value::Kind::Undefined:
    case Value::Kind::Float:
    case Value::Kind::String: return false;
    default: return a.same_object(b);
  }
}

// Tests of what a value is take no argument.
#define MESHNN_TEST(name, expression)                 \
  bool t_##name(Renderer&, const Value& v, Args& a) { \
    bind(#name, a, {});                               \
    return expression;                                \
  }
MESHNN_TEST(defined, !v.is_undefined())
MESHNN_TEST(undefined, v.is_undefined())
MESHNN_TEST(none, v.is(Value::Kind::None))
MESHNN_TEST(boolean, v.is(Value::Kind::Bool))
MESHNN_TEST(true, v.is(Value::Kind::Bool) && v.boolean())
MESHNN_TEST(false, v.is(Value::Kind::Bool) && !v.boolean())
MESHNN_TEST(string, v.is_string())
MESHNN_TEST(number, v.is_number())
MESHNN_TEST(integer, v.is(Value::Kind::Int))
MESHNN_TEST(float, v.is(Value::Kind::Float))
MESHNN_TEST(mapping, v.is_mapping())
// Jinja2's Undefined iterates (over nothing), has a length and __getitem__, and has __call__ (it
// raises): iterable, sequence and callable all say yes.
MESHNN_TEST(iterable, v.is_string() || v.is_sequence() || v.is_mapping() || v.is_undefined())
MESHNN_TEST(sequence, v.is_string() || v.is_sequence() || v.is_mapping() || v.is_undefined())
MESHNN_TEST(callable, v.is(Value::Kind::Callable) || v.is_undefined())
MESHNN_TEST(lower, all_cased_as(v, true))
MESHNN_TEST(upper, all_cased_as(v, false))
MESHNN_TEST(even, divisible(v, Value(2)))
MESHNN_TEST(odd, !divisible(v, Value(2)))
MESHNN_TEST(filter, v.is_string() && find_filter(v.str()) != nullptr)
MESHNN_TEST(test, v.is_string() && find_test(v.str()) != nullptr)
#undef MESHNN_TEST

bool t_divisibleby(Renderer&, const Value& v, Args& a) { return divisible(v, test_argument("divisibleby", a)); }
bool t_sameas(Renderer&, const Value& v, Args& a) { return same_object(v, test_argument("sameas", a)); }

template <const char* Op>
bool comparison_test(Renderer&, const Value& v, Args& a) {
  return compare_op(Op, v, test_argument(Op, a));
}
constexpr char kEq[] = "==", kNe[] = "!=", kLt[] = "<", kLe[] = "<=", kGt[] = ">", kGe[] = ">=", kIn[] = "in";

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},         {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"string", t_string},     {"number", t_number},
      {"integer", t_integer},   {"float", t_float},         {"mapping", t_mapping},   {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"lower", t_lower},       {"upper", t_upper},
      {"even", t_even},         {"odd", t_odd},             {"filter", t_filter},     {"test", t_test},
      {"divisibleby", t_divisibleby}, {"sameas", t_sameas},
      {"eq", comparison_test<kEq>}, {"equalto", comparison_test<kEq>}, {"==", comparison_test<kEq>},
      {"ne", comparison_test<kNe>}, {"!=", comparison_test<kNe>},
      {"lt", comparison_test<kLt>}, {"lessthan", comparison_test<kLt>}, {"<", comparison_test<kLt>},
      {"le", comparison_test<kLe>}, {"<=", comparison_test<kLe>},
      {"gt", comparison_test<kGt>}, {"greaterthan", comparison_test<kGt>}, {">", comparison_test<kGt>},
      {"ge", comparison_test<kGe>}, {">=", comparison_test<kGe>},
      {"in", comparison_test<kIn>},
  };
  return table;
}

// ---- globals ----

Value g_range(Renderer&, Args& a) {
  if (!a.keyword.empty()) fail("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3) fail("range expected 1 to 3 arguments");
  std::vector<int64_t> n;
  for (const Value& v : a.positional) n.push_back(expect_integer(v, "range's arguments"));
  const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (count > 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List items;
  for (int64_t i = 0; i < count; ++i) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

// dict(...) and namespace(...): an optional mapping or list of pairs, then keyword arguments.
Dict dict_arguments(std::string_view function, Args& a) {
  Dict d;
  if (a.positional.size() > 1) fail(fmt::format("{} expected at most 1 positional argument", function));
  if (!a.positional.empty()) {
    const Value& source = a.positional[0];
    if (source.is_mapping()) {
      d = source.dict();
    } else {
      for (const Value& pair : iterate(source)) {
        const List kv = iterate(pair);
        if (kv.size() != 2) fail(fmt::format("{}: each item must be a pair", function));
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [name, value] : a.keyword) d.set(Value(name), std::move(value));
  return d;
}

Value g_strftime_now(Renderer& r, Args& a) {
  const auto p = bind("strftime_now", a, {"format"}, 1);
  // datetime.strftime does %f, %z and %Z itself: a naive local time has no zone.
  std::string format;
  const std::string& given = expect_string(*p[0], "strftime_now's format");
  for (size_t i = 0; i < given.size(); ++i) {
    if (given[i] == '%' && i + 1 < given.size()) {
      const char c = given[++i];
      if (c == 'f') {
        format += "000000";
      } else if (c != 'z' && c != 'Z') {
        format += '%';
        format += c;
      }
    } else {
      format += given[i];
    }
  }
  const std::time_t now = r.now();
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(format.size() * 4 + 64, '\0');
  // strftime returns 0 both for a buffer too small and an empty result: a marker tells them apart.
  const std::string marked = format + "\x01";
  size_t n;
  while ((n = std::strftime(out.data(), out.size(), marked.c_str(), &local)) == 0) {
    Renderer::check_size(out.size() * 2);
    out.resize(out.size() * 2);
  }
  out.resize(n - 1);
  return Value(std::move(out));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  const auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

Value apply_filter(Renderer& r, const std::string& name, const Value& subject, Args& args) {
  const FilterFn f = find_filter(name);
  if (f == nullptr) fail(fmt::format("No filter named '{}'.", name));
  return f(r, subject, args);
}

bool apply_test(Renderer& r, const std::string& name, const Value& subject, Args& args) {
  const TestFn t = find_test(name);
  if (t == nullptr) fail(fmt::format("No test named '{}'.", name));
  return t(r, subject, args);
}

void add_globals(Scope& scope) {
  scope.vars["range"] = Value::callable("range", g_range);
  scope.vars["dict"] = Value::callable("dict", [](Renderer&, Args& a) { return Value::dict(dict_arguments("dict", a)); });
  scope.vars["namespace"] = Value::callable("namespace", [](Renderer& r, Args& a) {
    Value ns = Value::name_space(dict_arguments("namespace", a));
    r.track_namespace(ns);
    return ns;
  });
  scope.vars["raise_exception"] = Value::callable("raise_exception", [](Renderer&, Args& a) -> Value {
    const auto p = bind("raise_exception", a, {"message"}, 1);
    throw RaisedError{to_str(*p[0])};
  });
  scope.vars["strftime_now"] = Value::callable("strftime_now", g_strftime_now);
}

}  // namespace meshnn::text::chat_template_detail
