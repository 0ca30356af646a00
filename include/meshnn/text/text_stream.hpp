// Turns generated token ids into text as they arrive, for printing while a request decodes.
//
// A token's text can depend on its neighbours (SentencePiece drops the space of the very first
// piece) and a character can span several tokens (byte pieces), so each new token's text is the
// difference between decoding a short window with and without it, and text is released only up to
// the last whole UTF-8 character. Bytes that can never form one are released as U+FFFD, so what
// comes out is always valid UTF-8, and all of it together equals generated_text(all ids).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshnn/text/tokenizer.hpp"

namespace meshnn::text {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Adds a token; returns the text it completes ("" while a character is unfinished). An id
  // beyond the tokenizer's vocabulary adds nothing: models pad their embedding past it, and a
  // random model may sample those rows.
  std::string push(int32_t id);
  // Ends the stream; returns what was held back (an unfinished character becomes U+FFFD).
  std::string finish();
  // Everything released so far.
  const std::string& text() const { return text_; }

 private:
  std::string window_text() const;

  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  // The window ids_[window_begin_, end) decodes to bytes of which the first window_released_ are
  // out. Once all are out, the window restarts at the last token, which stays as context.
  size_t window_begin_ = 0;
  size_t window_released_ = 0;
  std::string text_;
};

// The text of generated ids: sanitize_utf8(decode) of those within the tokenizer's vocabulary
// (see TextStream::push). Special tokens such as eos decode to nothing.
std::string generated_text(const Tokenizer& tokenizer, std::span<const int32_t> ids);

// One token's own text, as a list of log-probabilities shows it: the bytes the token adds after
// another, so a SentencePiece piece keeps the leading space that decoding it alone drops (" world",
// not "world"). Raw bytes: a byte piece may be part of a character. "" for special tokens and ids
// beyond the tokenizer's vocabulary.
// TokenTexts of every id in [0, vocab): what each token of a model's vocabulary writes (nothing for
// ids past the tokenizer's, such as padded embedding rows). Structured output's grammars see these.
std::vector<std::string> vocabulary_texts(const Tokenizer& tokenizer, int64_t vocab);

class TokenTexts {
 public:
  explicit TokenTexts(const Tokenizer& tokenizer);
  std::string operator()(int32_t id) const;

 private:
  const Tokenizer* tokenizer_;
  int32_t anchor_ = -1;  // a token with text of its own, decoded before the one asked for
  size_t anchor_bytes_ = 0;
};

}  // namespace meshnn::text
