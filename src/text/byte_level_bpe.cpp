#include "meshnn/text/byte_level_bpe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "added_tokens.hpp"
#include "bpe_model.hpp"
#include "byte_chars.hpp"
#include "json_fields.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/text/utf8.hpp"
#include "normalizer.hpp"
#include "pre_tokenizer.hpp"

namespace meshnn::text {
namespace {

using nlohmann::json;

// Ids index the decode table, so a file cannot make it huge; 2^24 is 65 times Llama 3's 128256.
constexpr int64_t kMaxIds = int64_t{1} << 24;

const json& member(const json& root, const char* key) {
  static const json null_value;
  const auto it = root.find(key);
  return it == root.end() ? null_value : *it;
}

// Whether the post_processor (alone, or one of a Sequence's processors) is a TemplateProcessing
// whose single-sequence template begins with a special token. Only this is read of it: encode()
// applies no template, the caller adds BOS.
bool template_starts_with_special_token(const json& processor) {
  if (!processor.is_object()) return false;
  const auto type = processor.find("type");
  if (type == processor.end() || !type->is_string()) return false;
  if (*type == "Sequence") {
    const auto list = processor.find("processors");
    if (list == processor.end() || !list->is_array()) return false;
    return std::any_of(list->begin(), list->end(), template_starts_with_special_token);
  }
  if (*type != "TemplateProcessing") return false;
  const auto single = processor.find("single");
  return single != processor.end() && single->is_array() && !single->empty() && single->front().is_object() &&
         single->front().contains("SpecialToken");
}

void require_byte_level_decoder(const json& decoder) {
  MESHNN_CHECK(!decoder.is_null(), "tokenizer.json: decoder is null; a byte-level BPE needs the ByteLevel decoder");
  const std::string& type = detail::component_type(decoder, "decoder");
  MESHNN_CHECK(type == "ByteLevel", "tokenizer.json: decoder is {}; a byte-level BPE needs the ByteLevel decoder",
               type);
}

class ByteLevelBpe final : public Tokenizer {
 public:
  explicit ByteLevelBpe(const json& root)
      : model_(member(root, "model")),
        normalizer_(member(root, "normalizer")),
        pre_tokenizer_(member(root, "pre_tokenizer")),
        added_(member(root, "added_tokens"), normalizer_),
        adds_bos_(template_starts_with_special_token(member(root, "post_processor"))) {
    require_byte_level_decoder(member(root, "decoder"));
    build_decode_table();
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    const size_t bad = first_invalid_utf8(text);
    MESHNN_CHECK(bad == std::string_view::npos, "tokenizer: the text is not valid UTF-8 (byte {} of {})", bad,
                 text.size());
    using Pass = detail::AddedTokens::Pass;
    std::vector<int32_t> ids;
    std::vector<detail::AddedTokens::Segment> raw, segments;
    std::string normalized;
    detail::BpeModel::Scratch scratch;
    // As tokenizers does: the raw tokens come out of the text as written; each stretch between
    // them is normalized on its own (so nothing composes across a token), and only then are the
    // normalized tokens, the pre-tokenizer and the model run on it.
    added_.split(Pass::raw, text, raw);
    for (const auto& stretch : raw) {
      if (stretch.id >= 0) {
        ids.push_back(stretch.id);
        continue;
      }
      added_.split(Pass::normalized, normalizer_.run(stretch.text, normalized), segments);
      for (const auto& segment : segments) {
        if (segment.id >= 0)
          ids.push_back(segment.id);
        else
          pre_tokenizer_.run(segment.text, [&](std::string_view word) { model_.encode(word, ids, scratch); });
      }
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (const int32_t id : ids) {
      MESHNN_CHECK(id >= 0 && id < vocab_size(), "tokenizer: cannot decode id {}; the vocabulary has ids [0, {})", id,
                   vocab_size());
      out += bytes_of_id_[static_cast<size_t>(id)];
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_of_id_.size()); }

  std::optional<int32_t> token_id(std::string_view token) const override {
    if (const std::optional<int32_t> id = added_.id_of(token)) return id;
    return model_.id_of(token);
  }

  std::string kind() const override { return "byte-level BPE"; }
  bool adds_bos_by_default() const override { return adds_bos_; }

 private:
  // What each id decodes to. An added token's id takes its text (nothing for a special one) even
  // when the vocabulary has the id too, as tokenizers looks ids up in the added tokens first.
  void build_decode_table() {
    int64_t size = 0;
    for (const auto& [token, id] : model_.vocab()) size = std::max<int64_t>(size, id + 1);
    for (const auto& t : added_.tokens()) size = std::max<int64_t>(size, t.id + 1);
    MESHNN_CHECK(size <= kMaxIds, "tokenizer.json: ids go up to {}; at most {} ids are supported", size - 1, kMaxIds);
    bytes_of_id_.assign(static_cast<size_t>(size), std::string());
    std::vector<const std::string*> token_of_id(static_cast<size_t>(size), nullptr);
    for (const auto& [token, id] : model_.vocab()) {
      const std::string*& seen = token_of_id[static_cast<size_t>(id)];
      MESHNN_CHECK(seen == nullptr, "tokenizer.json: model.vocab gives the id {} to both '{}' and '{}'", id, *seen,
                   token);
      seen = &token;
      bytes_of_id_[static_cast<size_t>(id)] = detail::token_bytes(token);
    }
    for (const auto& t : added_.tokens())
      bytes_of_id_[static_cast<size_t>(t.id)] = t.special ? std::string() : detail::token_bytes(t.content);
  }

  detail::BpeModel model_;
  detail::Normalizer normalizer_;
  detail::PreTokenizer pre_tokenizer_;
  detail::AddedTokens added_;  // after normalizer_, which it is built with
  bool adds_bos_;
  std::vector<std::string> bytes_of_id_;
};

}  // namespace

TokenizerPtr make_byte_level_bpe(std::string_view tokenizer_json) {
  json root;
  try {
    root = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    throw Error(fmt::format("tokenizer.json is not valid JSON ({})", e.what()));
  }
  MESHNN_CHECK(root.is_object(), "tokenizer.json must be a JSON object, got {}", detail::brief(root));
  MESHNN_CHECK(root.contains("model"), "tokenizer.json has no 'model'");
  try {
    return std::make_unique<const ByteLevelBpe>(root);
  } catch (const json::exception& e) {  // a field of an unexpected JSON type that no check named
    throw Error(fmt::format("tokenizer.json has an unexpected field ({})", e.what()));
  }
}

TokenizerPtr load_byte_level_bpe_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MESHNN_CHECK(in.good(), "cannot read the tokenizer file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  MESHNN_CHECK(!in.bad(), "cannot read the tokenizer file '{}'", path);
  try {
    return make_byte_level_bpe(text.str());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace meshnn::text
