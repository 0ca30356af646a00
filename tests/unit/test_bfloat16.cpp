#include "meshnn/tensor/bfloat16.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "meshnn/core/error.hpp"

namespace meshnn {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint32_t to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

uint16_t convert_bits(uint32_t bits) { return float_to_bfloat16(from_bits(bits)); }

TEST(BFloat16, ExactValuesAreTruncatedUnchanged) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bfloat16(0.5f), 0x3F00);
  EXPECT_EQ(convert_bits(0x3F810000), 0x3F81);
}

TEST(BFloat16, TiesRoundToEven) {
  // Exactly half an ulp: the even neighbour wins, whichever direction that is.
  EXPECT_EQ(convert_bits(0x3F808000), 0x3F80);  // 0x3F80 even: round down
  EXPECT_EQ(convert_bits(0x3F818000), 0x3F82);  // 0x3F81 odd: round up
  EXPECT_EQ(convert_bits(0xBF808000), 0xBF80);
  EXPECT_EQ(convert_bits(0xBF818000), 0xBF82);
  // A tie whose round-up carries into the exponent.
  EXPECT_EQ(convert_bits(0x3FFF8000), 0x4000);
}

TEST(BFloat16, JustAboveAndBelowATie) {
  EXPECT_EQ(convert_bits(0x3F808001), 0x3F81);
  EXPECT_EQ(convert_bits(0x3F807FFF), 0x3F80);
  EXPECT_EQ(convert_bits(0x3F818001), 0x3F82);
  EXPECT_EQ(convert_bits(0x3F817FFF), 0x3F81);
  EXPECT_EQ(convert_bits(0xBF808001), 0xBF81);
  EXPECT_EQ(convert_bits(0xBF817FFF), 0xBF81);
}

TEST(BFloat16, EveryNaNBecomesTheQuietNaN) {
  for (uint32_t bits : {0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F810000u, 0x7F80FFFFu, 0x7FA00000u, 0xFF800001u,
                        0xFFC00000u, 0xFFFFFFFFu, 0xFF80FFFFu, 0xFFC12345u}) {
    EXPECT_EQ(convert_bits(bits), 0x7FC0) << std::hex << bits;
  }
}

TEST(BFloat16, InfinitiesAndZerosKeepTheirSign) {
  EXPECT_EQ(convert_bits(0x7F800000), 0x7F80);
  EXPECT_EQ(convert_bits(0xFF800000), 0xFF80);
  EXPECT_EQ(convert_bits(0x00000000), 0x0000);
  EXPECT_EQ(convert_bits(0x80000000), 0x8000);
}

TEST(BFloat16, Denormals) {
  EXPECT_EQ(convert_bits(0x00000001), 0x0000);
  EXPECT_EQ(convert_bits(0x80000001), 0x8000);
  EXPECT_EQ(convert_bits(0x00010000), 0x0001);  // smallest bf16 denormal, exact
  EXPECT_EQ(convert_bits(0x00008000), 0x0000);  // tie, even neighbour 0
  EXPECT_EQ(convert_bits(0x00018000), 0x0002);  // tie, odd neighbour 1
  EXPECT_EQ(convert_bits(0x80008001), 0x8001);
  EXPECT_EQ(convert_bits(0x007FFFFF), 0x0080);  // largest denormal rounds up to the smallest normal
  EXPECT_EQ(bfloat16_to_float(0x0001), from_bits(0x00010000));
}

TEST(BFloat16, LargestFloatsRoundToInfinity) {
  EXPECT_EQ(convert_bits(0x7F7FFFFF), 0x7F80);
  EXPECT_EQ(convert_bits(0xFF7FFFFF), 0xFF80);
  EXPECT_EQ(convert_bits(0x7F7F8000), 0x7F80);  // tie above odd 0x7F7F
  EXPECT_EQ(convert_bits(0x7F7F7FFF), 0x7F7F);  // largest finite bf16 stays finite
}

TEST(BFloat16, AllPatternsRoundTrip) {
  for (uint32_t pattern = 0; pattern < 0x10000; ++pattern) {
    const auto bf = static_cast<uint16_t>(pattern);
    const float value = bfloat16_to_float(bf);
    ASSERT_EQ(to_bits(value), pattern << 16);
    const bool is_nan = (pattern & 0x7F80u) == 0x7F80u && (pattern & 0x7Fu) != 0;
    ASSERT_EQ(float_to_bfloat16(value), is_nan ? 0x7FC0 : bf) << std::hex << pattern;
  }
}

TEST(BFloat16, SpanFormsMatchScalar) {
  std::vector<float> values;
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x7F800001u, 0xFF800000u, 0x80000000u, 0x007FFFFFu, 0x7F7FFFFFu,
                        0x40490FDBu, 0xC2F6E979u}) {
    values.push_back(from_bits(bits));
  }
  std::vector<uint16_t> bf(values.size());
  float_to_bfloat16(std::span<const float>(values), std::span<uint16_t>(bf));
  std::vector<float> back(values.size());
  bfloat16_to_float(std::span<const uint16_t>(bf), std::span<float>(back));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bf[i], float_to_bfloat16(values[i]));
    EXPECT_EQ(to_bits(back[i]), static_cast<uint32_t>(bf[i]) << 16);
  }
}

TEST(BFloat16, SpanFormsRejectMismatchedLengths) {
  std::vector<float> values(4);
  std::vector<uint16_t> bf(3);
  EXPECT_THROW(float_to_bfloat16(std::span<const float>(values), std::span<uint16_t>(bf)), Error);
  EXPECT_THROW(bfloat16_to_float(std::span<const uint16_t>(bf), std::span<float>(values)), Error);
}

}  // namespace
}  // namespace meshnn
