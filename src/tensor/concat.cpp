#include "meshnn/tensor/concat.hpp"

#include <cstring>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

// A tensor seen as a row-major array of copyable units: elements (ROW_MAJOR) or whole tiles
// (TILE, where the tiled dims count tiles). Cutting such an array along one dim is a strided
// block copy, and for tiles it moves TT-NN's bytes untouched.
struct UnitView {
  std::vector<int64_t> dims;
  int dim = 0;
  size_t unit_bytes = 0;
  int64_t outer() const {
    int64_t v = 1;
    for (int i = 0; i < dim; ++i) v *= dims[i];
    return v;
  }
  int64_t inner() const {
    int64_t v = 1;
    for (size_t i = static_cast<size_t>(dim) + 1; i < dims.size(); ++i) v *= dims[i];
    return v;
  }
};

UnitView unit_view(const Tensor& t, int dim) {
  const Shape& s = t.shape();
  if (t.layout() == Layout::ROW_MAJOR) return {s.to_vector(), dim, element_bytes(t.dtype())};
  std::vector<int64_t> dims = s.rank() == 1 ? std::vector<int64_t>{1, s[0]} : s.to_vector();
  const int tiled_dim = s.rank() == 1 ? 1 : dim;
  dims[dims.size() - 1] = round_up_to_tile(dims.back()) / kTileWidth;
  dims[dims.size() - 2] = round_up_to_tile(dims[dims.size() - 2]) / kTileHeight;
  return {dims, tiled_dim, tile_bytes(t.dtype())};
}

// Is `dim` one of the two tiled dims of a TILE tensor (where only multiples of 32 cut cleanly)?
bool is_tiled_dim(const Tensor& t, int dim) {
  return t.layout() == Layout::TILE && (t.shape().rank() == 1 || dim >= t.shape().rank() - 2);
}

Shape with_dim(const Shape& s, int dim, int64_t size) {
  std::vector<int64_t> dims = s.to_vector();
  dims[static_cast<size_t>(dim)] = size;
  return Shape(dims);
}

// Fallback when a cut would split tiles: go through row-major values, keeping the element bits for
// bfloat16 and integers; block floats are re-packed (exact unless a 16-value block is split).
Tensor concat_via_row_major(std::span<const Tensor> parts, int dim) {
  const Tensor& first = parts.front();
  if (is_block_float(first.dtype())) {
    std::vector<Tensor> as_float;
    for (const Tensor& p : parts) as_float.push_back(Tensor::from_float(p.to_float(), p.shape(), DataType::FLOAT32, Layout::ROW_MAJOR));
    const Tensor joined = concat(as_float, dim);
    return Tensor::from_float(joined.to_float(), joined.shape(), first.dtype(), Layout::TILE);
  }
  std::vector<Tensor> row_major;
  for (const Tensor& p : parts) row_major.push_back(p.to_layout(Layout::ROW_MAJOR));
  return concat(row_major, dim).to_layout(Layout::TILE);
}

}  // namespace

Tensor concat(std::span<const Tensor> parts, int dim) {
  MESHNN_CHECK(!parts.empty(), "concat needs at least one tensor");
  const Tensor& first = parts.front();
  const int d = first.shape().normalize_dim(dim);
  int64_t total = 0;
  for (const Tensor& p : parts) {
    MESHNN_CHECK(p.dtype() == first.dtype() && p.layout() == first.layout(),
                 "concat needs one dtype and layout, got {}/{} and {}/{}", to_string(first.dtype()),
                 to_string(first.layout()), to_string(p.dtype()), to_string(p.layout()));
    MESHNN_CHECK(p.shape().rank() == first.shape().rank() && with_dim(p.shape(), d, 0) == with_dim(first.shape(), d, 0),
                 "concat on dim {} needs equal shapes elsewhere, got {} and {}", dim, first.shape(), p.shape());
    total += p.shape()[d];
  }
  if (is_tiled_dim(first, d)) {
    // Every part but the last must end on a tile boundary, or tiles would have to be split.
    const int64_t tile = kTileHeight;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (parts[i].shape()[d] % tile != 0) return concat_via_row_major(parts, d);
  }
  Tensor out(with_dim(first.shape(), d, total), first.dtype(), first.layout());
  const UnitView out_view = unit_view(out, d);
  const int64_t outer = out_view.outer();
  const size_t out_row_bytes = static_cast<size_t>(out_view.dims[out_view.dim] * out_view.inner()) * out_view.unit_bytes;
  size_t offset = 0;
  for (const Tensor& p : parts) {
    const UnitView v = unit_view(p, d);
    const size_t block = static_cast<size_t>(v.dims[v.dim] * v.inner()) * v.unit_bytes;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data<std::byte>() + o * out_row_bytes + offset, p.data<std::byte>() + o * block, block);
    offset += block;
  }
  return out;
}

Tensor slice(const Tensor& tensor, int dim, int64_t begin, int64_t end) {
  const int d = tensor.shape().normalize_dim(dim);
  const int64_t size = tensor.shape()[d];
  MESHNN_CHECK(0 <= begin && begin <= end && end <= size, "slice [{}, {}) is out of range for dim {} of shape {}", begin,
               end, dim, tensor.shape());
  const bool splits_tiles =
      is_tiled_dim(tensor, d) && (begin % kTileHeight != 0 || (end % kTileHeight != 0 && end != size));
  if (splits_tiles) {
    if (is_block_float(tensor.dtype())) {
      const Tensor f = Tensor::from_float(tensor.to_float(), tensor.shape(), DataType::FLOAT32, Layout::ROW_MAJOR);
      const Tensor part = slice(f, d, begin, end);
      return Tensor::from_float(part.to_float(), part.shape(), tensor.dtype(), Layout::TILE);
    }
    return slice(tensor.to_layout(Layout::ROW_MAJOR), d, begin, end).to_layout(Layout::TILE);
  }
  Tensor out(with_dim(tensor.shape(), d, end - begin), tensor.dtype(), tensor.layout());
  const UnitView in_view = unit_view(tensor, d);
  const UnitView out_view = unit_view(out, d);
  const int64_t unit_begin = is_tiled_dim(tensor, d) ? begin / kTileHeight : begin;
  const size_t in_row = static_cast<size_t>(in_view.dims[in_view.dim] * in_view.inner()) * in_view.unit_bytes;
  const size_t out_row = static_cast<size_t>(out_view.dims[out_view.dim] * out_view.inner()) * out_view.unit_bytes;
  const size_t skip = static_cast<size_t>(unit_begin * in_view.inner()) * in_view.unit_bytes;
  for (int64_t o = 0; o < in_view.outer(); ++o)
    std::memcpy(out.data<std::byte>() + o * out_row, tensor.data<std::byte>() + o * in_row + skip, out_row);
  return out;
}

Tensor pad_to(const Tensor& tensor, int dim, int64_t new_size, float pad_value) {
  const int d = tensor.shape().normalize_dim(dim);
  const int64_t size = tensor.shape()[d];
  MESHNN_CHECK(new_size >= size, "pad_to cannot shrink dim {} from {} to {}", dim, size, new_size);
  if (new_size == size) return tensor;
  const Shape pad_shape = with_dim(tensor.shape(), d, new_size - size);
  const std::vector<float> pad_values(static_cast<size_t>(pad_shape.volume()), pad_value);
  const Tensor padding = Tensor::from_float(pad_values, pad_shape, tensor.dtype(), tensor.layout(), pad_value);
  const Tensor parts[] = {tensor, padding};
  return concat(parts, d);
}

}  // namespace meshnn
