#include "meshnn/serving/prompt_lookup.hpp"

#include <algorithm>

namespace meshnn::serving {

std::vector<int32_t> prompt_lookup_draft(std::span<const int32_t> prompt, std::span<const int32_t> generated,
                                         int64_t count, int64_t min_ngram, int64_t max_ngram) {
  if (count < 1) return {};
  std::vector<int32_t> text(prompt.begin(), prompt.end());
  text.insert(text.end(), generated.begin(), generated.end());
  const auto length = static_cast<int64_t>(text.size());
  for (int64_t n = std::min(max_ngram, length - 1); n >= std::max<int64_t>(min_ngram, 1); --n) {
    const auto suffix = text.end() - n;
    // An earlier occurrence starts at i <= length - n - 1, so at least one token follows it.
    for (int64_t i = length - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, text.end(), text.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(length, from + count);
      return {text.begin() + from, text.begin() + to};
    }
  }
  return {};
}

DraftSchedule::DraftSchedule(int64_t most, int64_t rest)
    : most_(most), rest_(rest), length_(std::min<int64_t>(1, most)) {}

void DraftSchedule::passed(int64_t fed, int64_t kept) {
  if (fed == 0) {
    if (resting_ > 0 && --resting_ == 0) length_ = std::min<int64_t>(1, most_);
    return;
  }
  if (kept == fed) {
    length_ = std::min(most_, length_ + 2);
  } else if (--length_ <= 0) {
    length_ = 0;
    resting_ = rest_;
  }
}

}  // namespace meshnn::serving
