#include "added_tokens.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "meshnn/core/error.hpp"
#include "regex.hpp"
#include "code_points.hpp"

namespace meshnn::text::detail {
namespace {

// Unicode's White_Space property (what lstrip and rstrip take).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// A word character for single_word, as the Rust regex \w that tokenizers uses defines it.
bool is_word_char(std::string_view ch) {
  static const Regex word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", false, "the word-character class");
  return word.matches_whole(ch);
}

bool word_char_before(std::string_view text, size_t at) {
  if (at == 0) return false;
  size_t begin = at;
  previous_code_point(text, begin);
  return is_word_char(text.substr(begin, at - begin));
}

bool word_char_after(std::string_view text, size_t at) {
  if (at == text.size()) return false;
  return is_word_char(text.substr(at, utf8_length(static_cast<unsigned char>(text[at]))));
}

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& list, const Normalizer& normalizer) {
  if (list.is_null()) return;
  MESHNN_CHECK(list.is_array(), "tokenizer.json: added_tokens must be a list, got {}", brief(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& t = list[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    MESHNN_CHECK(t.is_object(), "tokenizer.json: {} must be an object, got {}", where, brief(t));
    const auto id = t.find("id");
    MESHNN_CHECK(id != t.end() && id->is_number_integer() && id->get<int64_t>() >= 0 &&
                     id->get<int64_t>() < std::numeric_limits<int32_t>::max(),
                 "tokenizer.json: {}.id must be an integer in [0, 2^31 - 1)", where);
    AddedToken token;
    token.id = static_cast<int32_t>(id->get<int64_t>());
    token.content = string_field(t, "content", where);
    token.special = bool_field(t, "special", false, where);
    token.single_word = bool_field(t, "single_word", false, where);
    token.lstrip = bool_field(t, "lstrip", false, where);
    token.rstrip = bool_field(t, "rstrip", false, where);
    token.normalized = bool_field(t, "normalized", true, where);
    // A normalized token is looked for in normalized text, where its content as written may
    // never appear (a decomposed "é" in NFC text).
    token.match = token.normalized ? normalizer(token.content) : token.content;
    tokens_.push_back(std::move(token));
  }
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.match.empty()) continue;  // matches nowhere, as in tokenizers
    (t.normalized ? normalized_ : raw_)[static_cast<unsigned char>(t.match[0])].push_back(i);
    any_normalized_ |= t.normalized;
  }
  for (Index* index : {&raw_, &normalized_})
    for (auto& bucket : *index)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [&](uint32_t a, uint32_t b) { return tokens_[a].match.size() > tokens_[b].match.size(); });
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  for (const AddedToken& t : tokens_)
    if (t.content == content) return t.id;
  return std::nullopt;
}

const AddedToken* AddedTokens::longest_at(const Index& index, std::string_view text, size_t at) const {
  for (const uint32_t i : index[static_cast<unsigned char>(text[at])])
    if (text.substr(at).starts_with(tokens_[i].match)) return &tokens_[i];
  return nullptr;
}

void AddedTokens::split(Pass pass, std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (pass == Pass::normalized && !any_normalized_) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  split_pass(pass == Pass::raw ? raw_ : normalized_, text, out);
}

void AddedTokens::split_pass(const Index& index, std::string_view text, std::vector<Segment>& out) const {
  size_t done = 0;  // text before this offset is in `out`
  size_t at = 0;
  // Byte steps are enough: a token's first byte never continues a character, so it can only
  // match where a character starts.
  while (at < text.size()) {
    const AddedToken* token = longest_at(index, text, at);
    if (token == nullptr) {
      ++at;
      continue;
    }
    size_t begin = at, end = at + token->match.size();
    at = end;
    if (token->single_word && (word_char_before(text, begin) || word_char_after(text, end))) continue;
    if (token->lstrip) {
      for (size_t before = begin; begin > done && is_white_space(previous_code_point(text, before));) begin = before;
    }
    if (token->rstrip) {
      for (size_t after = end; end < text.size() && is_white_space(next_code_point(text, after));) end = after;
      at = end;
    }
    if (done < begin) out.push_back({text.substr(done, begin - done), -1});
    out.push_back({text.substr(begin, end - begin), token->id});
    done = end;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

}  // namespace meshnn::text::detail
