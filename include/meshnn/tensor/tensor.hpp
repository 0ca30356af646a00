// Tensor: one device's (one rank's) tensor in TT-NN's storage formats.
//
// A Tensor has a logical shape, a dtype and a layout:
//  - ROW_MAJOR: plain C order over the logical shape (not allowed for bfloat8_b / bfloat4_b).
//  - TILE: the last two dims padded up to multiples of 32 (padded_shape()), stored as 32x32 tiles
//    of 16x16 faces; rank-1 tensors are tiled as [1, n]. Padding holds the pad value given when the
//    tensor was made. bfloat8_b / bfloat4_b exist only in TILE layout.
// Storage is 64-byte aligned and owned by the Tensor (value semantics; copies are deep).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "meshnn/core/types.hpp"
#include "meshnn/tensor/shape.hpp"

namespace meshnn {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled storage. Throws meshnn::Error for a block-float dtype in ROW_MAJOR layout.
  Tensor(Shape shape, DataType dtype, Layout layout);
  // As above, but the storage is left as allocated (not zeroed): only for a producer that then
  // writes every byte itself, tile padding included. Why: zeroing is a serial pass over the whole
  // output, with its page faults, before the producer's threads start (figures:
  // docs/design-measurements.md §2).
  static Tensor uninitialized(Shape shape, DataType dtype, Layout layout);

  // Makes this tensor `shape`, `dtype`, `layout`, keeping its storage when that is large enough
  // (the bytes stay as they were: contents unspecified), else allocating zero-filled storage. For
  // the `*_into` ops and buffers made once and reused: a decode step's tensors change their row
  // count from pass to pass but, up to 32 rows, never their storage size (TT-NN captures the step
  // as a trace for the same reason). Throws meshnn::Error as the constructor does.
  void reset(const Shape& shape, DataType dtype, Layout layout);
  // The bytes the storage can hold (>= size_bytes()).
  size_t capacity_bytes() const { return capacity_bytes_; }

  // Converts row-major logical values (values.size() == shape.volume(), else meshnn::Error) into the
  // requested dtype (bfloat16 rounds to nearest even, block floats as TT-NN packs them) and layout;
  // TILE padding is filled with pad_value.
  static Tensor from_float(std::span<const float> values, const Shape& shape, DataType dtype, Layout layout,
                           float pad_value = 0.0f);
  // int32 / uint32 tensors from integers (dtype INT32 or UINT32 taken from the element type).
  static Tensor from_int32(std::span<const int32_t> values, const Shape& shape, Layout layout);
  static Tensor from_uint32(std::span<const uint32_t> values, const Shape& shape, Layout layout);

  // Logical values in row-major order, decoded to float (integers converted).
  std::vector<float> to_float() const;
  std::vector<int32_t> to_int32() const;    // INT32 tensors only
  std::vector<uint32_t> to_uint32() const;  // UINT32 tensors only

  // Same values in the other layout / dtype (typecast rounds as from_float does; to block floats
  // requires TILE layout). A no-op conversion returns a copy.
  Tensor to_layout(Layout layout, float pad_value = 0.0f) const;
  Tensor typecast(DataType dtype) const;

  const Shape& shape() const { return shape_; }
  Shape padded_shape() const;  // ROW_MAJOR: shape(); TILE: last two dims rounded up to 32
  DataType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  int64_t volume() const { return shape_.volume(); }
  // TILE only: number of tiles, and tiles per [Hp, Wp] matrix.
  int64_t num_tiles() const;

  // Raw storage (TT-NN's bytes).
  std::span<std::byte> bytes() { return {storage_.get(), size_bytes_}; }
  std::span<const std::byte> bytes() const { return {storage_.get(), size_bytes_}; }
  size_t size_bytes() const { return size_bytes_; }
  template <class T>
  T* data() { return reinterpret_cast<T*>(storage_.get()); }
  template <class T>
  const T* data() const { return reinterpret_cast<const T*>(storage_.get()); }

  // Bytes a tensor of this shape/dtype/layout occupies.
  static size_t storage_bytes(const Shape& shape, DataType dtype, Layout layout);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

 private:
  struct Unzeroed {};
  Tensor(Shape shape, DataType dtype, Layout layout, Unzeroed);
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  Shape shape_;
  DataType dtype_ = DataType::FLOAT32;
  Layout layout_ = Layout::ROW_MAJOR;
  size_t size_bytes_ = 0;
  size_t capacity_bytes_ = 0;
  std::unique_ptr<std::byte[], FreeDeleter> storage_;
};

// The [batch, height, width] view TILE layout uses: rank-1 [n] is [1, 1, n]; otherwise batch is
// the product of the leading dims.
struct MatrixView {
  int64_t batch, height, width;
};
MatrixView matrix_view(const Shape& shape);

}  // namespace meshnn
