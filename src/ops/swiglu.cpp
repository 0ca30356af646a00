#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/kernels/row_kernels.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "op_utils.hpp"
#include "tile_rows.hpp"

namespace meshnn {

void swiglu_into(const Tensor& gate_up, int64_t half_width, int64_t width, DataType out_dtype, Tensor& out) {
  trace::Scope scope("op", "swiglu");
  if (scope.active()) scope.describe(fmt::format(R"("gate_up":"{}")", gate_up.shape()));
  const char* what = "swiglu";
  MESHNN_CHECK(&out != &gate_up, "{}: the output must not be gate_up", what);
  ops_detail::check_float(gate_up, what, "gate_up");
  const Shape& s = gate_up.shape();
  const bool by_rows =
      ops_detail::has_row_access(gate_up) && (out_dtype == DataType::FLOAT32 || out_dtype == DataType::BFLOAT16);
  MESHNN_CHECK(s.rank() >= 2 && (gate_up.layout() == Layout::TILE || by_rows),
               "{}: gate_up must be [..., M, W], TILE unless it and the output are float32 or bfloat16, got {} {} {}",
               what, s, to_string(gate_up.dtype()), to_string(gate_up.layout()));
  MESHNN_CHECK(half_width % 32 == 0 && width >= 0 && width <= half_width && s[-1] == 2 * half_width,
               "{}: gate_up width {} must be 2 x half_width {} (a multiple of 32) holding {} values each", what, s[-1],
               half_width, width);
  MESHNN_CHECK(out_dtype != DataType::INT32 && out_dtype != DataType::UINT32, "{}: output dtype must be a float, got {}",
               what, to_string(out_dtype));
  Shape dims = s;
  dims[-1] = width;
  const kernels::RowKernelSet& rk = kernels::row_kernel_set();
  if (by_rows) {
    // Row by row: a decode step's one row per tile, without decoding or encoding whole tiles.
    out.reset(dims, out_dtype, Layout::TILE);
    const int64_t rows = gate_up.volume() / s[-1];
    ops_detail::run_rows(rows, s[-1], [&](int64_t begin, int64_t end, int) {
      ScratchScope scratch;
      float* in = scratch.acquire_as<float>(static_cast<size_t>(s[-1]));
      float* result = scratch.acquire_as<float>(static_cast<size_t>(width));
      for (int64_t row = begin; row < end; ++row) {
        ops_detail::read_row(gate_up, row, in);
        rk.silu_mul(in, in + half_width, result, width);
        ops_detail::write_row(out, row, result);
      }
    });
    return;
  }
  out.reset(dims, out_dtype, Layout::TILE);
  const int64_t height = s[-2], tiles_per_column = round_up_to_tile(height) / 32;
  const int64_t tile_rows = matrix_view(s).batch * tiles_per_column;
  const int64_t in_cols = 2 * half_width / 32, out_cols = round_up_to_tile(width) / 32;
  const size_t in_bytes = tile_bytes(gate_up.dtype()), out_bytes = tile_bytes(out_dtype);
  ops_detail::run_parallel(tile_rows * out_cols, [&](int64_t begin, int64_t end, int) {
    float gate[kTileVolume], up[kTileVolume];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = t / out_cols, col = t % out_cols;
      const std::byte* in = gate_up.data<std::byte>();
      ops_detail::tile_to_faces(in + static_cast<size_t>(row * in_cols + col) * in_bytes, gate_up.dtype(), gate);
      ops_detail::tile_to_faces(in + static_cast<size_t>(row * in_cols + half_width / 32 + col) * in_bytes,
                                gate_up.dtype(), up);
      // The whole tile in one vector loop, then padding rows and columns past `width` written as
      // 0 (decode steps, one valid row in 32, take the row path above unless gate_up is block-float).
      const int64_t valid_rows = std::min<int64_t>(32, height - (row % tiles_per_column) * 32);
      const int64_t valid_cols = col == out_cols - 1 && width % 32 != 0 ? width % 32 : 32;
      rk.silu_mul(gate, up, gate, kTileVolume);
      if (valid_rows < 32 || valid_cols < 32)
        for (int64_t r = 0; r < 32; ++r)
          for (int64_t c = 0; c < 32; ++c)
            if (r >= valid_rows || c >= valid_cols) gate[tile_element_index(r, c)] = 0.0f;
      ops_detail::faces_to_tile(gate, out_dtype, out.data<std::byte>() + static_cast<size_t>(t) * out_bytes);
    }
  });
}

Tensor swiglu(const Tensor& gate_up, int64_t half_width, int64_t width, DataType out_dtype) {
  Tensor out;
  swiglu_into(gate_up, half_width, width, out_dtype, out);
  return out;
}

}  // namespace meshnn
