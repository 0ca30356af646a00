#include "meshnn/tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

std::byte* allocate_storage(size_t bytes) {
  std::byte* p = allocate_buffer(bytes);
  if (p == nullptr) throw Error(fmt::format("out of memory allocating a tensor of {} bytes", bytes));
  return p;
}

int64_t tiles_of(const MatrixView& m) {
  return m.batch * (round_up_to_tile(m.height) / kTileHeight) * (round_up_to_tile(m.width) / kTileWidth);
}

// Lays out `count` row-major elements of type T into the tensor's layout.
template <class T>
void store_elements(const T* row_major, Tensor& t, T pad_value) {
  if (t.layout() == Layout::ROW_MAJOR) {
    std::memcpy(t.data<T>(), row_major, static_cast<size_t>(t.volume()) * sizeof(T));
  } else {
    const MatrixView m = matrix_view(t.shape());
    tilize(row_major, t.data<T>(), m.batch, m.height, m.width, pad_value);
  }
}

template <class T>
std::vector<T> load_elements(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.volume()));
  if (t.layout() == Layout::ROW_MAJOR) {
    std::memcpy(out.data(), t.data<T>(), out.size() * sizeof(T));
  } else {
    const MatrixView m = matrix_view(t.shape());
    untilize(t.data<T>(), out.data(), m.batch, m.height, m.width);
  }
  return out;
}

// Block floats: row-major floats -> face-ordered tiles (padded) -> packed bytes.
void store_block_float(std::span<const float> values, Tensor& t, float pad_value) {
  const MatrixView m = matrix_view(t.shape());
  std::vector<float> faces(static_cast<size_t>(t.num_tiles() * kTileVolume));
  tilize(values.data(), faces.data(), m.batch, m.height, m.width, pad_value);
  pack_block_float_tiles(faces.data(), t.data<std::byte>(), t.num_tiles(), t.dtype());
}

std::vector<float> load_block_float(const Tensor& t) {
  const MatrixView m = matrix_view(t.shape());
  std::vector<float> faces(static_cast<size_t>(t.num_tiles() * kTileVolume));
  unpack_block_float_tiles(t.data<std::byte>(), faces.data(), t.num_tiles(), t.dtype());
  std::vector<float> out(static_cast<size_t>(t.volume()));
  untilize(faces.data(), out.data(), m.batch, m.height, m.width);
  return out;
}

template <class To, class From>
std::vector<To> convert_all(std::span<const From> in) {
  std::vector<To> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = static_cast<To>(in[i]);
  return out;
}

// Relayout keeping the element bits (bfloat16 and integers must not round-trip through float).
template <class T>
Tensor relayout(const Tensor& in, Layout layout, T pad_value) {
  Tensor out(in.shape(), in.dtype(), layout);
  const std::vector<T> row_major = load_elements<T>(in);
  store_elements(row_major.data(), out, pad_value);
  return out;
}

}  // namespace

MatrixView matrix_view(const Shape& shape) {
  if (shape.rank() == 1) return {1, 1, shape[0]};
  return {shape.outer_volume(-2), shape[-2], shape[-1]};
}

void Tensor::FreeDeleter::operator()(std::byte* p) const { release_buffer(p); }

size_t Tensor::storage_bytes(const Shape& shape, DataType dtype, Layout layout) {
  if (layout == Layout::ROW_MAJOR) return static_cast<size_t>(shape.volume()) * element_bytes(dtype);
  return static_cast<size_t>(tiles_of(matrix_view(shape))) * tile_bytes(dtype);
}

Tensor::Tensor(Shape shape, DataType dtype, Layout layout, Unzeroed)
    : shape_(std::move(shape)), dtype_(dtype), layout_(layout) {
  MESHNN_CHECK(!(is_block_float(dtype) && layout == Layout::ROW_MAJOR),
               "{} exists only in TILE layout (tensor of shape {} asked for ROW_MAJOR)", to_string(dtype), shape_);
  size_bytes_ = storage_bytes(shape_, dtype_, layout_);
  capacity_bytes_ = size_bytes_;
  storage_.reset(allocate_storage(size_bytes_));
}

