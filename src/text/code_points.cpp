#include "code_points.hpp"

namespace meshnn::text::detail {

char32_t next_code_point(std::string_view s, size_t& at) {
  const auto lead = static_cast<unsigned char>(s[at]);
  const size_t n = utf8_length(lead);
  char32_t cp = n == 1 ? lead : lead & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[at + k]) & 0x3F);
  at += n;
  return cp;
}

char32_t previous_code_point(std::string_view s, size_t& at) {
  do --at;
  while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80);
  size_t next = at;
  return next_code_point(s, next);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace meshnn::text::detail
