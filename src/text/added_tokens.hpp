// The "added_tokens" of tokenizer.json: tokens found in the text before anything else runs
// (special ones such as "<|eot_id|>", and plain ones a fine-tune added), each becoming its id
// whole.
//
// As Hugging Face's AddedVocabulary does: the tokens with "normalized": false are looked for in
// the raw text first; the stretches left over are normalized (normalizer.hpp), and the tokens
// with "normalized": true, their contents normalized the same way, are looked for in those. The
// caller runs the two passes (split) and the normalizer in between. Within a pass the leftmost
// occurrence wins, the longest token when several start there, and the search goes on after it.
// Per token:
//  - single_word: an occurrence touching a word character (Unicode letters, marks, decimal digits,
//    connector punctuation) on either side is not taken, and the search goes on after it;
//  - lstrip / rstrip: the white space before / after an occurrence becomes part of the token.
// One deliberate difference: after an rstrip the search goes on past the white space it took, so
// occurrences never overlap (tokenizers lets a token whose text starts with white space overlap).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "normalizer.hpp"

namespace meshnn::text::detail {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  std::string match;  // what is looked for: the content, normalized for a normalized token
};

class AddedTokens {
 public:
  // `list`: tokenizer.json's "added_tokens" (null for none); `normalizer`: the file's, which the
  // contents of the normalized tokens go through.
  AddedTokens(const nlohmann::json& list, const Normalizer& normalizer);

  // A stretch of the text: an added token's occurrence (id >= 0) or text for the pre-tokenizer
  // (id < 0).
  struct Segment {
    std::string_view text;
    int32_t id;
  };
  // Which tokens a pass looks for: those with "normalized": false, in the raw text, or those with
  // "normalized": true, in a normalized stretch that the raw pass left over.
  enum class Pass { raw, normalized };
  // The segments of `text` (valid UTF-8) for one pass, in order, none empty; `out` is cleared
  // first.
  void split(Pass pass, std::string_view text, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> id_of(std::string_view content) const;

 private:
  // The tokens of one pass by their first byte, longest first, so the first that matches at a
  // place is the one to take.
  using Index = std::array<std::vector<uint32_t>, 256>;
  void split_pass(const Index& index, std::string_view text, std::vector<Segment>& out) const;
  const AddedToken* longest_at(const Index& index, std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  Index raw_, normalized_;
  bool any_normalized_ = false;
};

}  // namespace meshnn::text::detail
