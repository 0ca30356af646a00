// Tensor storage: shapes, layouts, dtype conversions, padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/tensor.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::seeded_values;

TEST(Shape, NormalizesNegativeDimsAndRejectsOutOfRange) {
  const Shape s{2, 3, 4, 5};
  EXPECT_EQ(s.normalize_dim(-1), 3);
  EXPECT_EQ(s.normalize_dim(-4), 0);
  EXPECT_EQ(s[-2], 4);
  EXPECT_EQ(s.volume(), 120);
  EXPECT_EQ(s.outer_volume(2), 6);
  EXPECT_EQ(s.inner_volume(1), 20);
  EXPECT_THROW(s.normalize_dim(4), Error);
  EXPECT_THROW(s.normalize_dim(-5), Error);
  EXPECT_THROW(Shape(std::vector<int64_t>{}), Error);
  EXPECT_THROW(Shape(std::vector<int64_t>(9, 1)), Error);
  EXPECT_THROW((Shape{2, -1}), Error);
  EXPECT_EQ(s.to_string(), "[2, 3, 4, 5]");
}

TEST(Tensor, StorageSizesMatchTtnn) {
  const Shape s{2, 33, 65};  // 2 x 2 x 3 tiles
  EXPECT_EQ(Tensor::storage_bytes(s, DataType::FLOAT32, Layout::TILE), 12u * 4096);
  EXPECT_EQ(Tensor::storage_bytes(s, DataType::BFLOAT16, Layout::TILE), 12u * 2048);
  EXPECT_EQ(Tensor::storage_bytes(s, DataType::BFLOAT8_B, Layout::TILE), 12u * 1088);
  EXPECT_EQ(Tensor::storage_bytes(s, DataType::BFLOAT4_B, Layout::TILE), 12u * 576);
  EXPECT_EQ(Tensor::storage_bytes(s, DataType::BFLOAT16, Layout::ROW_MAJOR), 2u * 33 * 65 * 2);
  const Tensor t(s, DataType::FLOAT32, Layout::TILE);
  EXPECT_EQ(t.padded_shape(), (Shape{2, 64, 96}));
  EXPECT_EQ(t.num_tiles(), 12);
  // Rank-1 tensors tile as [1, n].
  const Tensor v(Shape{40}, DataType::FLOAT32, Layout::TILE);
  EXPECT_EQ(v.num_tiles(), 2);
  EXPECT_EQ(v.padded_shape(), Shape{64});
}

TEST(Tensor, BlockFloatNeedsTileLayout) {
  EXPECT_THROW(Tensor(Shape{32, 32}, DataType::BFLOAT8_B, Layout::ROW_MAJOR), Error);
  const Tensor t = Tensor::from_float(seeded_values(64, 1), Shape{2, 32}, DataType::FLOAT32, Layout::ROW_MAJOR);
  EXPECT_THROW(t.typecast(DataType::BFLOAT4_B), Error);
  EXPECT_THROW(Tensor::from_float(seeded_values(63, 1), Shape{2, 32}, DataType::FLOAT32, Layout::TILE), Error);
}

TEST(Tensor, Float32RoundTripsExactlyInEveryLayout) {
  for (const Shape& s : {Shape{7}, Shape{1, 1}, Shape{3, 33, 65}, Shape{2, 2, 32, 64}, Shape{1, 5, 100}}) {
    const std::vector<float> v = seeded_values(s.volume(), 7);
    for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
      const Tensor t = Tensor::from_float(v, s, DataType::FLOAT32, layout);
      EXPECT_EQ(t.to_float(), v) << s.to_string();
    }
  }
}

TEST(Tensor, TilePaddingHoldsThePadValue) {
  const Shape s{2, 33, 3};
  const Tensor t = Tensor::from_float(seeded_values(s.volume(), 3), s, DataType::FLOAT32, Layout::TILE, -7.5f);
  const float* tiles = t.data<float>();
  int pad_count = 0;
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t tr = 0; tr < 2; ++tr)
      for (int64_t i = 0; i < 32; ++i)
        for (int64_t j = 0; j < 32; ++j) {
          const int64_t row = tr * 32 + i;
          const bool pad = row >= 33 || j >= 3;
          const float x = tiles[(m * 2 + tr) * kTileVolume + tile_element_index(i, j)];
          if (pad) {
            EXPECT_EQ(x, -7.5f);
            ++pad_count;
          }
        }
  EXPECT_EQ(pad_count, 2 * 64 * 32 - 2 * 33 * 3);
}

