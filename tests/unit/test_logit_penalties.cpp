// Logit bias and penalties (serving/logit_penalties.hpp): values worked out by hand, the same
// adjustment whether the vocabulary is whole or split into padded shards, and the refusals.
#include <gtest/gtest.h>

#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/serving/logit_penalties.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::serving {
namespace {

TEST(LogitPenalties, AdjustAsWorkedOutByHand) {
  std::vector<float> row{2, -2, 1, 0.5f, -1, 3, 0, 4};
  const std::vector<int32_t> prompt{0, 1}, generated{2, 2, 5};
  const LogitPenalties p{0.5, 0.25, 2.0, {{3, 10.0f}, {7, -100.0f}}};
  apply_penalties(row, VocabShard{0, 8}, p, prompt, generated);
  // 0, 1: in the prompt (repetition only); 2: generated twice; 3: biased, unseen; 5: generated once;
  // 7: biased; 4 and 6: untouched.
  EXPECT_EQ(row, (std::vector<float>{1.0f, -4.0f, 0.5f - (0.5f + 0.5f), 10.5f, -1.0f, 1.5f - 0.75f, 0.0f, -96.0f}));

  // Without penalties nothing moves, not even a bias of zero's rounding.
  std::vector<float> same{0.1f, -0.3f};
  apply_penalties(same, VocabShard{0, 2}, LogitPenalties{}, prompt, generated);
  EXPECT_EQ(same, (std::vector<float>{0.1f, -0.3f}));
}

TEST(LogitPenalties, ShardsAdjustWhatTheWholeRowWould) {
  constexpr int64_t kVocab = 250, kWidth = 64;  // four shards of 63, 63, 63 and 61 tokens, padded to 64
  const std::vector<float> whole = testing::seeded_values(kVocab, 3);
  std::vector<int32_t> prompt, generated;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back((i * 37) % kVocab);
  for (int32_t i = 0; i < 30; ++i) generated.push_back((i * i * 11 + 62) % kVocab);  // repeats, shard edges
  const LogitPenalties p{-0.7, 1.25, 1.4, {{0, 3.0f}, {62, -5.0f}, {63, 2.0f}, {249, 100.0f}}};
  std::vector<float> expected = whole;
  apply_penalties(expected, VocabShard{0, kVocab}, p, prompt, generated);
  EXPECT_NE(expected, whole);
  for (int64_t offset = 0; offset < kVocab; offset += 63) {
    const int64_t valid = std::min<int64_t>(63, kVocab - offset);
    std::vector<float> shard(whole.begin() + offset, whole.begin() + offset + valid);
    shard.resize(kWidth, -7.0f);  // padding, which must stay as it is
    apply_penalties(shard, VocabShard{offset, valid}, p, prompt, generated);
    for (int64_t c = 0; c < kWidth; ++c)
      EXPECT_EQ(shard[static_cast<size_t>(c)], c < valid ? expected[static_cast<size_t>(offset + c)] : -7.0f)
          << "shard at " << offset << ", column " << c;
  }
}

TEST(LogitPenalties, RefuseValuesOutOfRange) {
  auto message = [](const LogitPenalties& p) { return testing::error_message_of([&] { p.validate(); }); };
  EXPECT_NE(message({2.5, 0, 1, {}}).find("presence_penalty must be in [-2, 2], got 2.5"), std::string::npos);
  EXPECT_NE(message({0, -2.1, 1, {}}).find("frequency_penalty must be in [-2, 2]"), std::string::npos);
  EXPECT_NE(message({0, 0, 0, {}}).find("repetition_penalty must be in (0, 100], got 0"), std::string::npos);
  EXPECT_NE(message({0, 0, 1, {{-1, 1.0f}}}).find("token id -1 is negative"), std::string::npos);
  EXPECT_NE(message({0, 0, 1, {{4, 100.5f}}}).find("bias of token 4 must be in [-100, 100]"), std::string::npos);
  EXPECT_NE(message({0, 0, 1, {{4, 1.0f}, {2, 1.0f}, {4, 2.0f}}}).find("token id 4 is given twice"),
            std::string::npos);
  EXPECT_NO_THROW((LogitPenalties{-2, 2, 100, {{0, -100.0f}, {9, 100.0f}}}.validate()));
  std::vector<float> row(4, 0.0f);
  EXPECT_THROW(apply_penalties(row, VocabShard{0, 5}, LogitPenalties{0.5, 0, 1, {}}, {}, {}), Error);
}

}  // namespace
}  // namespace meshnn::serving
