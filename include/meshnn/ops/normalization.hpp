// Normalisations and softmax over the last dim of one rank's tensors (docs/spec/semantics.md §4).
// Statistics are accumulated in float64; outputs keep x's dtype and layout.
#pragma once

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// y = h / sqrt(eps + mean(h^2)) * weight, h = x (+ residual, same shape as x, added first).
// weight: nullptr or W values in its last dim (shape [W], [1, W], ...), W = x's last dim.
// Throws meshnn::Error for a weight/residual of the wrong size or shape.
Tensor rms_norm(const Tensor& x, float eps, const Tensor* weight, const Tensor* residual = nullptr);
// The same into `output`, reset to x's shape, dtype and layout (storage kept when large enough;
// float32 and bfloat16 are written row by row, so the tile padding is left as the storage held
// it). output may be x.
void rms_norm_into(const Tensor& x, float eps, const Tensor* weight, Tensor& output, const Tensor* residual = nullptr);

// Qwen3's q_norm / k_norm, in place: in every row of x, each of `heads` runs of D columns (D =
// weight's size) from `first_column` on is scaled by 1 / sqrt(eps + mean of the run's squares) and
// by weight, as rms_norm would scale a row of D. Other columns are left as they are. x: float32 or
// bfloat16, either layout. Throws meshnn::Error when the runs do not fit x's last dim.
void rms_norm_heads_in_place(Tensor& x, int64_t first_column, int64_t heads, const Tensor& weight, float eps);

// y = (h - mean(h)) / sqrt(var(h) + eps) * weight + bias (biased variance, as torch), h as above.
Tensor layer_norm(const Tensor& x, float eps, const Tensor* weight, const Tensor* bias = nullptr,
                  const Tensor* residual = nullptr);

// Numerically stable softmax over `dim` (max subtracted first). -inf entries (masks) give 0; a
// slice that is all -inf gives NaN, as torch does.
Tensor softmax(const Tensor& x, int dim = -1);

}  // namespace meshnn
