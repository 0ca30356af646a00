// The normalizer of a byte-level tokenizer.json: Unicode normalization of the text the added
// tokens leave over, before the pre-tokenizer sees it (Qwen2's files ask for NFC).
//
// Accepted, as Hugging Face's tokenizers runs them:
//  - null: the text as it is;
//  - NFC, NFD, NFKC, NFKD: the Unicode normalization form of that name;
//  - Sequence {normalizers: [...]}: those steps in order.
// Anything else throws meshnn::Error naming it. The forms come from utf8proc, so they follow the
// Unicode version of the installed utf8proc, which may be newer than the one tokenizers was built
// with; the two differ only on characters assigned in between.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace meshnn::text::detail {

class Normalizer {
 public:
  // `spec`: tokenizer.json's "normalizer".
  explicit Normalizer(const nlohmann::json& spec);

  // `text` (valid UTF-8) normalized: either `text` itself, when no step can change it, or a view
  // of `buffer`, which holds the result.
  std::string_view run(std::string_view text, std::string& buffer) const;

  // `text` normalized, as a string of its own (for the added tokens' contents).
  std::string operator()(std::string_view text) const;

 private:
  std::vector<int> steps_;  // utf8proc option sets, one utf8proc_map call each
};

}  // namespace meshnn::text::detail