TEST(Tensor, Bfloat16RoundsToNearestEvenAndKeepsBitsAcrossLayouts) {
  const Shape s{3, 40, 17};
  const std::vector<float> v = seeded_values(s.volume(), 11);
  const Tensor rm = Tensor::from_float(v, s, DataType::BFLOAT16, Layout::ROW_MAJOR);
  const std::vector<float> back = rm.to_float();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], bfloat16_to_float(float_to_bfloat16(v[i])));
  const Tensor tiled = rm.to_layout(Layout::TILE);
  EXPECT_EQ(tiled.to_float(), back);
  const Tensor again = tiled.to_layout(Layout::ROW_MAJOR);
  ASSERT_EQ(again.size_bytes(), rm.size_bytes());
  EXPECT_EQ(std::memcmp(again.data<std::byte>(), rm.data<std::byte>(), rm.size_bytes()), 0);
}

TEST(Tensor, TypecastBetweenAllFloatTypesStaysCloseAndIntegersStayExact) {
  const Shape s{2, 64, 96};
  const std::vector<float> v = seeded_values(s.volume(), 5);
  const Tensor f = Tensor::from_float(v, s, DataType::FLOAT32, Layout::TILE);
  // Relative error bounds per format: bfloat16 keeps 8 significant bits (2^-8 relative),
  // bfloat8_b 7 magnitude bits under the block's largest exponent (2^-6 of the block max),
  // bfloat4_b 3 bits (2^-2 of the block max); values here are in [-1, 1).
  const std::pair<DataType, double> cases[] = {
      {DataType::BFLOAT16, 0x1p-8}, {DataType::BFLOAT8_B, 0x1p-6}, {DataType::BFLOAT4_B, 0x1p-2}};
  for (const auto& [dtype, bound] : cases) {
    const std::vector<float> back = f.typecast(dtype).typecast(DataType::FLOAT32).to_float();
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::abs(double(back[i]) - v[i]));
    EXPECT_LE(worst, bound) << to_string(dtype);
    EXPECT_GT(worst, 0.0) << to_string(dtype) << " should lose some precision on random data";
  }
  std::vector<int32_t> ints = {-5, 0, 7, 1 << 30, -(1 << 30), 42};
  const Tensor i32 = Tensor::from_int32(ints, Shape{2, 3}, Layout::TILE);
  EXPECT_EQ(i32.to_int32(), ints);
  EXPECT_EQ(i32.to_layout(Layout::ROW_MAJOR).to_int32(), ints);
  EXPECT_THROW(i32.to_uint32(), Error);
}

// Unpadded float32 <-> bfloat16 typecasts convert storage element by element; they must give the
// bits of the scalar conversion (round to nearest even, NaN to 0x7FC0, infinities kept) at every
// element, in both layouts, and padded shapes (a TILE vector is one padded row of tiles) the zero
// padding of the general path.
TEST(Tensor, TypecastBetweenFloat32AndBfloat16MatchesTheScalarConversion) {
  std::vector<float> v = seeded_values(2 * 64 * 96, 11);
  const float specials[] = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f,
                            3.4e38f, 1.00390625f /* halfway: ties to even */, 1.01171875f /* halfway, rounds up */};
  std::copy(std::begin(specials), std::end(specials), v.begin() + 100);
  for (const Shape& s : {Shape{2, 64, 96}, Shape{2, 60, 100}, Shape{96}})
    for (const Layout layout : {Layout::TILE, Layout::ROW_MAJOR}) {
      const std::vector<float> values(v.begin(), v.begin() + s.volume());
      const Tensor f = Tensor::from_float(values, s, DataType::FLOAT32, layout);
      const Tensor b = f.typecast(DataType::BFLOAT16);
      ASSERT_EQ(b.dtype(), DataType::BFLOAT16);
      ASSERT_EQ(b.layout(), layout);
      const Tensor expected = Tensor::from_float(values, s, DataType::BFLOAT16, layout);
      ASSERT_EQ(b.size_bytes(), expected.size_bytes());
      EXPECT_EQ(std::memcmp(b.data<std::byte>(), expected.data<std::byte>(), b.size_bytes()), 0) << s.to_string();
      const std::vector<float> back = b.typecast(DataType::FLOAT32).to_float();
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t want = float_to_bfloat16(values[i]);
        uint32_t got;
        std::memcpy(&got, &back[i], 4);
        ASSERT_EQ(got, uint32_t{want} << 16) << "element " << i << " of " << s.to_string();
      }
    }
}

TEST(Tensor, BlockFloatTensorsDecodeWhatTheyEncode) {
  const Shape s{1, 2, 50, 70};
  const std::vector<float> v = seeded_values(s.volume(), 9);
  const Tensor b8 = Tensor::from_float(v, s, DataType::BFLOAT8_B, Layout::TILE);
  const std::vector<float> decoded = b8.to_float();
  // Re-encoding decoded values reproduces the same bytes (blocks unchanged).
  const Tensor again = Tensor::from_float(decoded, s, DataType::BFLOAT8_B, Layout::TILE);
  EXPECT_EQ(std::memcmp(again.data<std::byte>(), b8.data<std::byte>(), b8.size_bytes()), 0);
}

}  // namespace
}  // namespace meshnn
