#include "meshnn/serving/token_mask.hpp"

#include <algorithm>
#include <limits>

#include "meshnn/core/error.hpp"

namespace meshnn::serving {

TokenMask::TokenMask(std::shared_ptr<const TokenBytes> token_bytes, const VocabShard& shard)
    : bytes_(std::move(token_bytes)), shard_(shard) {
  MESHNN_CHECK(bytes_ != nullptr, "TokenMask: no token bytes");
  for (int64_t c = 0; c < shard.valid; ++c)
    if (!bytes(static_cast<int32_t>(shard.offset + c)).empty()) order_.push_back(static_cast<int32_t>(shard.offset + c));
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  common_.assign(order_.size(), 0);
  for (size_t i = 1; i < order_.size(); ++i) {
    const std::string_view a = bytes(order_[i - 1]), b = bytes(order_[i]);
    common_[i] = static_cast<uint32_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  }
  allowed_.assign(static_cast<size_t>(shard.valid), 0);
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
    for (int32_t id : order_) longest = std::max(longest, bytes(id).size());
    after_.assign(longest + 1, cursor);
  }
  std::fill(allowed_.begin(), allowed_.end(), 0);
  after_[0].copy_from(cursor);
  size_t ready = 0;  // after_[0..ready] hold the starts of the token at hand
  for (size_t i = 0; i < order_.size(); ++i) {
    const std::string_view token = bytes(order_[i]);
    size_t at = std::min<size_t>(common_[i], ready);
    bool taken = true;
    for (; at < token.size(); ++at) {
      after_[at + 1].copy_from(after_[at]);
      if (!after_[at + 1].feed(static_cast<uint8_t>(token[at]))) {
        taken = false;
        break;
      }
    }
    if (taken) {
      allowed_[static_cast<size_t>(order_[i] - shard_.offset)] = 1;
      ready = token.size();
      continue;
    }
    // Byte `at` was refused: so is every following token that shares the token's first at + 1 bytes.
    ready = at;
    while (i + 1 < order_.size() && common_[i + 1] > at) ++i;
  }
  for (size_t c = 0; c < allowed_.size(); ++c)
    if (!allowed_[c]) row[c] = -std::numeric_limits<float>::infinity();
}

}  // namespace meshnn::serving
