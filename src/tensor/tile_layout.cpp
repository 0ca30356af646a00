#include "meshnn/tensor/tile_layout.hpp"

#include <algorithm>
#include <cstring>

namespace meshnn {
namespace {

// Offset of face row `row` (0..31) half `half` (0: cols 0-15, 1: cols 16-31) inside a tile.
constexpr int64_t face_row_offset(int64_t row, int64_t half) { return tile_element_index(row, half * kFaceWidth); }

}  // namespace

// Both directions walk the row-major side sequentially (one source row at a time, across every
// tile of that tile-row) so the big contiguous side streams through the cache and the tiled side
// is written 16 elements (one face row) per memcpy.
template <class T>
void tilize(const T* src, T* dst, int64_t batch, int64_t height, int64_t width, T pad_value) {
  const int64_t tiles_h = round_up_to_tile(height) / kTileHeight;
  const int64_t tiles_w = round_up_to_tile(width) / kTileWidth;
  const int64_t full_face_cols = width / kFaceWidth;  // face rows with no padding in them
  T pad_row[kFaceWidth];
  std::fill(pad_row, pad_row + kFaceWidth, pad_value);

  for (int64_t b = 0; b < batch; ++b) {
    const T* matrix = src + b * height * width;
    T* tiles = dst + b * tiles_h * tiles_w * kTileVolume;
    for (int64_t tr = 0; tr < tiles_h; ++tr) {
      T* tile_row = tiles + tr * tiles_w * kTileVolume;
      for (int64_t r = 0; r < kTileHeight; ++r) {
        const int64_t row = tr * kTileHeight + r;
        const int64_t offsets[2] = {face_row_offset(r, 0), face_row_offset(r, 1)};
        if (row >= height) {
          for (int64_t fc = 0; fc < tiles_w * 2; ++fc) {
            std::memcpy(tile_row + (fc / 2) * kTileVolume + offsets[fc % 2], pad_row, sizeof pad_row);
          }
          continue;
        }
        const T* src_row = matrix + row * width;
        int64_t fc = 0;
        for (; fc < full_face_cols; ++fc) {
          std::memcpy(tile_row + (fc / 2) * kTileVolume + offsets[fc % 2], src_row + fc * kFaceWidth,
                      kFaceWidth * sizeof(T));
        }
        if (fc < tiles_w * 2) {
          // The one face row that straddles the right edge, then whole padding face rows.
          T* out = tile_row + (fc / 2) * kTileVolume + offsets[fc % 2];
          const int64_t valid = width - fc * kFaceWidth;
          std::memcpy(out, src_row + fc * kFaceWidth, static_cast<size_t>(valid) * sizeof(T));
          std::fill(out + valid, out + kFaceWidth, pad_value);
          for (++fc; fc < tiles_w * 2; ++fc) {
            std::memcpy(tile_row + (fc / 2) * kTileVolume + offsets[fc % 2], pad_row, sizeof pad_row);
          }
        }
      }
    }
  }
}

template <class T>
void untilize(const T* src, T* dst, int64_t batch, int64_t height, int64_t width) {
  const int64_t tiles_h = round_up_to_tile(height) / kTileHeight;
  const int64_t tiles_w = round_up_to_tile(width) / kTileWidth;
  const int64_t full_face_cols = width / kFaceWidth;
  const int64_t tail = width - full_face_cols * kFaceWidth;

  for (int64_t b = 0; b < batch; ++b) {
    const T* tiles = src + b * tiles_h * tiles_w * kTileVolume;
    T* matrix = dst + b * height * width;
    for (int64_t row = 0; row < height; ++row) {
      const int64_t r = row % kTileHeight;
      const T* tile_row = tiles + (row / kTileHeight) * tiles_w * kTileVolume;
      const int64_t offsets[2] = {face_row_offset(r, 0), face_row_offset(r, 1)};
      T* dst_row = matrix + row * width;
      int64_t fc = 0;
      for (; fc < full_face_cols; ++fc) {
        std::memcpy(dst_row + fc * kFaceWidth, tile_row + (fc / 2) * kTileVolume + offsets[fc % 2],
                    kFaceWidth * sizeof(T));
      }
      if (tail > 0) {
        std::memcpy(dst_row + fc * kFaceWidth, tile_row + (fc / 2) * kTileVolume + offsets[fc % 2],
                    static_cast<size_t>(tail) * sizeof(T));
      }
    }
  }
}

template <class T>
void tile_row_major_to_faces(const T* row_major, T* faces) {
  for (int64_t r = 0; r < kTileHeight; ++r) {
    std::memcpy(faces + face_row_offset(r, 0), row_major + r * kTileWidth, kFaceWidth * sizeof(T));
    std::memcpy(faces + face_row_offset(r, 1), row_major + r * kTileWidth + kFaceWidth, kFaceWidth * sizeof(T));
  }
}

template <class T>
void tile_faces_to_row_major(const T* faces, T* row_major) {
  for (int64_t r = 0; r < kTileHeight; ++r) {
    std::memcpy(row_major + r * kTileWidth, faces + face_row_offset(r, 0), kFaceWidth * sizeof(T));
    std::memcpy(row_major + r * kTileWidth + kFaceWidth, faces + face_row_offset(r, 1), kFaceWidth * sizeof(T));
  }
}

#define MESHNN_INSTANTIATE_TILE_LAYOUT(T)                                                      \
  template void tilize<T>(const T*, T*, int64_t, int64_t, int64_t, T);                         \
  template void untilize<T>(const T*, T*, int64_t, int64_t, int64_t);                          \
  template void tile_row_major_to_faces<T>(const T*, T*);                                      \
  template void tile_faces_to_row_major<T>(const T*, T*);

MESHNN_INSTANTIATE_TILE_LAYOUT(float)
MESHNN_INSTANTIATE_TILE_LAYOUT(uint16_t)
MESHNN_INSTANTIATE_TILE_LAYOUT(int32_t)
MESHNN_INSTANTIATE_TILE_LAYOUT(uint32_t)

#undef MESHNN_INSTANTIATE_TILE_LAYOUT

}  // namespace meshnn
