// Reading and writing single rows of one rank's tensors in their stored format (internal to
// src/ops): what the KV-cache ops need to touch a few positions of a cache without converting it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshnn/core/function_ref.hpp"
#include "meshnn/tensor/rows.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::ops_detail {

// One 32x32 tile <-> 1024 floats in face order (float32, bfloat16 and the block floats).
void tile_to_faces(const std::byte* tile, DataType dtype, float* faces);
void faces_to_tile(const float* faces, DataType dtype, std::byte* tile);

// Overwrites rows [row0, row0 + rows) of matrix `matrix` of t ([..., H, W] viewed as [batch, H, W])
// with values [rows][W], re-encoding only the tiles that hold them. Block floats share an exponent
// along 16 values of one row, so the other rows of those tiles keep their bits.
void write_rows(Tensor& t, int64_t matrix, int64_t row0, int64_t rows, const float* values);

// The process's default worker threads (core/process_context.hpp; 1 without a pool).
int worker_count();

// Runs fn over [0, count) on the default worker threads when there is more than one, else inline.
void run_parallel(int64_t count, FunctionRef<void(int64_t, int64_t, int)> fn);

// Row access lives with the tensor (meshnn/tensor/rows.hpp); the ops name it from here too.
using meshnn::has_row_access;
using meshnn::read_row;
using meshnn::write_row;

// Resets `out` to shape/dtype TILE and writes `values` (row-major, shape.volume() floats) into it:
// row by row for float32 and bfloat16 (the tile padding keeps whatever the storage held), whole
// tiles for the block floats.
void write_logical_rows(Tensor& out, const Shape& shape, DataType dtype, const float* values);

// fn(begin, end, worker) over rows [0, rows) of `width` values: on the default worker threads when there
// is enough work to pay for waking them (64 Ki values), else inline.
void run_rows(int64_t rows, int64_t width, FunctionRef<void(int64_t, int64_t, int)> fn);

// Whether t's tiles can be converted whole for an op that goes tile row by tile row: float32 or
// bfloat16, TILE, a width that fills its tiles (no padding columns to compute from).
bool whole_tile_rows(const Tensor& t);

// Visits the rows of a [..., H, W] tensor a tile row (32 rows) at a time: whole(item) for each
// tile row whose 32 rows are all real, item = matrix * ceil(H / 32) + tile row (its tiles are
// item * W/32 .. item * W/32 + W/32 - 1 in storage); single(row) for each row of a last tile row
// that holds padding rows (row = matrix * H + row in matrix). On the default worker threads when
// the tensor has at least 64 Ki values.
void for_tile_rows(const Shape& shape, FunctionRef<void(int64_t item)> whole, FunctionRef<void(int64_t row)> single);

}  // namespace meshnn::ops_detail
