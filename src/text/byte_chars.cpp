#include "byte_chars.hpp"

#include <algorithm>
#include <array>

#include "code_points.hpp"

namespace meshnn::text::detail {
namespace {

bool prints(unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// The table's characters are U+0021..U+00FF (the printing bytes themselves) and U+0100..U+0143
// (the 68 others), so the way back fits an array.
constexpr char32_t kCharsEnd = 0x100 + 68;

struct Table {
  std::array<char32_t, 256> chars{};
  // chars[b] as UTF-8, appended once per input byte: one or two bytes, as all are below U+0800.
  std::array<std::array<char, 2>, 256> utf8{};
  std::array<uint8_t, 256> utf8_size{};
  std::array<int16_t, kCharsEnd> byte_of{};  // -1 for characters that stand for no byte
  Table() {
    byte_of.fill(-1);
    char32_t next_unprintable = 0x100;
    std::string encoded;
    for (unsigned b = 0; b < 256; ++b) {
      chars[b] = prints(b) ? b : next_unprintable++;
      encoded.clear();
      append_utf8(encoded, chars[b]);
      std::copy(encoded.begin(), encoded.end(), utf8[b].begin());
      utf8_size[b] = static_cast<uint8_t>(encoded.size());
      byte_of[chars[b]] = static_cast<int16_t>(b);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

char32_t byte_char(uint8_t b) { return table().chars[b]; }

std::optional<uint8_t> char_byte(char32_t c) {
  if (c >= kCharsEnd || table().byte_of[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(table().byte_of[c]);
}

void append_byte_chars(std::string& out, std::string_view bytes) {
  const Table& t = table();
  for (const char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out.append(t.utf8[b].data(), t.utf8_size[b]);
  }
}

std::string token_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t at = 0; at < token.size();) {
    const std::optional<uint8_t> b = char_byte(next_code_point(token, at));
    if (!b) return std::string(token);
    bytes += static_cast<char>(*b);
  }
  return bytes;
}

}  // namespace meshnn::text::detail
