#include "meshnn/serving/token_mask.hpp"

#include <algorithm>
#include <limits>

#include "meshnn/core/error.hpp"

namespace meshnn::serving {

TokenMask::TokenMask(std::shared_ptr<const TokenBytes> token_bytes, const VocabShard& shard)
    : bytes_(std::move(token_bytes)), shard_(shard) {
  MESHNN_CHECK(bytes_ != nullptr, "TokenMask: no token bytes");
  // Plain string text is what a cursor inside an unbounded string's text takes and stays inside
  // that text after: the cursor's own rule (whole UTF-8 characters, no quote, escapes complete).
  static const std::shared_ptr<const JsonGrammar> string_grammar = JsonGrammar::from_schema(R"({"type":"string"})");
  JsonCursor in_text(*string_grammar);
  in_text.feed(static_cast<uint8_t>('"'));
  std::vector<int32_t> writing, not_text;
  for (int64_t c = 0; c < shard.valid; ++c) {
    const auto id = static_cast<int32_t>(shard.offset + c);
    if (bytes(id).empty()) continue;
    writing.push_back(id);
    JsonCursor after = in_text;
    const bool plain = after.feed(bytes(id)) && after.in_string_text();
    (plain ? plain_text_ : not_text).push_back(id);
  }
  all_ = sorted(std::move(writing));
  not_text_ = sorted(std::move(not_text));
  allowed_.assign(static_cast<size_t>(shard.valid), 0);
}

TokenMask::Walk TokenMask::sorted(std::vector<int32_t> ids) const {
  Walk w;
  w.order = std::move(ids);
  std::sort(w.order.begin(), w.order.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  w.common.assign(w.order.size(), 0);
  for (size_t i = 1; i < w.order.size(); ++i) {
    const std::string_view a = bytes(w.order[i - 1]), b = bytes(w.order[i]);
    w.common[i] = static_cast<uint32_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  }
  return w;
}

std::string_view TokenMask::bytes(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < bytes_->size() ? std::string_view((*bytes_)[static_cast<size_t>(id)])
                                                              : std::string_view();
}

void TokenMask::apply(std::span<float> row, const JsonCursor& cursor) {
  MESHNN_CHECK(static_cast<int64_t>(row.size()) >= shard_.valid, "TokenMask: a row of {} columns for a shard of {}",
               row.size(), shard_.valid);
  if (after_.empty()) {
    size_t longest = 0;
    for (int32_t id : all_.order) longest = std::max(longest, bytes(id).size());
    after_.assign(longest + 1, cursor);
  }
  std::fill(allowed_.begin(), allowed_.end(), 0);
  if (cursor.in_string_text()) {
    for (int32_t id : plain_text_) allowed_[static_cast<size_t>(id - shard_.offset)] = 1;
    walk(not_text_, cursor);
  } else {
    walk(all_, cursor);
  }
  for (size_t c = 0; c < allowed_.size(); ++c)
    if (!allowed_[c]) row[c] = -std::numeric_limits<float>::infinity();
}

void TokenMask::walk(const Walk& tokens, const JsonCursor& cursor) {
  after_[0].copy_from(cursor);
  size_t ready = 0;  // after_[0..ready] hold the starts of the token at hand
  for (size_t i = 0; i < tokens.order.size(); ++i) {
    const std::string_view token = bytes(tokens.order[i]);
    size_t at = std::min<size_t>(tokens.common[i], ready);
    bool taken = true;
    for (; at < token.size(); ++at) {
      after_[at + 1].copy_from(after_[at]);
      if (!after_[at + 1].feed(static_cast<uint8_t>(token[at]))) {
        taken = false;
        break;
      }
    }
    if (taken) {
      allowed_[static_cast<size_t>(tokens.order[i] - shard_.offset)] = 1;
      ready = token.size();
      continue;
    }
    // Byte `at` was refused: so is every following token that shares the token's first at + 1 bytes.
    ready = at;
    while (i + 1 < tokens.order.size() && tokens.common[i + 1] > at) ++i;
  }
}

}  // namespace meshnn::serving
