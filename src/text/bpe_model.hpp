// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary and a ranked list
// of merges, applied to one pre-token at a time.
//
// A word starts as one symbol per character (its vocabulary id); then, as long as some adjacent
// pair has a merge, the pair whose merge comes first in the list is merged (the leftmost one when
// the same merge applies in several places). This is Hugging Face's order: a priority queue keyed
// by (merge rank, position), so a word of n characters costs O(n log n), not O(n^2).
//
// Options read: "merges" as "a b" strings or ["a", "b"] pairs; "ignore_merges" (a word that is
// itself in the vocabulary becomes that token without merging: Llama 3); "unk_token" and
// "fuse_unk" for characters outside the vocabulary, which are dropped when there is no unk_token,
// as tokenizers does. Refused with meshnn::Error: "byte_fallback", "dropout",
// "continuing_subword_prefix" and "end_of_word_suffix" (other than empty), which byte-level files
// do not use.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meshnn::text::detail {

class BpeModel {
 public:
  explicit BpeModel(const nlohmann::json& model);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  // Working memory of encode(), kept by the caller for one text: the merge loop's arrays, and the
  // ids of the words seen so far, since a prompt repeats most of its words (a text's own cache, so
  // encode stays free of shared mutable state).
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // neighbours still alive, -1 at the ends
      bool alive;
    };
    struct Candidate {
      uint32_t rank;
      int32_t pos;  // the left symbol
      int32_t merged_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> queue;
    struct Span {
      uint32_t begin, size;
    };
    std::unordered_map<std::string, Span, StringHash, std::equal_to<>> seen;  // word -> its ids in seen_ids
    std::vector<int32_t> seen_ids;
  };

  // Appends the ids of `word` (one pre-token, in the vocabulary's alphabet) to `ids`.
  void encode(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;

  std::optional<int32_t> id_of(std::string_view token) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void read_vocab(const nlohmann::json& vocab);
  void read_merges(const nlohmann::json& merges);
  // The id of one character of a word, or -1.
  int32_t char_id(std::string_view ch, char32_t cp) const;
  // The ids of `word` without the cache.
  void encode_uncached(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;
  void merge_all(Scratch& s) const;

  Vocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  // Ids of the characters below U+0180, which hold the whole byte alphabet, so that a word's
  // characters need no hashing: -1 where the vocabulary lacks the character.
  std::array<int32_t, 0x180> small_char_ids_{};
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
};

}  // namespace meshnn::text::detail
