#include "meshnn/tensor/rows.hpp"

#include <algorithm>

#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

// Calls fn(element offset, column, count) for the runs of `row` in t's storage.
template <class Fn>
void for_each_run(const Tensor& t, int64_t row, Fn&& fn) {
  const int64_t w = t.shape()[-1];
  if (t.layout() == Layout::ROW_MAJOR) {
    fn(row * w, 0, w);
    return;
  }
  const int64_t h = t.shape().rank() >= 2 ? t.shape()[-2] : 1;
  const int64_t matrix = row / h, r = row % h;
  const int64_t tiles_h = round_up_to_tile(h) / 32, tiles_w = round_up_to_tile(w) / 32;
  const int64_t first_tile = (matrix * tiles_h + r / 32) * tiles_w;
  const int64_t face_row = (r % 32) / 16 * 2, in_face = (r % 16) * 16;
  for (int64_t tc = 0; tc < tiles_w; ++tc)
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t col = tc * 32 + half * 16;
      if (col >= w) break;
      fn((first_tile + tc) * kTileVolume + (face_row + half) * kFaceVolume + in_face, col, std::min<int64_t>(16, w - col));
    }
}

}  // namespace

bool has_row_access(const Tensor& t) {
  return (t.dtype() == DataType::FLOAT32 || t.dtype() == DataType::BFLOAT16) && t.shape().rank() >= 1;
}

void read_row(const Tensor& t, int64_t row, float* out) {
  for_each_run(t, row, [&](int64_t offset, int64_t col, int64_t count) {
    if (t.dtype() == DataType::FLOAT32) {
      std::copy_n(t.data<float>() + offset, count, out + col);
    } else {
      const uint16_t* s = t.data<uint16_t>() + offset;
      for (int64_t i = 0; i < count; ++i) out[col + i] = bfloat16_to_float(s[i]);
    }
  });
}

void write_row(Tensor& t, int64_t row, const float* in) {
  for_each_run(t, row, [&](int64_t offset, int64_t col, int64_t count) {
    if (t.dtype() == DataType::FLOAT32) {
      std::copy_n(in + col, count, t.data<float>() + offset);
    } else {
      uint16_t* d = t.data<uint16_t>() + offset;
      for (int64_t i = 0; i < count; ++i) d[i] = float_to_bfloat16(in[col + i]);
    }
  });
}

}  // namespace meshnn
