#include "tile_rows.hpp"

#include <algorithm>
#include <cstring>

#include "meshnn/runtime/runtime.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::ops_detail {

int worker_count() { return Runtime::exists() ? Runtime::instance().pool().num_threads() : 1; }

void run_parallel(int64_t count, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (Runtime::exists() && Runtime::instance().pool().num_threads() > 1 && count > 1)
    Runtime::instance().pool().parallel_for(count, fn);
  else
    fn(0, count, 0);
}

void tile_to_faces(const std::byte* tile, DataType dtype, float* faces) {
  switch (dtype) {
    case DataType::FLOAT32:
      std::memcpy(faces, tile, 4096);
      break;
    case DataType::BFLOAT16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(tile);
      for (int i = 0; i < 1024; ++i) faces[i] = bfloat16_to_float(s[i]);
      break;
    }
    default:
      unpack_block_float_tile(tile, faces, dtype);
  }
}

void faces_to_tile(const float* faces, DataType dtype, std::byte* tile) {
  switch (dtype) {
    case DataType::FLOAT32:
      std::memcpy(tile, faces, 4096);
      break;
    case DataType::BFLOAT16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(tile);
      for (int i = 0; i < 1024; ++i) d[i] = float_to_bfloat16(faces[i]);
      break;
    }
    default:
      pack_block_float_tile(faces, tile, dtype);
  }
}

void write_rows(Tensor& t, int64_t matrix, int64_t row0, int64_t rows, const float* values) {
  const int64_t h = t.shape()[-2], w = t.shape()[-1];
  if (t.layout() == Layout::ROW_MAJOR) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c) {
        const int64_t idx = (matrix * h + row0 + r) * w + c;
        if (t.dtype() == DataType::BFLOAT16)
          t.data<uint16_t>()[idx] = float_to_bfloat16(values[r * w + c]);
        else
          t.data<float>()[idx] = values[r * w + c];
      }
    return;
  }
  const int64_t tr = round_up_to_tile(h) / 32, tc = round_up_to_tile(w) / 32;
  const size_t bytes = tile_bytes(t.dtype());
  float faces[1024];
  for (int64_t ti = row0 / 32; ti <= (row0 + rows - 1) / 32; ++ti)
    for (int64_t tj = 0; tj < tc; ++tj) {
      std::byte* tile = t.data<std::byte>() + static_cast<size_t>((matrix * tr + ti) * tc + tj) * bytes;
      tile_to_faces(tile, t.dtype(), faces);
      for (int64_t r = std::max(row0, ti * 32); r < std::min(row0 + rows, ti * 32 + 32); ++r)
        for (int64_t c = tj * 32; c < std::min(w, tj * 32 + 32); ++c)
          faces[tile_element_index(r - ti * 32, c - tj * 32)] = values[(r - row0) * w + c];
      faces_to_tile(faces, t.dtype(), tile);
    }
}

}  // namespace meshnn::ops_detail

namespace meshnn::ops_detail {
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

void run_rows(int64_t rows, int64_t width, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (rows * width >= (int64_t{1} << 16))
    run_parallel(rows, fn);
  else
    fn(0, rows, 0);
}

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

}  // namespace meshnn::ops_detail
