#include "meshnn/ops/eltwise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "broadcast.hpp"
#include "meshnn/ops/matmul.hpp"
#include "op_utils.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "tile_rows.hpp"

namespace meshnn {

namespace {

using ops_detail::check_float;

Tensor unary(const Tensor& x, Activation activation, const char* what) {
  check_float(x, what, "x");
  std::vector<float> v = x.to_float();
  for (float& e : v) e = apply_activation(activation, e);
  return ops_detail::like(v, x.shape(), x);
}

template <class Op>
void binary(const Tensor& a, const Tensor& b, Op op, const char* what, Tensor& out) {
  check_float(a, what, "a");
  check_float(b, what, "b");
  if (a.shape() == b.shape() && ops_detail::has_row_access(a) && ops_detail::has_row_access(b) && a.volume() > 0) {
    // Same shapes: row by row in the stored layouts (a residual add of a decode step touches one
    // row of each 32-row tile). A row of a and b is read whole before out's row is written.
    MESHNN_CHECK(&out != &b || (a.dtype() == b.dtype() && a.layout() == b.layout()),
                 "{}: output may be b only when a and b have the same dtype and layout", what);
    out.reset(a.shape(), a.dtype(), a.layout());
    const int64_t w = a.shape()[-1];
    const auto by_row = [&](int64_t row) {
      ScratchScope scratch;
      float* x = scratch.acquire_as<float>(static_cast<size_t>(w));
      float* y = scratch.acquire_as<float>(static_cast<size_t>(w));
      ops_detail::read_row(a, row, x);
      ops_detail::read_row(b, row, y);
      for (int64_t i = 0; i < w; ++i) x[i] = op(x[i], y[i]);
      ops_detail::write_row(out, row, x);
    };
    if (!ops_detail::whole_tile_rows(a) || !ops_detail::whole_tile_rows(b)) {
      ops_detail::run_rows(a.volume() / w, w, [&](int64_t begin, int64_t end, int) {
        for (int64_t row = begin; row < end; ++row) by_row(row);
      });
      return;
    }
    // Whole tiles at once where all 32 rows are real (a prefill's rows): converting a row's
    // 16-value runs one call each took longer than the op. Element by element, so in the tiles'
    // own order.
    const int64_t tile_cols = w / 32;
    const size_t a_bytes = tile_bytes(a.dtype()), b_bytes = tile_bytes(b.dtype()), out_bytes = tile_bytes(out.dtype());
    const auto by_tile_row = [&](int64_t item) {
      alignas(64) float x[kTileVolume], y[kTileVolume];
      for (int64_t t = item * tile_cols; t < (item + 1) * tile_cols; ++t) {
        const auto i = static_cast<size_t>(t);
        ops_detail::tile_to_faces(a.data<std::byte>() + i * a_bytes, a.dtype(), x);
        ops_detail::tile_to_faces(b.data<std::byte>() + i * b_bytes, b.dtype(), y);
        for (int64_t e = 0; e < kTileVolume; ++e) x[e] = op(x[e], y[e]);
        ops_detail::faces_to_tile(x, out.dtype(), out.data<std::byte>() + i * out_bytes);
      }
    };
    ops_detail::for_tile_rows(a.shape(), by_tile_row, by_row);
    return;
  }
  const ops_detail::Dims broadcast = ops_detail::broadcast_dims(a.shape().dims(), b.shape().dims(), what);
  const std::span<const int64_t> out_dims = broadcast.span();
  const std::vector<float> av = a.to_float(), bv = b.to_float();
  std::vector<float> values(static_cast<size_t>(ops_detail::volume(out_dims)));
  if (std::ranges::equal(a.shape().dims(), out_dims) && std::ranges::equal(b.shape().dims(), out_dims)) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = op(av[i], bv[i]);
  } else {
    const ops_detail::BroadcastIndex ai(a.shape().dims(), out_dims), bi(b.shape().dims(), out_dims);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = op(av[ai(static_cast<int64_t>(i))], bv[bi(static_cast<int64_t>(i))]);
  }
  out = ops_detail::like(values, Shape(out_dims), a);
}

template <class Op>
Tensor binary(const Tensor& a, const Tensor& b, Op op, const char* what) {
  Tensor out;
  binary(a, b, op, what, out);
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, bool approximate) {
  return unary(x, approximate ? Activation::GELU_TANH : Activation::GELU, "gelu");
}
Tensor silu(const Tensor& x) { return unary(x, Activation::SILU, "silu"); }
Tensor relu(const Tensor& x) { return unary(x, Activation::RELU, "relu"); }

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(
      a, b, [](float x, float y) { return x + y; }, "add");
}
void add_into(const Tensor& a, const Tensor& b, Tensor& output) {
  trace::Scope scope("op", "add");
  if (scope.active()) scope.describe(fmt::format(R"("a":"{}")", a.shape()));
  binary(
      a, b, [](float x, float y) { return x + y; }, "add", output);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(
      a, b, [](float x, float y) { return x - y; }, "sub");
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(
      a, b, [](float x, float y) { return x * y; }, "mul");
}

Tensor typecast(const Tensor& x, DataType dtype) {
  MESHNN_CHECK(!is_block_float(dtype) || x.layout() == Layout::TILE, "typecast: {} needs TILE layout, the tensor is {}",
               to_string(dtype), to_string(x.layout()));
  return x.typecast(dtype);
}

}  // namespace meshnn
