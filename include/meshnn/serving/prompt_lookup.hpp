// Draft tokens for speculative decoding by prompt lookup: the continuation of the text's last few
// tokens where they appeared before. No draft model: answers that quote or repeat their prompt
// (summaries, extraction, code edits, retrieval-augmented answers) continue as the prompt did, and
// one pass then checks several guessed tokens at once (Generator with draft_tokens > 0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace meshnn::serving {

// The sequence is `prompt` followed by `generated`. For n from max_ngram down to min_ngram, the
// last n tokens are looked for earlier in the sequence (the most recent occurrence first); the
// draft is up to `count` tokens that followed the first occurrence found. Empty when none occurs,
// or when count < 1. Allocates.
std::vector<int32_t> prompt_lookup_draft(std::span<const int32_t> prompt, std::span<const int32_t> generated,
                                         int64_t count, int64_t min_ngram = 2, int64_t max_ngram = 4);

// How many drafts a request may feed in its next pass. Each draft row costs part of a pass whether
// it is kept or not, so a request feeds more only while they are kept: it begins with one, then
// feeds two more (up to `most`) after a pass whose drafts were all kept and one fewer after a pass
// that lost any, as Hugging Face's "heuristic" schedule for assisted generation does. At none it
// rests for `rest` of its decode passes, then tries one draft again.
class DraftSchedule {
 public:
  explicit DraftSchedule(int64_t most, int64_t rest = 16);
  int64_t length() const { return resting_ > 0 ? 0 : length_; }
  // After a decode pass of the request: `fed` drafts (0: none fed, resting or none found), `kept`
  // of them kept.
  void passed(int64_t fed, int64_t kept);

 private:
  int64_t most_, rest_, length_, resting_ = 0;
};

}  // namespace meshnn::serving
