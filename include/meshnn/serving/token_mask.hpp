// Constrained decoding's mask: which tokens of this device's vocabulary shard a JsonCursor can take
// whole, as the next token of an answer. The others' logits become -inf before the sampler sees
// them, so whatever it draws keeps the answer inside its grammar.
//
// Each device masks the columns it holds (the vocabulary is sharded over the mesh), with no
// communication: every device follows the same cursor through the same sampled tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/sampler.hpp"

namespace meshnn::serving {

// What each token id writes after other tokens (text::TokenTexts): the bytes a grammar sees.
using TokenBytes = std::vector<std::string>;

class TokenMask {
 public:
  // `token_bytes` covers the vocabulary (ids past its end, such as a model's padded embedding rows,
  // write nothing). Tokens that write nothing (special ones, eos) are never allowed.
  TokenMask(std::shared_ptr<const TokenBytes> token_bytes, const VocabShard& shard);

  // Sets to -inf every column of `row` (this device's shard) whose token `cursor` cannot take
  // whole. The shard's tokens are walked in byte order, so tokens sharing a start feed it once, and
  // every token beginning with a refused start is skipped. Within a string's text, the tokens that
  // are plain text (whole characters and escapes, no closing quote) are allowed without a walk:
  // most of a vocabulary, and most of a JSON answer's tokens. Allocates nothing after the first
  // call.
  void apply(std::span<float> row, const JsonCursor& cursor);
  // The bytes of any token of the vocabulary (empty past its end).
  std::string_view bytes(int32_t id) const;

 private:
  std::shared_ptr<const TokenBytes> bytes_;
  VocabShard shard_;
  // A list of tokens sorted by their bytes, and how many bytes each shares with the one before.
  struct Walk {
    std::vector<int32_t> order;
    std::vector<uint32_t> common;
  };
  Walk sorted(std::vector<int32_t> ids) const;
  void walk(const Walk& tokens, const JsonCursor& cursor);

  Walk all_;          // the shard's tokens that write something
  Walk not_text_;     // of those, the ones that are not plain string text
  std::vector<int32_t> plain_text_;  // the others
  std::vector<JsonCursor> after_;  // after_[k]: the cursor after the first k bytes of the token at hand
  std::vector<uint8_t> allowed_;   // per column of the shard
};

}  // namespace meshnn::serving
