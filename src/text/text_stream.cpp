#include "meshnn/text/text_stream.hpp"

#include <span>
#include <vector>

#include "meshnn/text/utf8.hpp"

namespace meshnn::text {

std::string TextStream::window_text() const {
  return tokenizer_->decode(std::span<const int32_t>(ids_).subspan(window_begin_));
}

std::string TextStream::push(int32_t id) {
  if (id >= tokenizer_->vocab_size()) return "";
  ids_.push_back(id);
  const std::string bytes = window_text();
  // A decoder may rewrite earlier text when a token arrives; nothing already out can be taken back,
  // so such a window waits until it has grown past what was released.
  if (bytes.size() <= window_released_) return "";
  const std::string_view fresh = std::string_view(bytes).substr(window_released_);
  const size_t settled = settled_utf8_length(fresh);
  std::string out = sanitize_utf8(fresh.substr(0, settled));
  window_released_ += settled;
  if (window_released_ == bytes.size()) {
    // Decoding the last token alone gives its text as the first of a sequence, which is how the
    // next window will decode it too, so the difference stays that of the new tokens.
    window_begin_ = ids_.size() - 1;
    window_released_ = window_text().size();
  }
  text_ += out;
  return out;
}

std::string TextStream::finish() {
  const std::string bytes = window_text();
  std::string out = bytes.size() > window_released_ ? sanitize_utf8(std::string_view(bytes).substr(window_released_)) : "";
  window_begin_ = ids_.size();
  window_released_ = 0;
  text_ += out;
  return out;
}

std::string generated_text(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id < tokenizer.vocab_size()) known.push_back(id);
  return sanitize_utf8(tokenizer.decode(known));
}

TokenTexts::TokenTexts(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {
  for (const int32_t id : tokenizer.encode("a")) {
    const std::string text = tokenizer.decode(std::span<const int32_t>(&id, 1));
    if (!text.empty()) {
      anchor_ = id;
      anchor_bytes_ = text.size();
    }
  }
}

std::vector<std::string> vocabulary_texts(const Tokenizer& tokenizer, int64_t vocab) {
  const TokenTexts texts(tokenizer);
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(vocab));
  for (int64_t id = 0; id < vocab; ++id) out.push_back(texts(static_cast<int32_t>(id)));
  return out;
}

std::string TokenTexts::operator()(int32_t id) const {
  if (id < 0 || id >= tokenizer_->vocab_size()) return {};
  if (anchor_ < 0) return tokenizer_->decode(std::span<const int32_t>(&id, 1));
  const int32_t pair[2] = {anchor_, id};
  std::string text = tokenizer_->decode(pair);
  return text.size() > anchor_bytes_ ? text.substr(anchor_bytes_) : std::string();
}

}  // namespace meshnn::text
