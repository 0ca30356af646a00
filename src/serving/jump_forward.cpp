#include "meshnn/serving/jump_forward.hpp"

#include <algorithm>

namespace meshnn::serving {

ForcedTokens::ForcedTokens(std::shared_ptr<const TokenBytes> token_bytes) : bytes_(std::move(token_bytes)) {
  for (size_t id = 0; id < bytes_->size(); ++id) {
    const std::string_view b = (*bytes_)[id];
    if (b.empty()) continue;
    id_of_[b] = static_cast<int32_t>(id);  // ids ascend: the highest of equal ones stays
    longest_ = std::max(longest_, b.size());
  }
}

std::vector<int32_t> ForcedTokens::take(JsonCursor& cursor, int64_t max_tokens) const {
  std::vector<int32_t> tokens;
  if (max_tokens <= 0) return tokens;
  // Enough bytes for the tokens asked for, however long they are.
  const std::string forced = cursor.forced_bytes(static_cast<size_t>(max_tokens) * longest_);
  std::string_view rest = forced;
  while (!rest.empty() && static_cast<int64_t>(tokens.size()) < max_tokens) {
    size_t length = std::min(rest.size(), longest_);
    auto it = id_of_.end();
    for (; length > 0; --length)
      if (it = id_of_.find(rest.substr(0, length)); it != id_of_.end()) break;
    if (length == 0) break;
    cursor.feed(rest.substr(0, length));
    rest.remove_prefix(length);
    tokens.push_back(it->second);
  }
  return tokens;
}

}  // namespace meshnn::serving
