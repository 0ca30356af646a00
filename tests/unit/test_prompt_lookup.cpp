// Prompt-lookup drafts (serving/prompt_lookup.hpp) on sequences worked out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "meshnn/serving/prompt_lookup.hpp"

namespace meshnn::serving {
namespace {

using Ids = std::vector<int32_t>;

TEST(PromptLookup, ContinuesTheMostRecentEarlierOccurrenceOfTheLongestSuffix) {
  // "... 7 8 9 | 1 2 ..." twice in the prompt, then the answer ends with "7 8": the later
  // occurrence (followed by 5 6) wins over the earlier one (followed by 9 1).
  const Ids prompt{7, 8, 9, 1, 2, 3, 7, 8, 5, 6, 4};
  EXPECT_EQ(prompt_lookup_draft(prompt, Ids{0, 7, 8}, 3), (Ids{5, 6, 4}));
  // A longer suffix that occurs wins over a more recent shorter one: "9 7 8" only occurs first.
  const Ids longer{9, 7, 8, 1, 2, 7, 8, 3};
  EXPECT_EQ(prompt_lookup_draft(longer, Ids{9, 7, 8}, 2), (Ids{1, 2}));
  // The draft stops where the sequence does, and at `count`.
  EXPECT_EQ(prompt_lookup_draft(Ids{4, 5, 6}, Ids{4, 5}, 8), (Ids{6, 4, 5}));
  EXPECT_EQ(prompt_lookup_draft(Ids{4, 5, 6}, Ids{4, 5}, 1), (Ids{6}));
  // The answer's own repeats count too (a model that loops).
  EXPECT_EQ(prompt_lookup_draft(Ids{1}, Ids{2, 3, 2, 3, 2, 3}, 3), (Ids{2, 3}));
}

TEST(PromptLookup, NothingWithoutAMatchOfTheShortestLength) {
  EXPECT_TRUE(prompt_lookup_draft(Ids{1, 2, 3}, Ids{4, 5}, 4).empty());
  // Only the last token occurs before: below min_ngram 2, no draft; with min_ngram 1, one.
  EXPECT_TRUE(prompt_lookup_draft(Ids{5, 9, 1}, Ids{5}, 4).empty());
  EXPECT_EQ(prompt_lookup_draft(Ids{5, 9, 1}, Ids{5}, 4, 1), (Ids{9, 1, 5}));
  EXPECT_TRUE(prompt_lookup_draft(Ids{1, 2, 1, 2}, Ids{}, 0).empty());
  EXPECT_TRUE(prompt_lookup_draft(Ids{}, Ids{3}, 4).empty());
}

TEST(DraftSchedule, FeedsFewerDraftsWhileTheyMissAndRestsAtNone) {
  DraftSchedule s(4, 3);
  EXPECT_EQ(s.length(), 1);  // one draft to begin with
  s.passed(1, 1);            // all kept: two more
  EXPECT_EQ(s.length(), 3);
  s.passed(3, 3);  // up to most
  EXPECT_EQ(s.length(), 4);
  s.passed(4, 4);
  EXPECT_EQ(s.length(), 4);
  s.passed(4, 1);  // some lost: one fewer
  EXPECT_EQ(s.length(), 3);
  s.passed(2, 2);  // all of a shorter draft kept (the lookup found only 2): two more, up to most
  EXPECT_EQ(s.length(), 4);
  for (int64_t expected : {3, 2, 1, 0}) {
    s.passed(s.length(), 0);
    EXPECT_EQ(s.length(), expected);
  }
  // Resting: three passes without drafts, then one draft again.
  s.passed(0, 0);
  s.passed(0, 0);
  EXPECT_EQ(s.length(), 0);
  s.passed(0, 0);
  EXPECT_EQ(s.length(), 1);
  s.passed(1, 1);
  EXPECT_EQ(s.length(), 3);
  // A pass without drafts that is not resting (the lookup found none) changes nothing.
  s.passed(0, 0);
  EXPECT_EQ(s.length(), 3);
  EXPECT_EQ(DraftSchedule(1).length(), 1);
}

}  // namespace
}  // namespace meshnn::serving
