// The pre-tokenizer patterns of tokenizer.json, run by PCRE2.
//
// Hugging Face's tokenizers runs them with Oniguruma; PCRE2 in UTF mode with Unicode properties
// (UCP) reads the constructs these files use the same way: \p{L}, \p{N}, \s and \S over all of
// Unicode, case-insensitive groups (?i:...) with Unicode case folding, lookahead, {m,n}. Known
// difference: PCRE2's \s also takes U+180E (MONGOLIAN VOWEL SEPARATOR), which Unicode no longer
// counts as white space.
#pragma once

#include <string_view>

#include "meshnn/core/function_ref.hpp"

struct pcre2_real_code_8;

namespace meshnn::text::detail {

class Regex {
 public:
  // Compiles `pattern`, or with `literal` the plain text `pattern` to look for. Throws
  // meshnn::Error naming `what` (e.g. "pre_tokenizer Split pattern") and where PCRE2 stopped.
  Regex(std::string_view pattern, bool literal, std::string_view what);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&&) = delete;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls `piece` with the matches of the pattern in `text` and the stretches between them, in
  // order, leaving out empty ones: Hugging Face's "Isolated" split. `text` must be valid UTF-8.
  void split_isolated(std::string_view text, FunctionRef<void(std::string_view)> piece) const;

  // Does the pattern match the whole of `text` (valid UTF-8)?
  bool matches_whole(std::string_view text) const;

 private:
  pcre2_real_code_8* code_;
};

}  // namespace meshnn::text::detail
