#include "tile_rows.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "meshnn/core/process_context.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/storage_codec.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "op_utils.hpp"

namespace meshnn::ops_detail {

int worker_count() { return default_worker_count(); }

void run_parallel(int64_t count, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (ThreadPool* pool = default_worker_pool(); pool != nullptr && pool->num_threads() > 1 && count > 1)
    pool->parallel_for(count, fn);
  else
    fn(0, count, 0);
}

void tile_to_faces(const std::byte* tile, DataType dtype, float* faces) { decode_storage(tile, dtype, kTileVolume, faces); }

void faces_to_tile(const float* faces, DataType dtype, std::byte* tile) { encode_storage(faces, dtype, kTileVolume, tile); }

void write_rows(Tensor& t, int64_t matrix, int64_t row0, int64_t rows, const float* values) {
  const int64_t h = t.shape()[-2], w = t.shape()[-1];
  // float32 and bfloat16 (either layout): only the rows' own values, not their whole tiles (a
  // decode step writes one row of each KV cache tile it touches).
  if (has_row_access(t)) {
    for (int64_t r = 0; r < rows; ++r) write_row(t, matrix * h + row0 + r, values + r * w);
    return;
  }
  const int64_t tr = round_up_to_tile(h) / 32, tc = round_up_to_tile(w) / 32;
  const size_t bytes = tile_bytes(t.dtype());
  if (is_block_float(t.dtype())) {
    // Block floats share an exponent per face row: a row is its own two blocks, re-packed alone.
    float row_values[32];
    for (int64_t r = row0; r < row0 + rows; ++r)
      for (int64_t tj = 0; tj < tc; ++tj) {
        std::byte* tile = t.data<std::byte>() + static_cast<size_t>((matrix * tr + r / 32) * tc + tj) * bytes;
        const int64_t valid = std::min<int64_t>(32, w - tj * 32);
        std::fill(std::copy_n(values + (r - row0) * w + tj * 32, valid, row_values), row_values + 32, 0.0f);
        pack_block_float_tile_row(row_values, static_cast<int>(r % 32), tile, t.dtype());
      }
    return;
  }
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

bool whole_tile_rows(const Tensor& t) {
  return t.layout() == Layout::TILE && (t.dtype() == DataType::FLOAT32 || t.dtype() == DataType::BFLOAT16) &&
         t.shape().rank() >= 2 && t.shape()[-1] % 32 == 0;
}

void for_tile_rows(const Shape& shape, FunctionRef<void(int64_t item)> whole, FunctionRef<void(int64_t row)> single) {
  const int64_t w = shape[-1], h = shape[-2];
  if (w == 0 || h == 0 || shape.volume() == 0) return;
  const int64_t tile_rows = round_up_to_tile(h) / 32, full = h / 32, matrices = shape.volume() / (h * w);
  const auto visit = [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t matrix = item / tile_rows, tile_row = item % tile_rows;
      if (tile_row < full) {
        whole(item);
      } else {
        for (int64_t r = tile_row * 32; r < h; ++r) single(matrix * h + r);
      }
    }
  };
  if (shape.volume() >= (int64_t{1} << 16))
    run_parallel(matrices * tile_rows, visit);
  else
    visit(0, matrices * tile_rows, 0);
}

void run_rows(int64_t rows, int64_t width, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (rows * width >= (int64_t{1} << 16))
    run_parallel(rows, fn);
  else
    fn(0, rows, 0);
}


const float* channel_pointer(const Tensor* t, int64_t n, float fallback, const char* what, const char* name) {
  if (t != nullptr && t->dtype() == DataType::FLOAT32 && t->layout() == Layout::ROW_MAJOR && t->volume() == n &&
      t->shape()[-1] == n)
    return t->data<float>();
  thread_local std::vector<float> values;
  values = channel_values(t, n, fallback, what, name);
  return values.data();
}

void write_logical_rows(Tensor& out, const Shape& shape, DataType dtype, const float* values) {
  if (dtype != DataType::FLOAT32 && dtype != DataType::BFLOAT16) {
    out = Tensor::from_float(std::span<const float>(values, static_cast<size_t>(shape.volume())), shape, dtype,
                             Layout::TILE);
    return;
  }
  out.reset(shape, dtype, Layout::TILE);
  const int64_t w = shape[-1];
  for (int64_t row = 0; w > 0 && row < shape.volume() / w; ++row) write_row(out, row, values + row * w);
}

}  // namespace meshnn::ops_detail
