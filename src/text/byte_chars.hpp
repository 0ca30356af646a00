// GPT-2's byte <-> character table, the alphabet of every byte-level BPE vocabulary.
//
// Byte-level BPE runs on bytes but stores its tokens as text, so each of the 256 byte values has a
// printable character standing for it: the bytes that print in Latin-1 ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves, the other 68 (controls, space, 0x7F..0xA0, the soft hyphen)
// for U+0100, U+0101, ... in byte order. A space is therefore 'Ġ' (U+0120) and a newline 'Ċ'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshnn::text::detail {

// The character standing for byte `b`.
char32_t byte_char(uint8_t b);

// The byte that character `c` stands for, if it is one of the 256.
std::optional<uint8_t> char_byte(char32_t c);

// Appends the characters (as UTF-8) standing for each byte of `bytes`.
void append_byte_chars(std::string& out, std::string_view bytes);

// The bytes a token's text stands for, as Hugging Face's ByteLevel decoder reads it: each
// character mapped back to its byte when all of them are in the table, else the text's own UTF-8
// (an added token such as "hello world" keeps its space, which has no byte character).
std::string token_bytes(std::string_view token);

}  // namespace meshnn::text::detail
