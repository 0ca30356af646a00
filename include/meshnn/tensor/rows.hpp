// Row access without converting the whole tensor: logical row `row` (rows counted over all
// leading dims, W = the last dim) of a float32 or bfloat16 tensor in either layout. In TILE layout
// a row is 2 runs of 16 values per tile, so an op on a decode step's one row touches 1/32 of the
// tiles' bytes. write_row leaves the padding as it is.
#pragma once

#include <cstdint>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

bool has_row_access(const Tensor& t);
void read_row(const Tensor& t, int64_t row, float* out);  // W floats
void write_row(Tensor& t, int64_t row, const float* in);

}  // namespace meshnn
