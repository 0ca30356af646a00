#include "bpe_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "meshnn/core/error.hpp"
#include "code_points.hpp"

namespace meshnn::text::detail {
namespace {

using nlohmann::json;

// The queue's order: the earliest merge first, and for one merge the leftmost place first.
// std::push_heap keeps the largest element on top, so "greater" means "later".
bool later(const BpeModel::Scratch::Candidate& a, const BpeModel::Scratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

// An option that byte-level files leave unset (null, false, 0, or "" for the affixes) and this
// model does not implement.
void refuse_set(const json& model, const char* key, const char* why) {
  const auto it = model.find(key);
  if (it == model.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty()) ||
      (it->is_boolean() && !it->get<bool>()) || (it->is_number() && it->get<double>() == 0.0))
    return;
  throw Error(fmt::format("tokenizer.json: model.{} is {}; {}", key, brief(*it), why));
}

}  // namespace

BpeModel::BpeModel(const json& model) {
  const std::string& type = component_type(model, "model");
  MESHNN_CHECK(type == "BPE", "tokenizer.json: model.type is '{}'; only BPE is supported here", type);
  refuse_set(model, "byte_fallback",
             "that is a SentencePiece-style BPE (Llama 2, Mistral), to be loaded from its tokenizer.model");
  refuse_set(model, "dropout", "BPE dropout is for training and is not supported");
  refuse_set(model, "continuing_subword_prefix", "subword prefixes are not supported in a byte-level BPE");
  refuse_set(model, "end_of_word_suffix", "word suffixes are not supported in a byte-level BPE");
  ignore_merges_ = bool_field(model, "ignore_merges", false, "model");
  fuse_unk_ = bool_field(model, "fuse_unk", false, "model");

  const auto vocab = model.find("vocab");
  MESHNN_CHECK(vocab != model.end() && vocab->is_object(),
               "tokenizer.json: model.vocab must be an object {{token: id}}");
  read_vocab(*vocab);
  const auto merges = model.find("merges");
  MESHNN_CHECK(merges != model.end() && merges->is_array(), "tokenizer.json: model.merges must be a list");
  read_merges(*merges);

  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string& unk = string_field(model, "unk_token", "model");
    unk_id_ = id_of(unk);
    MESHNN_CHECK(unk_id_.has_value(), "tokenizer.json: model.unk_token '{}' is not in model.vocab", unk);
  }
}

void BpeModel::read_vocab(const json& vocab) {
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    MESHNN_CHECK(
        id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < std::numeric_limits<int32_t>::max(),
        "tokenizer.json: model.vocab gives '{}' the id {}; ids are integers in [0, 2^31 - 1)", token, brief(id));
    vocab_.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  small_char_ids_.fill(-1);
  std::string ch;
  for (char32_t cp = 0; cp < small_char_ids_.size(); ++cp) {
    ch.clear();
    append_utf8(ch, cp);
    if (const auto it = vocab_.find(ch); it != vocab_.end()) small_char_ids_[cp] = it->second;
  }
}

void BpeModel::read_merges(const json& merges) {
  merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    if (m.is_string()) {  // "a b": the two tokens around the one space
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      MESHNN_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "tokenizer.json: model.merges[{}] is '{}'; a merge is two tokens separated by one space", rank, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      MESHNN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "tokenizer.json: model.merges[{}] is {}; a merge is \"a b\" or [\"a\", \"b\"]", rank, brief(m));
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const std::optional<int32_t> a = id_of(left), b = id_of(right), merged = id_of(left + right);
    MESHNN_CHECK(a && b && merged,
                 "tokenizer.json: model.merges[{}] ('{}' + '{}') uses a token not in model.vocab ('{}')", rank, left,
                 right,
                 !a   ? left
                 : !b ? right
                      : left + right);
    // A pair listed twice takes its last rank, as tokenizers' map of merges does.
    merges_.insert_or_assign(pair_key(*a, *b), Merge{static_cast<uint32_t>(rank), *merged});
  }
}

std::optional<int32_t> BpeModel::id_of(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

int32_t BpeModel::char_id(std::string_view ch, char32_t cp) const {
  if (cp < small_char_ids_.size()) return small_char_ids_[cp];
  const auto it = vocab_.find(ch);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const {
  if (const auto hit = scratch.seen.find(word); hit != scratch.seen.end()) {
    const auto first = scratch.seen_ids.begin() + hit->second.begin;
    ids.insert(ids.end(), first, first + hit->second.size);
    return;
  }
  const size_t before = ids.size();
  encode_uncached(word, ids, scratch);
  const auto count = static_cast<uint32_t>(ids.size() - before);
  scratch.seen.emplace(word, Scratch::Span{static_cast<uint32_t>(scratch.seen_ids.size()), count});
  scratch.seen_ids.insert(scratch.seen_ids.end(), ids.end() - count, ids.end());
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  // One symbol per character. Characters outside the vocabulary become unk_token (one for a run
  // of them with fuse_unk), or nothing without one.
  auto& symbols = scratch.symbols;
  symbols.clear();
  bool unknown_run = false;
  for (size_t at = 0; at < word.size();) {
    const size_t begin = at;
    const char32_t cp = next_code_point(word, at);
    int32_t id = char_id(word.substr(begin, at - begin), cp);
    if (id < 0) {
      if (!unk_id_ || (fuse_unk_ && unknown_run)) continue;
      id = *unk_id_;
      unknown_run = true;
    } else {
      unknown_run = false;
    }
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[static_cast<size_t>(n - 1)].next = n;
  }
  merge_all(scratch);
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    ids.push_back(symbols[static_cast<size_t>(i)].id);
}

void BpeModel::merge_all(Scratch& s) const {
  auto& symbols = s.symbols;
  auto& queue = s.queue;
  queue.clear();
  const auto consider = [&](int32_t left) {
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    if (const Merge* m = find_merge(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id)) {
      queue.push_back({m->rank, left, m->merged_id});
      std::push_heap(queue.begin(), queue.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Scratch::Candidate top = queue.back();
    queue.pop_back();
    auto& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    // The pair at this place may have changed since the candidate was queued (a neighbour merged
    // first); it still stands only if its merge gives the same token.
    const Merge* current = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id);
    if (current == nullptr || current->merged_id != top.merged_id) continue;
    auto& right = symbols[static_cast<size_t>(left.next)];
    left.id = top.merged_id;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
}

}  // namespace meshnn::text::detail
