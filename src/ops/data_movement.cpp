#include "meshnn/ops/data_movement.hpp"

#include <algorithm>
#include <vector>

#include "op_utils.hpp"

namespace meshnn {

namespace {

Tensor from_values(const Tensor& x, const std::vector<float>& values, const Shape& shape) {
  if (x.dtype() == DataType::INT32) {
    std::vector<int32_t> v(values.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(values[i]);
    return Tensor::from_int32(v, shape, x.layout());
  }
  return ops_detail::like(values, shape, x);
}

// Integers travel through the same index code as floats; uint32/int32 values are moved exactly
// by their own paths below rather than through float (which holds only 24 bits).
template <class T>
std::vector<T> gather(const std::vector<T>& in, const std::vector<int64_t>& src_index) {
  std::vector<T> out(src_index.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = in[src_index[i]];
  return out;
}

Tensor build(const Tensor& x, const std::vector<int64_t>& src_index, const Shape& shape) {
  switch (x.dtype()) {
    case DataType::UINT32:
      return Tensor::from_uint32(gather(x.to_uint32(), src_index), shape, x.layout());
    case DataType::INT32:
      return Tensor::from_int32(gather(x.to_int32(), src_index), shape, x.layout());
    default:
      return from_values(x, gather(x.to_float(), src_index), shape);
  }
}

}  // namespace

Tensor reshape(const Tensor& x, std::vector<int64_t> shape) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MESHNN_CHECK(infer < 0, "reshape: more than one -1 in the new shape for {}", x.shape());
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    MESHNN_CHECK(known > 0 && x.volume() % known == 0, "reshape: cannot infer a dim to reshape {} ({} values)",
                 x.shape(), x.volume());
    shape[infer] = x.volume() / known;
  }
  const Shape out(shape);
  MESHNN_CHECK(out.volume() == x.volume(), "reshape: {} has {} values, {} needs {}", x.shape(), x.volume(), out,
               out.volume());
  if (x.layout() == Layout::ROW_MAJOR) {
    // Row-major bytes are already in logical order: copy them under the new shape.
    Tensor t(out, x.dtype(), x.layout());
    std::copy(x.bytes().begin(), x.bytes().end(), t.bytes().begin());
    return t;
  }
  std::vector<int64_t> identity(x.volume());
  for (int64_t i = 0; i < x.volume(); ++i) identity[i] = i;
  return build(x, identity, out);
}

Tensor permute(const Tensor& x, std::span<const int> dims) {
  const int rank = x.shape().rank();
  MESHNN_CHECK(static_cast<int>(dims.size()) == rank, "permute: {} dims given for a rank-{} tensor", dims.size(), rank);
  std::vector<int> perm(rank);
  std::vector<bool> seen(rank, false);
  for (int i = 0; i < rank; ++i) {
    perm[i] = x.shape().normalize_dim(dims[i]);
    MESHNN_CHECK(!seen[perm[i]], "permute: dim {} appears twice", perm[i]);
    seen[perm[i]] = true;
  }
  std::vector<int64_t> in_strides(rank), out_dims(rank);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    in_strides[i] = stride;
    stride *= x.shape()[i];
  }
  for (int i = 0; i < rank; ++i) out_dims[i] = x.shape()[perm[i]];
  std::vector<int64_t> src(x.volume());
  std::vector<int64_t> coord(rank, 0);
  for (int64_t o = 0; o < x.volume(); ++o) {
    int64_t s = 0;
    for (int i = 0; i < rank; ++i) s += coord[i] * in_strides[perm[i]];
    src[o] = s;
    for (int i = rank - 1; i >= 0; --i) {
      if (++coord[i] < out_dims[i]) break;
      coord[i] = 0;
    }
  }
  return build(x, src, Shape(out_dims));
}

Tensor slice(const Tensor& x, std::span<const int64_t> begins, std::span<const int64_t> ends) {
  const int rank = x.shape().rank();
  MESHNN_CHECK(static_cast<int>(begins.size()) == rank && static_cast<int>(ends.size()) == rank,
               "slice: {} begins and {} ends given for a rank-{} tensor {}", begins.size(), ends.size(), rank,
               x.shape());
  std::vector<int64_t> b(rank), out_dims(rank), in_strides(rank);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    in_strides[i] = stride;
    stride *= x.shape()[i];
  }
  for (int i = 0; i < rank; ++i) {
    const int64_t e = std::min(ends[i], x.shape()[i]);
    MESHNN_CHECK(begins[i] >= 0 && begins[i] <= e, "slice: dim {} range [{}, {}) is invalid for {}", i, begins[i],
                 ends[i], x.shape());
    b[i] = begins[i];
    out_dims[i] = e - begins[i];
  }
  const Shape out(out_dims);
  std::vector<int64_t> src(out.volume());
  std::vector<int64_t> coord(rank, 0);
  for (int64_t o = 0; o < out.volume(); ++o) {
    int64_t s = 0;
    for (int i = 0; i < rank; ++i) s += (b[i] + coord[i]) * in_strides[i];
    src[o] = s;
    for (int i = rank - 1; i >= 0; --i) {
      if (++coord[i] < out_dims[i]) break;
      coord[i] = 0;
    }
  }
  return build(x, src, out);
}

}  // namespace meshnn
