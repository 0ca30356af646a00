// Concatenation and slicing along one dim, for tensors in any dtype and layout. Where the cut is
// tile-aligned (TILE: any leading dim, or the last two dims at multiples of 32) whole tiles are
// copied, so block-float tiles move bit for bit; elsewhere values go through row-major form.
#pragma once

#include <span>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// All parts share dtype, layout and every dim but `dim` (else meshnn::Error).
Tensor concat(std::span<const Tensor> parts, int dim);
// Elements [begin, end) of `dim`.
Tensor slice(const Tensor& tensor, int dim, int64_t begin, int64_t end);
// Extends `dim` to new_size with pad_value (new_size >= current size).
Tensor pad_to(const Tensor& tensor, int dim, int64_t new_size, float pad_value = 0.0f);

}  // namespace meshnn
