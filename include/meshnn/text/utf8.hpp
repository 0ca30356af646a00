// UTF-8 checks for text made of token bytes: a model may emit any byte sequence (byte-fallback
// pieces, byte-level BPE tokens), and what reaches a terminal or a file must be valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace meshnn::text {

// Length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence which the next
// bytes could still complete. Invalid bytes count as settled (sanitize_utf8 replaces them).
size_t settled_utf8_length(std::string_view bytes);

// The offset of the first byte of `bytes` that does not begin a complete, valid UTF-8 sequence,
// or npos when all of it is valid.
size_t first_invalid_utf8(std::string_view bytes);

// `bytes` with what is not valid UTF-8 (stray continuation bytes, overlong forms, surrogates, code
// points beyond U+10FFFF, truncated sequences) replaced by U+FFFD: one per maximal subpart (a
// truncated sequence is one, every other invalid byte one), as Python's
// bytes.decode(errors="replace") and Rust's from_utf8_lossy do.
std::string sanitize_utf8(std::string_view bytes);

}  // namespace meshnn::text
