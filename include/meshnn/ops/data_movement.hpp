// Reshape / permute / multi-dim slice on one rank's tensors (dtype and layout kept). Single-dim
// slice, concat and pad live in meshnn/tensor/concat.hpp.
// Block-float tensors are re-quantised after moving: values are unchanged unless elements that
// shared a 16-value block end up in different blocks (docs/spec/formats.md §5).
#pragma once

#include <span>
#include <vector>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// Same values in row-major order under a new shape; one dim may be -1 (inferred). Throws
// meshnn::Error when the volumes differ.
Tensor reshape(const Tensor& x, std::vector<int64_t> shape);

// out.shape[i] = x.shape[dims[i]]; dims a permutation of 0..rank-1 (negative dims allowed).
Tensor permute(const Tensor& x, std::span<const int> dims);

// x[begins[0]:ends[0], ..., begins[r-1]:ends[r-1]] (step 1; one entry per dim; ends clamped to
// the dim). Throws meshnn::Error for wrong counts or begin > end.
Tensor slice(const Tensor& x, std::span<const int64_t> begins, std::span<const int64_t> ends);

}  // namespace meshnn
