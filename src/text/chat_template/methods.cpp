// Attribute and item lookup as Jinja2's immutable sandbox does it, and the methods of str, dict
// and list that templates call.
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>

#include "builtins.hpp"
#include "evaluate.hpp"

namespace meshnn::text::chat_template_detail {

std::vector<std::optional<Value>> bind(std::string_view function, Args& args,
                                       std::initializer_list<std::string_view> params, size_t required) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.positional.size() > params.size())
    fail(fmt::format("{}() takes at most {} argument(s) ({} given)", function, params.size(), args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [name, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), name);
    if (it == params.end()) fail(fmt::format("{}() got an unexpected keyword argument '{}'", function, name));
    std::optional<Value>& slot = bound[it - params.begin()];
    if (slot) fail(fmt::format("{}() got multiple values for argument '{}'", function, name));
    slot = std::move(value);
  }
  for (size_t i = 0; i < required; ++i)
    if (!bound[i]) fail(fmt::format("{}() missing required argument '{}'", function, *(params.begin() + i)));
  return bound;
}

const std::string& expect_string(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail(v.undefined_reason());
  if (!v.is_string()) fail(fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.str();
}

int64_t expect_integer(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail(v.undefined_reason());
  if (!v.is_integer()) fail(fmt::format("{} must be an integer, not {}", what, type_name(v)));
  return v.integer();
}

namespace {

template <typename Map>
std::string map_code_points(const std::string& s, Map map) {
  std::u32string chars = decode(s);
  for (char32_t& c : chars) c = static_cast<char32_t>(map(static_cast<utf8proc_int32_t>(c)));
  return encode(chars);
}

bool is_cased(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

// str.title(): a cased character after an uncased one starts a word.
std::string str_title(const std::string& s) {
  std::u32string chars = decode(s);
  bool previous_cased = false;
  for (char32_t& c : chars) {
    const auto cp = static_cast<utf8proc_int32_t>(c);
    c = static_cast<char32_t>(previous_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
    previous_cased = is_cased(c);
  }
  return encode(chars);
}

// str.split(sep, maxsplit), CPython's algorithm for both the whitespace and the separator forms.
List str_split(const std::string& s, const Value& sep, int64_t max_split) {
  List parts;
  const std::u32string chars = decode(s);
  const size_t n = chars.size();
  int64_t splits_left = max_split < 0 ? std::numeric_limits<int64_t>::max() : max_split;
  if (sep.is(Value::Kind::None)) {
    size_t i = 0;
    while (splits_left-- > 0) {
      while (i < n && is_space(chars[i])) ++i;
      if (i == n) break;
      const size_t j = i;
      while (i < n && !is_space(chars[i])) ++i;
      parts.emplace_back(encode(chars.substr(j, i - j)));
    }
    while (i < n && is_space(chars[i])) ++i;
    if (i < n) parts.emplace_back(encode(chars.substr(i)));
    return parts;
  }
  const std::string& separator = expect_string(sep, "the separator");
  if (separator.empty()) fail("empty separator");
  size_t from = 0;
  for (size_t at; splits_left-- > 0 && (at = s.find(separator, from)) != std::string::npos; from = at + separator.size())
    parts.emplace_back(s.substr(from, at - from));
  parts.emplace_back(s.substr(from));
  return parts;
}

// The code point index of byte offset `at` in s (str.find answers in characters).
int64_t char_index(const std::string& s, size_t at) {
  return length(Value(s.substr(0, at)));
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  if (affix.is(Value::Kind::Tuple)) {
    return std::any_of(affix.items().begin(), affix.items().end(),
                       [&](const Value& a) { return affix_matches(s, a, prefix); });
  }
  const std::string& a = expect_string(affix, prefix ? "startswith's argument" : "endswith's argument");
  return a.size() <= s.size() && s.compare(prefix ? 0 : s.size() - a.size(), a.size(), a) == 0;
}

Value str_method(const std::string& s, const std::string& name, Args& args) {
  const std::string function = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto p = bind(function, args, {"chars"});
    return Value(str_strip(s, p[0].value_or(Value::none()), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const auto p = bind(function, args, {"affix"}, 1);
    return Value(affix_matches(s, *p[0], name == "startswith"));
  }
  if (name == "split") {
    const auto p = bind(function, args, {"sep", "maxsplit"});
    return Value::list(str_split(s, p[0].value_or(Value::none()), expect_integer(p[1].value_or(Value(-1)), "maxsplit")));
  }
  if (name == "splitlines") {
    const auto p = bind(function, args, {"keepends"});
    List lines;
    for (std::string& line : str_splitlines(s, truthy(p[0].value_or(Value(false))))) lines.emplace_back(std::move(line));
    return Value::list(std::move(lines));
  }
  if (name == "replace") {
    const auto p = bind(function, args, {"old", "new", "count"}, 2);
    return Value(str_replace(s, expect_string(*p[0], "replace's old"), expect_string(*p[1], "replace's new"),
                             expect_integer(p[2].value_or(Value(-1)), "replace's count")));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const auto p = bind(function, args, {"sub"}, 1);
    const std::string& sub = expect_string(*p[0], function + "'s argument");
    if (name == "count") {
      if (sub.empty()) return Value(length(Value(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    return Value(at == std::string::npos ? int64_t{-1} : char_index(s, at));
  }
  if (name == "join") {
    const auto p = bind(function, args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*p[0])) {
      out += (first ? "" : s) + expect_string(item, "each item str.join joins");
      first = false;
      Renderer::check_size(out.size());
    }
    return Value(std::move(out));
  }
  bind(function, args, {});
  if (name == "upper") return Value(str_upper(s));
  if (name == "lower") return Value(str_lower(s));
  if (name == "title") return Value(str_title(s));
  if (name == "capitalize") return Value(str_capitalize(s));
  fail(fmt::format("str.{}() is not supported", name));
}

Value dict_method(const Value& d, const std::string& name, Args& args) {
  const std::string function = "dict." + name;
  if (name == "get") {
    const auto p = bind(function, args, {"key", "default"}, 1);
    const Value* v = d.dict().find(*p[0]);
    return v != nullptr ? *v : p[1].value_or(Value::none());
  }
  bind(function, args, {});
  if (name == "copy") return d;  // nothing can change either
  List out;
  for (const auto& [k, v] : d.dict().items) {
    if (name == "items") {
      out.push_back(Value::tuple({k, v}));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& list, const std::string& name, Args& args) {
  const std::string function = "list." + name;
  if (name == "copy") {
    bind(function, args, {});
    return list;
  }
  const auto p = bind(function, args, {"value"}, 1);
  const List& items = list.items();
  if (name == "count") return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) {
                                      return equal(v, *p[0]);
                                    })));
  for (size_t i = 0; i < items.size(); ++i)
    if (equal(items[i], *p[0])) return Value(static_cast<int64_t>(i));
  fail(fmt::format("{} is not in list", repr(*p[0])));
}

bool one_of(const std::string& s, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// The method `name` of `object` bound to it, an undefined value when calling it is what the
// immutable sandbox forbids, or nullopt when the type has no such method.
std::optional<Value> method(const Value& object, const std::string& name) {
  const std::string type = type_name(object);
  const auto unsafe = [&] {
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type));
  };
  if (object.is_string()) {
    if (one_of(name, {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "splitlines", "replace", "find",
                      "rfind", "count", "join", "upper", "lower", "title", "capitalize"}))
      return Value::callable(type + "." + name, [s = object.str(), name](Renderer&, Args& args) {
        return str_method(s, name, args);
      });
    if (one_of(name, {"casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum",
                      "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
                      "isprintable", "isspace", "istitle", "isupper", "ljust", "maketrans", "partition",
                      "removeprefix", "removesuffix", "rindex", "rjust", "rpartition", "rsplit", "swapcase",
                      "translate", "zfill"}))
      return Value::undefined(fmt::format("meshnn does not implement str.{}()", name));
    return std::nullopt;
  }
  if (object.is_mapping()) {
    if (one_of(name, {"get", "items", "keys", "values", "copy"}))
      return Value::callable(type + "." + name, [object, name](Renderer&, Args& args) {
        return dict_method(object, name, args);
      });
    if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe();
    if (name == "fromkeys") return Value::undefined("meshnn does not implement dict.fromkeys()");
    return std::nullopt;
  }
  if (object.is_sequence()) {
    if (one_of(name, {"count", "index"}) || (name == "copy" && object.is(Value::Kind::List)))
      return Value::callable(type + "." + name, [object, name](Renderer&, Args& args) {
        return list_method(object, name, args);
      });
    if (object.is(Value::Kind::List) &&
        one_of(name, {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"}))
      return unsafe();
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> python_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail(object.undefined_reason());
  if (object.is(Value::Kind::Namespace) || object.is(Value::Kind::Loop)) {
    const Value* v = object.attributes().find(Value(name));
    return v != nullptr ? std::optional<Value>(*v) : std::nullopt;
  }
  return method(object, name);
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(object), name));
}

Value get_attribute(const Value& object, const std::string& name) {
  if (std::optional<Value> attribute = python_attribute(object, name)) return *attribute;
  if (object.is_mapping()) {
    if (const Value* v = object.dict().find(Value(name))) return *v;
  }
  return no_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail(object.undefined_reason());
  if (object.is_mapping()) {
    if (const Value* v = object.dict().find(key)) return *v;
  } else if ((object.is_sequence() || object.is_string()) && key.is_integer()) {
    const int64_t n = length(object);
    int64_t i = key.integer();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (object.is_sequence()) return object.items()[i];
      return Value(encode(decode(object.str()).substr(i, 1)));
    }
  }
  if (key.is_string()) return get_attribute(object, key.str());
  return Value::undefined(fmt::format("'{} object' has no element {}", type_name(object), repr(key)));
}

std::string str_upper(const std::string& s) { return map_code_points(s, utf8proc_toupper); }
std::string str_lower(const std::string& s) { return map_code_points(s, utf8proc_tolower); }

std::string str_capitalize(const std::string& s) {
  std::u32string chars = decode(str_lower(s));
  if (!chars.empty()) chars[0] = static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(chars[0])));
  return encode(chars);
}

std::string str_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string text = decode(s);
  const std::u32string set = chars.is(Value::Kind::None) ? std::u32string() : decode(expect_string(chars, "strip's chars"));
  const auto strip = [&](char32_t c) {
    return chars.is(Value::Kind::None) ? is_space(c) : set.find(c) != std::u32string::npos;
  };
  size_t begin = 0, end = text.size();
  while (left && begin < end && strip(text[begin])) ++begin;
  while (right && end > begin && strip(text[end - 1])) --end;
  return encode(text.substr(begin, end - begin));
}

std::string str_replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  std::string out;
  if (old.empty()) {  // Python puts `replacement` before every character and at the end
    const std::u32string chars = decode(s);
    size_t i = 0;
    for (; i <= chars.size() && count > 0; ++i, --count) {
      out += replacement;
      if (i < chars.size()) out += encode(chars.substr(i, 1));
      Renderer::check_size(out.size());
    }
    return out + (i < chars.size() ? encode(chars.substr(i)) : "");
  }
  size_t from = 0;
  for (size_t at; count > 0 && (at = s.find(old, from)) != std::string::npos; from = at + old.size(), --count) {
    out += s.substr(from, at - from) + replacement;
    Renderer::check_size(out.size());
  }
  return out + s.substr(from);
}

std::vector<std::string> str_splitlines(const std::string& s, bool keep_ends) {
  const std::u32string chars = decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const bool boundary = c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                          c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    const size_t end = i;
    if (c == U'\r' && i + 1 < chars.size() && chars[i + 1] == U'\n') ++i;
    lines.push_back(encode(chars.substr(start, (keep_ends ? i + 1 : end) - start)));
    start = i + 1;
  }
  if (start < chars.size()) lines.push_back(encode(chars.substr(start)));
  return lines;
}

}  // namespace meshnn::text::chat_template_detail
