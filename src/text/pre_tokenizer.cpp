#include "pre_tokenizer.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "byte_chars.hpp"
#include "json_fields.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::text::detail {
namespace {

// GPT-2's split, which ByteLevel applies when use_regex is set: contractions, letters, digits,
// other symbols (each run with at most one space before it), and white space, leaving the last
// space of a run to the word after it.
const Regex& gpt2_regex() {
  static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false,
                        "GPT-2's ByteLevel pattern");
  return re;
}

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& spec) {
  MESHNN_CHECK(!spec.is_null(),
               "tokenizer.json: pre_tokenizer is null; a byte-level BPE needs a ByteLevel pre-tokenizer");
  add_steps(spec, "pre_tokenizer");
  bool byte_level = false;
  for (const Step& s : steps_) byte_level |= !s.split;
  MESHNN_CHECK(byte_level, "tokenizer.json: pre_tokenizer has no ByteLevel step, so this is not a byte-level BPE");
}

void PreTokenizer::add_steps(const nlohmann::json& spec, const std::string& where) {
  const std::string& type = component_type(spec, where);
  if (type == "Sequence") {
    const auto list = spec.find("pretokenizers");
    MESHNN_CHECK(list != spec.end() && list->is_array(), "tokenizer.json: {}.pretokenizers must be a list", where);
    for (size_t i = 0; i < list->size(); ++i) add_steps((*list)[i], fmt::format("{}.pretokenizers[{}]", where, i));
  } else if (type == "ByteLevel") {
    steps_.push_back(
        {std::nullopt, bool_field(spec, "add_prefix_space", true, where), bool_field(spec, "use_regex", true, where)});
  } else if (type == "Split") {
    const std::string& behavior = string_field(spec, "behavior", where);
    MESHNN_CHECK(behavior == "Isolated", "tokenizer.json: {} has behavior '{}'; only Isolated is supported", where,
                 behavior);
    // "invert" is not read: it swaps which pieces count as matches, and Isolated keeps every piece
    // either way.
    const auto pattern = spec.find("pattern");
    MESHNN_CHECK(pattern != spec.end() && pattern->is_object(),
                 "tokenizer.json: {}.pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    const bool literal = pattern->contains("String");
    const std::string& text = string_field(*pattern, literal ? "String" : "Regex", where + ".pattern");
    steps_.push_back({Regex(text, literal, where + " pattern"), false, false});
  } else {
    throw Error(
        fmt::format("tokenizer.json: {} is a {} pre-tokenizer; a byte-level BPE supports ByteLevel, Split "
                    "and Sequence",
                    where, type));
  }
}

void PreTokenizer::run(std::string_view text, FunctionRef<void(std::string_view)> word) const {
  if (text.empty()) return;  // no piece, so no prefix space either
  std::vector<Buffers> buffers(steps_.size());
  run_step(0, text, word, buffers);
}

void PreTokenizer::run_step(size_t k, std::string_view piece, FunctionRef<void(std::string_view)> word,
                            std::vector<Buffers>& buffers) const {
  if (k == steps_.size()) {
    word(piece);
    return;
  }
  const Step& step = steps_[k];
  const auto next = [&](std::string_view part) { run_step(k + 1, part, word, buffers); };
  if (step.split) {
    step.split->split_isolated(piece, next);
    return;
  }
  Buffers& b = buffers[k];
  std::string_view source = piece;
  if (step.add_prefix_space && piece.front() != ' ') {
    b.spaced.assign(1, ' ');
    b.spaced += piece;
    source = b.spaced;
  }
  const auto map_bytes = [&](std::string_view part) {
    b.mapped.clear();
    append_byte_chars(b.mapped, part);
    next(b.mapped);
  };
  if (step.use_regex)
    gpt2_regex().split_isolated(source, map_bytes);
  else
    map_bytes(source);
}

}  // namespace meshnn::text::detail
