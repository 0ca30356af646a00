// Code points in UTF-8 text, as the byte-level BPE tokenizer walks and writes them (the text is
// checked with first_invalid_utf8 before any of these run on it).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace meshnn::text::detail {

// Bytes of the sequence that `lead` starts (1 for ASCII and for a stray continuation byte, which
// valid text never has at a code point boundary).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// The code point starting at s[at] in valid UTF-8; advances `at` past it.
char32_t next_code_point(std::string_view s, size_t& at);

// The code point that ends at s[at - 1] in valid UTF-8; moves `at` back to its first byte.
char32_t previous_code_point(std::string_view s, size_t& at);

void append_utf8(std::string& out, char32_t cp);

}  // namespace meshnn::text::detail
