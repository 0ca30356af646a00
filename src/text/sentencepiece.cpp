#include "meshnn/text/sentencepiece.hpp"

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include <algorithm>

#include "meshnn/core/error.hpp"

namespace meshnn::text {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string_view serialized) {
    const auto status = processor_.LoadFromSerializedProto(serialized);
    MESHNN_CHECK(status.ok(), "not a SentencePiece model: {}", status.ToString());
    // Control pieces (<s>, </s>) and <unk> are never produced from text by the encoder; written in
    // a prompt they stand for themselves, as Hugging Face's LlamaTokenizer splits special tokens out
    // first. Longest first, so that a piece that prefixes another does not cut it.
    for (int id = 0; id < processor_.GetPieceSize(); ++id)
      if (processor_.IsControl(id) || processor_.IsUnknown(id)) specials_.push_back({processor_.IdToPiece(id), id});
    std::sort(specials_.begin(), specials_.end(),
              [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
    // A model that adds a dummy "▁" before the text drops it again from the first piece: ask the
    // library how it decodes a lone word-initial piece.
    for (int id = 0; id < processor_.GetPieceSize(); ++id) {
      const std::string& p = processor_.IdToPiece(id);
      if (!processor_.IsControl(id) && !processor_.IsByte(id) && !processor_.IsUnknown(id) && p.size() > kSpaceMark.size() && p.starts_with(kSpaceMark)) {
        std::string alone;
        strips_first_space_ = processor_.Decode(std::vector<int>{id}, &alone).ok() && !alone.starts_with(' ');
        break;
      }
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    size_t begin = 0;
    while (begin <= text.size()) {
      size_t at = text.size();
      const Special* found = nullptr;
      for (const Special& s : specials_) {
        const size_t p = text.find(s.text, begin);
        if (p < at) at = p, found = &s;
      }
      encode_plain(text.substr(begin, at - begin), ids);
      if (found == nullptr) break;
      ids.push_back(found->id);
      begin = at + found->text.size();
    }
    return ids;
  }

  // Piece by piece, so that the result is the tokens' bytes joined (TextStream relies on that):
  // the library's own Decode turns byte pieces that do not form a character into U+FFFD, which
  // would change text already printed when the next token completes the character.
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    bool first = true;
    for (int32_t id : ids) {
      const int piece = check(id);
      if (processor_.IsControl(piece)) continue;
      if (processor_.IsByte(piece)) {
        text.push_back(byte_of(piece));
      } else if (processor_.IsUnknown(piece)) {
        text += kUnknownSurface;
      } else {
        std::string_view p = processor_.IdToPiece(piece);
        if (first && strips_first_space_ && p.starts_with(kSpaceMark)) p.remove_prefix(kSpaceMark.size());
        for (size_t at; (at = p.find(kSpaceMark)) != std::string_view::npos; p.remove_prefix(at + kSpaceMark.size()))
          text.append(p.substr(0, at)).push_back(' ');
        text.append(p);
      }
      first = false;
    }
    return text;
  }

  int64_t vocab_size() const override { return processor_.GetPieceSize(); }

  std::optional<int32_t> token_id(std::string_view token) const override {
    const int id = processor_.PieceToId(token);
    // PieceToId answers <unk>'s id for any piece it lacks.
    if (processor_.IsUnknown(id) && processor_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::string kind() const override { return "sentencepiece"; }
  bool adds_bos_by_default() const override { return true; }

 private:
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  static constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";  // " ⁇ ", the library's default

  struct Special {
    std::string text;
    int32_t id;
  };

  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::vector<int> piece_ids;
    const auto status = processor_.Encode(text, &piece_ids);
    MESHNN_CHECK(status.ok(), "SentencePiece could not encode: {}", status.ToString());
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }

  int check(int32_t id) const {
    MESHNN_CHECK(id >= 0 && id < processor_.GetPieceSize(), "token id {} is outside the vocabulary [0, {})", id,
                 processor_.GetPieceSize());
    return id;
  }

  // A byte piece is spelled "<0xAB>".
  char byte_of(int32_t id) const {
    const std::string& piece = processor_.IdToPiece(id);
    return static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
  }

  sentencepiece::SentencePieceProcessor processor_;
  std::vector<Special> specials_;
  bool strips_first_space_ = false;
};

}  // namespace

TokenizerPtr make_sentencepiece(std::string_view serialized_model) {
  return std::make_unique<SentencePieceTokenizer>(serialized_model);
}

}  // namespace meshnn::text
