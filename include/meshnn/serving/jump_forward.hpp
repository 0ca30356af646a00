// Jump-forward decoding for requests with a grammar. Where the grammar leaves one way to go on (the
// rest of a key once its first bytes tell it apart, the rest of a literal, closing brackets, a tool
// call block's closing tag), those bytes are written at once, as tokens of the vocabulary, and the
// model reads them all in the request's next pass instead of one pass each.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/token_mask.hpp"

namespace meshnn::serving {

class ForcedTokens {
 public:
  // `token_bytes`: what each id of the vocabulary writes (token_mask.hpp).
  explicit ForcedTokens(std::shared_ptr<const TokenBytes> token_bytes);

  // The tokens that spell the bytes `cursor` forces next (JsonCursor::forced_bytes), at most
  // `max_tokens`, each the longest token that begins the bytes still to write (of equal ones, the
  // highest id: a merged piece rather than a byte fallback). `cursor` takes them. Stops early where
  // no token of the vocabulary begins the rest.
  std::vector<int32_t> take(JsonCursor& cursor, int64_t max_tokens) const;

 private:
  std::shared_ptr<const TokenBytes> bytes_;
  std::unordered_map<std::string_view, int32_t> id_of_;  // keys view bytes_'s strings
  size_t longest_ = 0;
};

}  // namespace meshnn::serving
