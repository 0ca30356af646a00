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

}  // namespace meshnn::serving
