#include "meshnn/text/utf8.hpp"

#include <cstdint>

namespace meshnn::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length a valid sequence starting with `lead` has, or 0 when `lead` cannot start one.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF (F5..FF)
}

// Whether byte `i` (1-based within the sequence) may follow `lead`: the second byte's range is
// narrower for some leads, which excludes overlong forms, surrogates and code points > U+10FFFF.
bool continuation_ok(unsigned char lead, size_t i, unsigned char byte) {
  if (i == 1) {
    if (lead == 0xE0) return byte >= 0xA0 && byte <= 0xBF;
    if (lead == 0xED) return byte >= 0x80 && byte <= 0x9F;
    if (lead == 0xF0) return byte >= 0x90 && byte <= 0xBF;
    if (lead == 0xF4) return byte >= 0x80 && byte <= 0x8F;
  }
  return byte >= 0x80 && byte <= 0xBF;
}

enum class Sequence { VALID, INVALID, INCOMPLETE };

// Classifies the sequence at bytes[pos]. `length` receives the bytes it covers when VALID, and
// when INVALID the bytes one U+FFFD replaces: the longest prefix of a valid sequence that was cut
// short (at least 1), the Unicode standard's "maximal subpart" practice.
Sequence classify(std::string_view bytes, size_t pos, size_t& length) {
  const auto lead = static_cast<unsigned char>(bytes[pos]);
  const size_t full = sequence_length(lead);
  length = 1;
  if (full == 0) return Sequence::INVALID;
  for (size_t i = 1; i < full; ++i) {
    if (pos + i >= bytes.size()) return Sequence::INCOMPLETE;
    if (!continuation_ok(lead, i, static_cast<unsigned char>(bytes[pos + i]))) return Sequence::INVALID;
    length = i + 1;
  }
  return Sequence::VALID;
}

}  // namespace

size_t settled_utf8_length(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t length = 0;
    const Sequence s = classify(bytes, pos, length);
    if (s == Sequence::INCOMPLETE) return pos;
    pos += length;
  }
  return pos;
}

size_t first_invalid_utf8(std::string_view bytes) {
  for (size_t pos = 0, length = 0; pos < bytes.size(); pos += length)
    if (classify(bytes, pos, length) != Sequence::VALID) return pos;
  return std::string_view::npos;
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t length = 0;
    const Sequence s = classify(bytes, pos, length);
    if (s == Sequence::INCOMPLETE) length = bytes.size() - pos;  // cut short by the end
    out.append(s == Sequence::VALID ? bytes.substr(pos, length) : kReplacement);
    pos += length;
  }
  return out;
}

}  // namespace meshnn::text
