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

}  // namespace meshnn::ops_detail
