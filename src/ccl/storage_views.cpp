#include "storage_views.hpp"

#include <cstring>

#include "meshnn/core/memory.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/storage_codec.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::ccl::detail {

size_t storage_bytes_of(int64_t elements, DataType dtype) {
  if (is_block_float(dtype)) return static_cast<size_t>(elements / kTileVolume) * tile_bytes(dtype);
  return static_cast<size_t>(elements) * element_bytes(dtype);
}

Tensor tensor_from_bytes(const Shape& shape, DataType dtype, Layout layout, const std::byte* bytes) {
  Tensor t = Tensor::uninitialized(shape, dtype, layout);
  copy_bytes(t.data<std::byte>(), bytes, t.size_bytes());
  return t;
}

void split_parts(const Tensor& t, int d, int n, std::byte* parts) {
  Shape part = t.shape();
  part[d] = part[d] / n;
  const size_t part_bytes = Tensor::storage_bytes(part, t.dtype(), t.layout());
  if (const auto runs = slice_runs(t.shape(), t.layout(), d, n)) {
    // Part j = run j of every outer index.
    const size_t run = storage_bytes_of(runs->run, t.dtype());
    const std::byte* src = t.data<std::byte>();
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < runs->outer; ++k)
        copy_bytes(parts + j * part_bytes + k * run, src + (k * n + j) * run, run);
    return;
  }
  for (int j = 0; j < n; ++j) {
    const Tensor s = slice(t, d, j * part[d], (j + 1) * part[d]);
    copy_bytes(parts + j * part_bytes, s.data<std::byte>(), part_bytes);
  }
}

void join_parts(const std::byte* parts, const Shape& part, int d, int n, Tensor& t) {
  const size_t part_bytes = Tensor::storage_bytes(part, t.dtype(), t.layout());
  if (const auto runs = slice_runs(t.shape(), t.layout(), d, n)) {
    // For each outer index, one run from every part.
    const size_t run = storage_bytes_of(runs->run, t.dtype());
    std::byte* dst = t.data<std::byte>();
    for (int64_t k = 0; k < runs->outer; ++k)
      for (int j = 0; j < n; ++j) copy_bytes(dst + (k * n + j) * run, parts + j * part_bytes + k * run, run);
    return;
  }
  // A part boundary cuts tiles: concat() repacks.
  std::vector<Tensor> pieces;
  for (int j = 0; j < n; ++j) pieces.push_back(tensor_from_bytes(part, t.dtype(), t.layout(), parts + j * part_bytes));
  const Tensor joined = concat(pieces, d);
  copy_bytes(t.data<std::byte>(), joined.data<std::byte>(), t.size_bytes());
}

ElementType compute_type(DataType dtype) {
  return dtype == DataType::INT32 ? ElementType::I32
         : dtype == DataType::UINT32 ? ElementType::U32
                                     : ElementType::F32;
}
bool native(DataType dtype) { return dtype == DataType::FLOAT32 || is_integer(dtype); }

int64_t storage_elements(const Tensor& t) {
  if (t.layout() == Layout::TILE) return t.num_tiles() * kTileVolume;
  return t.volume();
}

// Storage -> compute values (same element order; block floats in face order). Integers are
// their own compute type.
void storage_to_compute(const Tensor& t, void* out) {
  const int64_t n = storage_elements(t);
  if (is_integer(t.dtype())) std::memcpy(out, t.data<std::byte>(), static_cast<size_t>(n) * 4);
  else decode_storage(t.data<std::byte>(), t.dtype(), n, static_cast<float*>(out));
}
// Compute values -> storage, quantising once.
void compute_to_storage(const void* values, Tensor& t) {
  const int64_t n = storage_elements(t);
  if (is_integer(t.dtype())) std::memcpy(t.data<std::byte>(), values, static_cast<size_t>(n) * 4);
  else encode_storage(static_cast<const float*>(values), t.dtype(), n, t.data<std::byte>());
}

}  // namespace meshnn::ccl::detail
