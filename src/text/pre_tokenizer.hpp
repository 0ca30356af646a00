// The pre_tokenizer of a byte-level tokenizer.json: cuts text into the words BPE merges within,
// and writes them in the byte-character alphabet (byte_chars.hpp).
//
// Accepted, as Hugging Face's tokenizers runs them:
//  - ByteLevel {add_prefix_space, use_regex}: a space before each piece that does not start with
//    one; with use_regex, a split on GPT-2's pattern; then each byte becomes its character.
//  - Split {pattern: {"Regex": ...} or {"String": ...}, behavior: "Isolated"}: each match and each
//    stretch between matches becomes a piece.
//  - Sequence {pretokenizers: [...]}: the steps in order, each on every piece of the one before.
// At least one ByteLevel step must be there. Anything else throws meshnn::Error naming it.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshnn/core/function_ref.hpp"
#include "regex.hpp"

namespace meshnn::text::detail {

class PreTokenizer {
 public:
  explicit PreTokenizer(const nlohmann::json& spec);

  // Calls `word` with the words of `text` (valid UTF-8, no added token in it), in order. Each
  // piece goes through all the steps before the next piece is cut, so a long prompt never exists
  // as a list of pieces.
  void run(std::string_view text, FunctionRef<void(std::string_view)> word) const;

 private:
  struct Step {
    std::optional<Regex> split;  // a Split step, else ByteLevel
    bool add_prefix_space = false;
    bool use_regex = false;
  };
  // What a ByteLevel step writes: its piece with the space put before it, and one part mapped to
  // byte characters. One per step, since a step runs one piece at a time.
  struct Buffers {
    std::string spaced, mapped;
  };
  void add_steps(const nlohmann::json& spec, const std::string& where);
  void run_step(size_t k, std::string_view piece, FunctionRef<void(std::string_view)> word,
                std::vector<Buffers>& buffers) const;

  std::vector<Step> steps_;
};

}  // namespace meshnn::text::detail
