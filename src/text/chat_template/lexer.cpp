#include "lexer.hpp"

#include <fmt/format.h>

#include <cstring>

#include "../code_points.hpp"
#include "meshnn/core/error.hpp"
#include "value.hpp"

namespace meshnn::text::chat_template_detail {

void syntax_error(int line, std::string_view message) {
  throw Error(fmt::format("chat template line {}: {}", line, message));
}

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the run of (Unicode) whitespace at s[at...]: Python's \s.
size_t space_run(std::string_view s, size_t at) {
  size_t end = at;
  while (end < s.size()) {
    size_t next = end;
    if (!is_space(detail::next_code_point(s, next))) break;
    end = next;
  }
  return end - at;
}

// `text` without its trailing whitespace: str.rstrip().
void rstrip(std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    size_t prev = end;
    if (!is_space(detail::previous_code_point(text, prev))) break;
    end = prev;
  }
  text.resize(end);
}

// A backslash escape of a string literal, as Python's unicode_escape decodes it; `at` is on the
// character after the backslash and moves past the escape.
void decode_escape(std::string_view s, size_t& at, std::string& out, int line) {
  const char c = s[at++];
  const auto hex = [&](size_t digits) {
    if (at + digits > s.size()) syntax_error(line, "truncated \\x, \\u or \\U escape in a string");
    char32_t cp = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char h = s[at++];
      if (!std::isxdigit(static_cast<unsigned char>(h))) syntax_error(line, "bad \\x, \\u or \\U escape in a string");
      cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (cp > 0x10FFFF) syntax_error(line, "\\U escape beyond U+10FFFF in a string");
    detail::append_utf8(out, cp);
  };
  switch (c) {
    case '\n': break;  // a line continuation
    case '\\': out += '\\'; break;
    case '\'': out += '\''; break;
    case '"': out += '"'; break;
    case 'a': out += '\a'; break;
    case 'b': out += '\b'; break;
    case 'f': out += '\f'; break;
    case 'n': out += '\n'; break;
    case 'r': out += '\r'; break;
    case 't': out += '\t'; break;
    case 'v': out += '\v'; break;
    case 'x': hex(2); break;
    case 'u': hex(4); break;
    case 'U': hex(8); break;
    case 'N': syntax_error(line, "\\N{...} escapes are not supported in strings");
    default:
      if (c >= '0' && c <= '7') {
        char32_t cp = c - '0';
        for (int k = 0; k < 2 && at < s.size() && s[at] >= '0' && s[at] <= '7'; ++k) cp = cp * 8 + (s[at++] - '0');
        detail::append_utf8(out, cp);
      } else {
        out += '\\';  // an unknown escape stays as written
        out += c;
      }
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the last match ended a line (or nothing came before)
    while (pos_ < s_.size()) {
      const size_t start = find_tag(pos_);
      if (start == std::string::npos) {
        emit(TokenType::Text, s_.substr(pos_), pos_);
        break;
      }
      const char kind = s_[start + 1];
      const char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2] : 0;
      std::string text = s_.substr(pos_, start - pos_);
      strip_before_tag(text, sign, kind != '{', line_starting);
      emit(TokenType::Text, std::move(text), pos_);
      pos_ = start + 2 + (sign ? 1 : 0);
      size_t raw_body = 0;
      if (kind == '#') {
        comment(start);
      } else if (kind == '%' && (raw_body = raw_begin()) != 0) {
        raw(start, raw_body);
      } else {
        tag(kind == '%', start);
      }
      line_starting = s_[pos_ - 1] == '\n';
    }
    tokens_.push_back({TokenType::End, "", line_at(s_.size())});
    return std::move(tokens_);
  }

 private:
  int line_at(size_t at) {
    for (; line_pos_ < at; ++line_pos_) line_ += s_[line_pos_] == '\n';
    return line_;
  }

  void emit(TokenType type, std::string text, size_t at) {
    if (type == TokenType::Text && text.empty()) return;
    tokens_.push_back({type, std::move(text), line_at(at)});
  }

  size_t find_tag(size_t from) const {
    for (size_t at = s_.find('{', from); at != std::string::npos && at + 1 < s_.size(); at = s_.find('{', at + 1))
      if (s_[at + 1] == '{' || s_[at + 1] == '%' || s_[at + 1] == '#') return at;
    return std::string::npos;
  }

  // `{%-` strips all whitespace before the tag; otherwise lstrip_blocks removes the spaces and
  // tabs between the line's start and a block or comment tag, unless the tag opens with `+`.
  static void strip_before_tag(std::string& text, char sign, bool lstrip, bool line_starting) {
    if (sign == '-') {
      rstrip(text);
    } else if (sign != '+' && lstrip) {
      const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
      if ((line_start > 0 || line_starting) && line_start < text.size() &&
          space_run(text, line_start) == text.size() - line_start)
        text.resize(line_start);
    }
  }

  // After an end delimiter with sign `sign`: `-` eats all whitespace, `+` nothing, none the one
  // newline trim_blocks removes (`newline_trim`: block and comment tags, not `}}`).
  void after_end(char sign, bool newline_trim) {
    if (sign == '-') {
      pos_ += space_run(s_, pos_);
    } else if (sign != '+' && newline_trim && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
  }

  void comment(size_t start) {
    const size_t body = pos_;
    const size_t end = s_.find("#}", body);
    if (end == std::string::npos) syntax_error(line_at(start), "missing end of comment tag");
    const char sign = end > body && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    pos_ = end + 2;
    after_end(sign, true);
  }

  // When the block tag at pos_ is `raw` (`{% raw %}`), the offset its body starts at, else 0.
  size_t raw_begin() const {
    size_t at = pos_ + space_run(s_, pos_);
    if (s_.compare(at, 3, "raw") != 0) return 0;
    at += 3;
    at += space_run(s_, at);
    if (s_.compare(at, 3, "-%}") == 0) return at + 3 + space_run(s_, at + 3);
    return s_.compare(at, 2, "%}") == 0 ? at + 2 : 0;
  }

  // The text up to {% endraw %}, which takes whitespace control and lstrip as other block tags do.
  void raw(size_t start, size_t body) {
    const bool line_starting = s_[body - 1] == '\n';
    for (size_t at = s_.find("{%", body); at != std::string::npos; at = s_.find("{%", at + 2)) {
      size_t p = at + 2;
      const char sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p++] : 0;
      p += space_run(s_, p);
      if (s_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      p += space_run(s_, p);
      char end_sign = 0;
      if (s_.compare(p, 3, "-%}") == 0 || s_.compare(p, 3, "+%}") == 0) end_sign = s_[p++];
      if (s_.compare(p, 2, "%}") != 0) continue;
      std::string text = s_.substr(body, at - body);
      strip_before_tag(text, sign, true, line_starting);
      emit(TokenType::Text, std::move(text), body);
      pos_ = p + 2;
      after_end(end_sign, true);
      return;
    }
    syntax_error(line_at(start), "missing {% endraw %} for {% raw %}");
  }

  // The tokens of a {% ... %} or {{ ... }} tag, up to and including its end.
  void tag(bool block, size_t start) {
    emit(block ? TokenType::BlockBegin : TokenType::VarBegin, block ? "{%" : "{{", start);
    std::string brackets;  // open ( [ {: an end delimiter inside them is two braces, not the end
    const char* end = block ? "%}" : "}}";
    while (true) {
      while (pos_ < s_.size() && ascii_space(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) syntax_error(line_at(start), fmt::format("missing '{}' for the tag opened here", end));
      if (brackets.empty()) {
        char sign = 0;
        if ((s_[pos_] == '-' || (block && s_[pos_] == '+')) && s_.compare(pos_ + 1, 2, end) == 0) sign = s_[pos_++];
        if (s_.compare(pos_, 2, end) == 0) {
          emit(block ? TokenType::BlockEnd : TokenType::VarEnd, end, pos_);
          pos_ += 2;
          after_end(sign, block);
          return;
        }
      }
      const size_t at = pos_;
      const char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        number(at);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        emit(TokenType::Name, s_.substr(at, pos_ - at), at);
      } else if (c == '\'' || c == '"') {
        string_literal(at);
      } else {
        operator_token(at, brackets);
      }
    }
  }

  void digits() {
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
            (s_[pos_] == '_' && pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])))))
      ++pos_;
  }

  // 12, 1_000, 1.5, 1e-5, 2.5E3; `x.0.1` is attribute 0 then 1, as Jinja2 reads it.
  void number(size_t at) {
    digits();
    bool is_float = false;
    const bool after_dot = at > 0 && s_[at - 1] == '.';
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (!after_dot && pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = at; k < pos_; ++k)
      if (s_[k] != '_') text += s_[k];
    emit(is_float ? TokenType::Float : TokenType::Integer, std::move(text), at);
  }

  void string_literal(size_t at) {
    const char quote = s_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= s_.size()) syntax_error(line_at(at), "unterminated string");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c == '\\' && pos_ < s_.size()) {
        decode_escape(s_, pos_, value, line_at(at));
      } else {
        value += c;
      }
    }
    emit(TokenType::String, std::move(value), at);
  }

  void operator_token(size_t at, std::string& brackets) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo)
      if (s_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        emit(TokenType::Operator, op, at);
        return;
      }
    const char c = s_[pos_];
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr)
      syntax_error(line_at(at), fmt::format("unexpected character '{}'", c));
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open) syntax_error(line_at(at), fmt::format("unexpected '{}'", c));
      brackets.pop_back();
    }
    ++pos_;
    emit(TokenType::Operator, std::string(1, c), at);
  }

  std::string s_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  // Jinja2 reads \r\n and \r as \n and drops one trailing newline (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace meshnn::text::chat_template_detail
