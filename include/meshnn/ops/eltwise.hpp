// Elementwise ops on one rank's tensors (any layout; float dtypes). Results keep the (first)
// input's dtype and layout unless stated; values are computed in float32 (float64 where noted).
#pragma once

#include "meshnn/core/types.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// gelu(x) = x * Phi(x) (exact, erf) or, with approximate, the tanh form
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Large |x| saturates to x or -0 (no NaN).
Tensor gelu(const Tensor& x, bool approximate = false);
Tensor silu(const Tensor& x);  // x * sigmoid(x); -> x for large x, -> -0 for very negative x
Tensor relu(const Tensor& x);

// a op b with numpy broadcasting over all dims (right-aligned; equal or 1). Output dtype/layout:
// a's. Throws meshnn::Error (both shapes) if they do not broadcast, or for integer dtypes.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);

// Same values in another dtype (rounding to nearest even; block floats need TILE layout, else
// meshnn::Error).
Tensor typecast(const Tensor& x, DataType dtype);

}  // namespace meshnn
