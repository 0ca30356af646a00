// Pearson correlation coefficient with TT-NN's exact conventions (docs/spec/semantics.md §4), the accuracy
// measure every meshnn test and app reports.
#pragma once

#include <span>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// pcc(reference, result), evaluated in this order:
//   1. both all-NaN -> 1; exactly one all-NaN -> 0;
//   2. exactly one all-zero -> 0 (NaN/inf count as non-zero here);
//   3. NaN and +-inf are replaced by 0 in both;
//   4. element-wise equal -> 1;
//   5. both constant (zero variance) -> 1 if equal else 0 (only "unequal" is left here); one
//      constant and the other not -> 0;
//   6. else the Pearson correlation computed in float64.
// Empty inputs count as all-NaN. Throws meshnn::Error when the sizes differ.
double pcc(std::span<const float> reference, std::span<const float> result);

// Same on the logical values of two tensors (any dtype/layout; the shapes must match exactly,
// else meshnn::Error naming both shapes).
double pcc(const Tensor& reference, const Tensor& result);

}  // namespace meshnn
