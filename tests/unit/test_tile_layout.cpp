#include "meshnn/tensor/tile_layout.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace meshnn {
namespace {

TEST(TileLayout, ElementIndexMatchesFormula) {
  std::vector<int> seen(kTileVolume, 0);
  for (int64_t i = 0; i < kTileHeight; ++i) {
    for (int64_t j = 0; j < kTileWidth; ++j) {
      const int64_t expected = ((i / 16) * 2 + j / 16) * 256 + (i % 16) * 16 + (j % 16);
      ASSERT_EQ(tile_element_index(i, j), expected) << i << "," << j;
      ++seen[expected];
    }
  }
  for (int count : seen) EXPECT_EQ(count, 1);  // a permutation of the tile
}

TEST(TileLayout, ElementIndexHandChecked) {
  static_assert(tile_element_index(0, 0) == 0);
  EXPECT_EQ(tile_element_index(0, 15), 15);
  EXPECT_EQ(tile_element_index(0, 16), 256);
  EXPECT_EQ(tile_element_index(1, 0), 16);
  EXPECT_EQ(tile_element_index(15, 15), 255);
  EXPECT_EQ(tile_element_index(16, 0), 512);
  EXPECT_EQ(tile_element_index(16, 16), 768);
  EXPECT_EQ(tile_element_index(17, 18), 768 + 16 + 2);
  EXPECT_EQ(tile_element_index(31, 31), 1023);
}

TEST(TileLayout, RoundUpToTile) {
  EXPECT_EQ(round_up_to_tile(0), 0);
  EXPECT_EQ(round_up_to_tile(1), 32);
  EXPECT_EQ(round_up_to_tile(32), 32);
  EXPECT_EQ(round_up_to_tile(33), 64);
}

TEST(TileLayout, SingleTileFaceConversions) {
  std::vector<uint32_t> row_major(kTileVolume);
  std::iota(row_major.begin(), row_major.end(), 0u);
  std::vector<uint32_t> faces(kTileVolume);
  tile_row_major_to_faces(row_major.data(), faces.data());
  for (int64_t i = 0; i < kTileHeight; ++i) {
    for (int64_t j = 0; j < kTileWidth; ++j) {
      ASSERT_EQ(faces[tile_element_index(i, j)], row_major[i * kTileWidth + j]);
    }
  }
  std::vector<uint32_t> back(kTileVolume);
  tile_faces_to_row_major(faces.data(), back.data());
  EXPECT_EQ(back, row_major);
}

struct Shape {
  int64_t batch, height, width;
};

// Checks tilize element by element against the definition, padding included, then untilize back.
template <class T>
void check_round_trip(const Shape& s, T pad_value) {
  SCOPED_TRACE(testing::Message() << "shape " << s.batch << "x" << s.height << "x" << s.width);
  const int64_t hp = round_up_to_tile(s.height);
  const int64_t wp = round_up_to_tile(s.width);
  const int64_t tiles_w = wp / kTileWidth;
  std::vector<T> src(static_cast<size_t>(s.batch * s.height * s.width));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i % 50000 + 1);  // never equals the pad values

  std::vector<T> tiled(static_cast<size_t>(s.batch * hp * wp));
  tilize(src.data(), tiled.data(), s.batch, s.height, s.width, pad_value);

  int64_t padded_positions = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t r = 0; r < hp; ++r) {
      for (int64_t c = 0; c < wp; ++c) {
        const int64_t tile = (r / kTileHeight) * tiles_w + c / kTileWidth;
        const int64_t at = (b * (hp / kTileHeight) * tiles_w + tile) * kTileVolume +
                           tile_element_index(r % kTileHeight, c % kTileWidth);
        if (r < s.height && c < s.width) {
          ASSERT_EQ(tiled[at], src[(b * s.height + r) * s.width + c]) << b << "," << r << "," << c;
        } else {
          ASSERT_EQ(tiled[at], pad_value) << "padding at " << b << "," << r << "," << c;
          ++padded_positions;
        }
      }
    }
  }
  EXPECT_EQ(padded_positions, s.batch * (hp * wp - s.height * s.width));

  // untilize writes exactly the logical elements; a sentinel after the end must survive.
  std::vector<T> back(src.size() + 1, static_cast<T>(7));
  untilize(tiled.data(), back.data(), s.batch, s.height, s.width);
  EXPECT_EQ(back.back(), static_cast<T>(7));
  back.pop_back();
  EXPECT_EQ(back, src);
}

const std::vector<Shape> kShapes = {
    {3, 33, 65}, {1, 1, 1}, {2, 32, 32}, {1, 5, 100}, {1, 64, 16}, {2, 17, 48}, {1, 96, 31}, {4, 1, 130},
};

TEST(TileLayout, RoundTripFloat) {
  for (const Shape& s : kShapes) check_round_trip<float>(s, -1.5f);
  for (const Shape& s : kShapes) check_round_trip<float>(s, 0.0f);
}

TEST(TileLayout, RoundTripUint16) {
  for (const Shape& s : kShapes) check_round_trip<uint16_t>(s, uint16_t{0xFF80});
}

TEST(TileLayout, RoundTripInt32AndUint32) {
  for (const Shape& s : kShapes) check_round_trip<int32_t>(s, int32_t{-7});
  for (const Shape& s : kShapes) check_round_trip<uint32_t>(s, uint32_t{0xDEADBEEF});
}

TEST(TileLayout, OneTileMatchesFaceConversion) {
  std::vector<float> src(kTileVolume);
  std::iota(src.begin(), src.end(), 0.0f);
  std::vector<float> tilized(kTileVolume), faces(kTileVolume);
  tilize(src.data(), tilized.data(), 1, 32, 32, 0.0f);
  tile_row_major_to_faces(src.data(), faces.data());
  EXPECT_EQ(tilized, faces);
}

TEST(TileLayout, EmptyShapesWriteNothing) {
  std::vector<float> dst(1, 3.0f);
  tilize(static_cast<const float*>(nullptr), dst.data(), 2, 0, 5, 0.0f);
  tilize(static_cast<const float*>(nullptr), dst.data(), 0, 4, 5, 0.0f);
  untilize(static_cast<const float*>(nullptr), dst.data(), 2, 5, 0);
  EXPECT_EQ(dst[0], 3.0f);
}

}  // namespace
}  // namespace meshnn
