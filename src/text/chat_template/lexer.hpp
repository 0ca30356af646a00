// Splits a template into text and the tokens inside its tags, as Jinja2's lexer does with the
// environment transformers uses: trim_blocks and lstrip_blocks on, keep_trailing_newline off,
// `-`/`+` whitespace control, comments dropped and {% raw %} bodies kept as text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshnn::text::chat_template_detail {

enum class TokenType {
  Text,        // template text, after whitespace control
  BlockBegin,  // {%
  BlockEnd,    // %}
  VarBegin,    // {{
  VarEnd,      // }}
  Name,
  String,  // `text` holds the value, escapes decoded
  Integer,
  Float,
  Operator,
  End,  // after the last token
};

struct Token {
  TokenType type;
  std::string text;
  int line;
};

// Throws meshnn::Error "chat template line N: message".
[[noreturn]] void syntax_error(int line, std::string_view message);

std::vector<Token> tokenize(std::string_view source);

}  // namespace meshnn::text::chat_template_detail
