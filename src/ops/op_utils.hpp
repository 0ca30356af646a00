// Helpers shared by the ops that compute in float32 on row-major values (internal to src/ops).
#pragma once

#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::ops_detail {

inline void check_float(const Tensor& t, const char* what, const char* name) {
  MESHNN_CHECK(!is_integer(t.dtype()), "{}: {} must have a float dtype, got {}", what, name, to_string(t.dtype()));
}

// Eight partial sums: independent chains the compiler can keep in vector lanes.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// A tensor with x's dtype and layout holding `values` (row-major over `shape`).
inline Tensor like(const std::vector<float>& values, const Shape& shape, const Tensor& x) {
  return Tensor::from_float(values, shape, x.dtype(), x.layout());
}

// The n values of an optional per-channel parameter (weight, bias): nullptr -> `fallback`
// repeated. Its last dim must be n and its volume n.
inline std::vector<float> channel_values(const Tensor* t, int64_t n, float fallback, const char* what,
                                         const char* name) {
  if (t == nullptr) return std::vector<float>(static_cast<size_t>(n), fallback);
  MESHNN_CHECK(t->volume() == n && t->shape()[-1] == n, "{}: {} must hold {} values in its last dim, got shape {}",
               what, name, n, t->shape());
  check_float(*t, what, name);
  return t->to_float();
}

// As channel_values, but without a copy when t already holds them as float32 ROW_MAJOR (a model's
// norm weights): a pointer to t's values, or to a per-thread buffer (valid until the next call).
const float* channel_pointer(const Tensor* t, int64_t n, float fallback, const char* what, const char* name);

}  // namespace meshnn::ops_detail
