// Reading and writing single rows of one rank's tensors in their stored format (internal to
// src/ops): what the KV-cache ops need to touch a few positions of a cache without converting it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn::ops_detail {

// One 32x32 tile <-> 1024 floats in face order (float32, bfloat16 and the block floats).
void tile_to_faces(const std::byte* tile, DataType dtype, float* faces);
void faces_to_tile(const float* faces, DataType dtype, std::byte* tile);

// Overwrites rows [row0, row0 + rows) of matrix `matrix` of t ([..., H, W] viewed as [batch, H, W])
// with values [rows][W], re-encoding only the tiles that hold them. Block floats share an exponent
// along 16 values of one row, so the other rows of those tiles keep their bits.
void write_rows(Tensor& t, int64_t matrix, int64_t row0, int64_t rows, const float* values);

// The Runtime's worker threads (1 without a Runtime).
int worker_count();

// Runs fn over [0, count) on the Runtime's worker threads when there is more than one, else inline.
void run_parallel(int64_t count, const std::function<void(int64_t, int64_t, int)>& fn);

}  // namespace meshnn::ops_detail

namespace meshnn::ops_detail {

// Row access without converting the whole tensor: logical row `row` (rows counted over all
// leading dims, W = the last dim) of a float32 or bfloat16 tensor in either layout. In TILE layout
// a row is 2 runs of 16 values per tile, so ops on a decode step's one row touch 1/32 of the tiles'
// bytes. write_row leaves the padding as it is (start from a zero-filled tensor).
bool has_row_access(const Tensor& t);
void read_row(const Tensor& t, int64_t row, float* out);
void write_row(Tensor& t, int64_t row, const float* in);

// fn(begin, end, worker) over rows [0, rows) of `width` values: on the Runtime's threads when there
// is enough work to pay for waking them (64 Ki values), else inline.
void run_rows(int64_t rows, int64_t width, const std::function<void(int64_t, int64_t, int)>& fn);

}  // namespace meshnn::ops_detail
