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
// a + b into `output` (a's dtype and layout, storage kept when large enough). Same-shape float32 /
// bfloat16 operands are added row by row, each row read before it is written: output may be a
// (the residual stream of a decoder, updated in place), and its tile padding is left as it was.
void add_into(const Tensor& a, const Tensor& b, Tensor& output);

// Same values in another dtype (rounding to nearest even; block floats need TILE layout, else
// meshnn::Error).
Tensor typecast(const Tensor& x, DataType dtype);

// SwiGLU on a fused gate|up projection (the Llama MLP): gate_up [..., M, 2 * half_width] in TILE
// layout (either layout when gate_up and out_dtype are float32 or bfloat16), the gate in columns [0, width) and up in [half_width, half_width + width), half_width a
// multiple of 32 so each half is whole tiles. Returns silu(gate) * up (silu as apply_activation computes it),
// [..., M, width] in out_dtype, TILE (padding 0); computed in float32 for the M valid rows only, on
// the default worker threads. Throws meshnn::Error when the
// widths do not fit or half_width is not a multiple of 32.
Tensor swiglu(const Tensor& gate_up, int64_t half_width, int64_t width, DataType out_dtype);
// The same into `output` (storage kept when large enough; float32 and bfloat16 outputs are written
// row by row, their tile padding left as the storage held it). output must not be gate_up.
void swiglu_into(const Tensor& gate_up, int64_t half_width, int64_t width, DataType out_dtype, Tensor& output);

}  // namespace meshnn
