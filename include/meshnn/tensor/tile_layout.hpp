// TT-NN's TILE layout: 32x32 tiles of four 16x16 faces (docs/spec/formats.md §2).
//
// A tensor [..., H, W] in TILE layout is padded to [..., Hp, Wp] (multiples of 32) and stored as a
// row-major sequence of tiles over (leading dims, tile-row, tile-column); inside a tile, face 0
// (rows 0-15, cols 0-15), face 1 (rows 0-15, cols 16-31), face 2, face 3; inside a face, row-major.
#pragma once

#include <cstdint>

namespace meshnn {

inline constexpr int64_t kTileHeight = 32;
inline constexpr int64_t kTileWidth = 32;
inline constexpr int64_t kTileVolume = kTileHeight * kTileWidth;
inline constexpr int64_t kFaceHeight = 16;
inline constexpr int64_t kFaceWidth = 16;
inline constexpr int64_t kFaceVolume = kFaceHeight * kFaceWidth;

// Position of element (row, col) of a tile inside the tile's storage (face order).
constexpr int64_t tile_element_index(int64_t row, int64_t col) {
  return ((row / kFaceHeight) * 2 + col / kFaceWidth) * kFaceVolume + (row % kFaceHeight) * kFaceWidth +
         (col % kFaceWidth);
}

constexpr int64_t round_up_to_tile(int64_t n) { return (n + kTileHeight - 1) / kTileHeight * kTileHeight; }

// Row-major [batch, height, width] -> tiles over [batch, round_up(height), round_up(width)]; the
// padding is filled with pad_value. dst holds batch * tiles_per_matrix * 1024 elements.
// T is any 2- or 4-byte element (float, uint16_t for bfloat16 bits, int32_t, uint32_t).
template <class T>
void tilize(const T* src, T* dst, int64_t batch, int64_t height, int64_t width, T pad_value);

// Inverse of tilize: writes only the logical [batch, height, width] elements (padding dropped).
template <class T>
void untilize(const T* src, T* dst, int64_t batch, int64_t height, int64_t width);

// One tile: row-major 32x32 <-> face order (used by tests and by the block-float codecs).
template <class T>
void tile_row_major_to_faces(const T* row_major, T* faces);
template <class T>
void tile_faces_to_row_major(const T* faces, T* row_major);

}  // namespace meshnn