void Tensor::reset(const Shape& shape, DataType dtype, Layout layout) {
  MESHNN_CHECK(!(is_block_float(dtype) && layout == Layout::ROW_MAJOR),
               "{} exists only in TILE layout (tensor of shape {} asked for ROW_MAJOR)", to_string(dtype), shape);
  const size_t bytes = storage_bytes(shape, dtype, layout);
  if (!storage_ || bytes > capacity_bytes_) {
    storage_.reset();  // the old storage goes back before the new one is taken
    storage_.reset(allocate_storage(bytes));
    std::memset(storage_.get(), 0, bytes);
    capacity_bytes_ = bytes;
  }
  shape_ = shape;
  dtype_ = dtype;
  layout_ = layout;
  size_bytes_ = bytes;
}

Tensor::Tensor(Shape shape, DataType dtype, Layout layout) : Tensor(std::move(shape), dtype, layout, Unzeroed{}) {
  std::memset(storage_.get(), 0, size_bytes_);
}

Tensor Tensor::uninitialized(Shape shape, DataType dtype, Layout layout) {
  return Tensor(std::move(shape), dtype, layout, Unzeroed{});
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_),
      dtype_(other.dtype_),
      layout_(other.layout_),
      size_bytes_(other.size_bytes_),
      capacity_bytes_(other.storage_ ? other.size_bytes_ : 0) {
  if (other.storage_) {
    storage_.reset(allocate_storage(size_bytes_));
    std::memcpy(storage_.get(), other.storage_.get(), size_bytes_);
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Shape Tensor::padded_shape() const {
  if (layout_ == Layout::ROW_MAJOR) return shape_;
  Shape padded = shape_;
  padded[-1] = round_up_to_tile(padded[-1]);
  if (padded.rank() >= 2) padded[-2] = round_up_to_tile(padded[-2]);
  return padded;
}

int64_t Tensor::num_tiles() const {
  MESHNN_CHECK(layout_ == Layout::TILE, "num_tiles() needs a TILE tensor, this one is {}", to_string(layout_));
  return tiles_of(matrix_view(shape_));
}

Tensor Tensor::from_float(std::span<const float> values, const Shape& shape, DataType dtype, Layout layout,
                          float pad_value) {
  MESHNN_CHECK(static_cast<int64_t>(values.size()) == shape.volume(),
               "from_float got {} values for shape {} ({} elements)", values.size(), shape, shape.volume());
  Tensor t(shape, dtype, layout);
  switch (dtype) {
    case DataType::FLOAT32:
      store_elements(values.data(), t, pad_value);
      break;
    case DataType::BFLOAT16: {
      std::vector<uint16_t> bits(values.size());
      float_to_bfloat16(values, bits);
      store_elements(bits.data(), t, float_to_bfloat16(pad_value));
      break;
    }
    case DataType::BFLOAT8_B:
    case DataType::BFLOAT4_B:
      store_block_float(values, t, pad_value);
      break;
    case DataType::INT32:
      store_elements(convert_all<int32_t>(values).data(), t, static_cast<int32_t>(pad_value));
      break;
    case DataType::UINT32:
      store_elements(convert_all<uint32_t>(values).data(), t, static_cast<uint32_t>(pad_value));
      break;
  }
  return t;
}

Tensor Tensor::from_int32(std::span<const int32_t> values, const Shape& shape, Layout layout) {
  MESHNN_CHECK(static_cast<int64_t>(values.size()) == shape.volume(), "from_int32 got {} values for shape {}",
               values.size(), shape);
  Tensor t(shape, DataType::INT32, layout);
  store_elements(values.data(), t, int32_t{0});
  return t;
}

Tensor Tensor::from_uint32(std::span<const uint32_t> values, const Shape& shape, Layout layout) {
  MESHNN_CHECK(static_cast<int64_t>(values.size()) == shape.volume(), "from_uint32 got {} values for shape {}",
               values.size(), shape);
  Tensor t(shape, DataType::UINT32, layout);
  store_elements(values.data(), t, uint32_t{0});
  return t;
}

std::vector<float> Tensor::to_float() const {
  switch (dtype_) {
    case DataType::FLOAT32:
      return load_elements<float>(*this);
    case DataType::BFLOAT16: {
      const std::vector<uint16_t> bits = load_elements<uint16_t>(*this);
      std::vector<float> out(bits.size());
      bfloat16_to_float(bits, out);
      return out;
    }
    case DataType::BFLOAT8_B:
    case DataType::BFLOAT4_B:
      return load_block_float(*this);
    case DataType::INT32:
      return convert_all<float, int32_t>(load_elements<int32_t>(*this));
    case DataType::UINT32:
      return convert_all<float, uint32_t>(load_elements<uint32_t>(*this));
  }
  return {};
}

std::vector<int32_t> Tensor::to_int32() const {
  MESHNN_CHECK(dtype_ == DataType::INT32, "to_int32() needs an int32 tensor, this one is {}", to_string(dtype_));
  return load_elements<int32_t>(*this);
}

std::vector<uint32_t> Tensor::to_uint32() const {
  MESHNN_CHECK(dtype_ == DataType::UINT32, "to_uint32() needs a uint32 tensor, this one is {}", to_string(dtype_));
  return load_elements<uint32_t>(*this);
}

Tensor Tensor::to_layout(Layout layout, float pad_value) const {
  if (layout == layout_) return *this;
  MESHNN_CHECK(!is_block_float(dtype_), "{} exists only in TILE layout; typecast before converting to {}",
               to_string(dtype_), to_string(layout));
  switch (dtype_) {
    case DataType::BFLOAT16:
      return relayout<uint16_t>(*this, layout, float_to_bfloat16(pad_value));
    case DataType::INT32:
      return relayout<int32_t>(*this, layout, static_cast<int32_t>(pad_value));
    case DataType::UINT32:
      return relayout<uint32_t>(*this, layout, static_cast<uint32_t>(pad_value));
    default:
      return relayout<float>(*this, layout, pad_value);
  }
}

Tensor Tensor::typecast(DataType dtype) const {
  if (dtype == dtype_) return *this;
  if (dtype_ == DataType::INT32 && dtype == DataType::UINT32) {
    const std::vector<int32_t> v = to_int32();
    return from_uint32(convert_all<uint32_t, int32_t>(v), shape_, layout_);
  }
  if (dtype_ == DataType::UINT32 && dtype == DataType::INT32) {
    const std::vector<uint32_t> v = to_uint32();
    return from_int32(convert_all<int32_t, uint32_t>(v), shape_, layout_);
  }
  MESHNN_CHECK(!(is_block_float(dtype) && layout_ == Layout::ROW_MAJOR),
               "typecast to {} needs a TILE tensor; this one is ROW_MAJOR (call to_layout(TILE) first)",
               to_string(dtype));
  // float32 and bfloat16 keep an element at the same position of their storage in either layout,
  // so a storage without padding converts element by element, with no trip through row-major
  // floats (a reduction's float32 output is typecast so at every distributed matmul). Padding
  // goes the general way, which rewrites it as zeros whatever it held; so does a TILE vector,
  // which is one padded row of tiles.
  const bool no_padding =
      layout_ == Layout::ROW_MAJOR || (shape_.rank() >= 2 && padded_shape() == shape_);
  if (no_padding && dtype_ == DataType::FLOAT32 && dtype == DataType::BFLOAT16) {
    Tensor out = uninitialized(shape_, dtype, layout_);
    const auto n = static_cast<size_t>(volume());
    float_to_bfloat16(std::span(data<float>(), n), std::span(out.data<uint16_t>(), n));
    return out;
  }
  if (no_padding && dtype_ == DataType::BFLOAT16 && dtype == DataType::FLOAT32) {
    Tensor out = uninitialized(shape_, dtype, layout_);
    const auto n = static_cast<size_t>(volume());
    bfloat16_to_float(std::span(data<uint16_t>(), n), std::span(out.data<float>(), n));
    return out;
  }
  return from_float(to_float(), shape_, dtype, layout_);
}

}  // namespace meshnn
