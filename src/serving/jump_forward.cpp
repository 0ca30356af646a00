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
    int32_t id = -1;
    size_t length = std::min(rest.size(), longest_);
    for (; length > 0 && id < 0; --length)
      if (const auto it = id_of_.find(rest.substr(0, length)); it != id_of_.end()) id = it->second;
    if (id < 0) break;
    const size_t taken = length + 1;  // the loop stepped past it
    cursor.feed(rest.substr(0, taken));
    rest.remove_prefix(taken);
    tokens.push_back(id);
  }
  return tokens;
}

}  // namespace meshnn::serving
