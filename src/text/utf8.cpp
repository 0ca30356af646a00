#include "utf8.hpp"

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

size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The range the second byte may take rules out overlong forms, surrogates (ED A0..BF) and
    // code points past U+10FFFF (F4 90.. and F5..FF) in one comparison.
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      n = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      n = 3;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      n = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return i;
    for (size_t k = 2; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace meshnn::text::detail
