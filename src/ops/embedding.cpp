#include "meshnn/ops/embedding.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "op_utils.hpp"
#include "tile_rows.hpp"

namespace meshnn {

void embedding_into(const Tensor& ids, const Tensor& table, Tensor& output, std::optional<DataType> dtype,
                    Layout layout) {
  trace::Scope scope("op", "embedding");
  if (scope.active()) scope.describe(fmt::format(R"("ids":"{}")", ids.shape()));
  MESHNN_CHECK(ids.dtype() == DataType::UINT32, "embedding: ids must be uint32, got {}", to_string(ids.dtype()));
  MESHNN_CHECK(table.shape().rank() == 2, "embedding: table must be [vocab, dim], got {}", table.shape());
  MESHNN_CHECK(ids.shape().rank() < kMaxRank, "embedding: ids of rank {} leave no room for the embedding dim",
               ids.shape().rank());
  ops_detail::check_float(table, "embedding", "table");
  MESHNN_CHECK(&output != &ids && &output != &table, "embedding: the output must be a tensor of its own");
  const DataType out_dtype = dtype.value_or(table.dtype());
  MESHNN_CHECK(!is_block_float(out_dtype) || layout == Layout::TILE, "embedding: {} output needs TILE layout",
               to_string(out_dtype));
  const int64_t vocab = table.shape()[0], d = table.shape()[1], count = ids.volume();
  std::vector<uint32_t> converted;
  if (ids.layout() != Layout::ROW_MAJOR) converted = ids.to_uint32();
  const uint32_t* id = ids.layout() == Layout::ROW_MAJOR ? ids.data<uint32_t>() : converted.data();
  for (int64_t i = 0; i < count; ++i)
    MESHNN_CHECK(id[i] < vocab, "embedding: id {} at index {} is out of range for a vocabulary of {}", id[i], i, vocab);
  std::array<int64_t, kMaxRank> dims{};
  std::copy(ids.shape().dims().begin(), ids.shape().dims().end(), dims.begin());
  dims[static_cast<size_t>(ids.shape().rank())] = d;
  const Shape out_shape(std::span<const int64_t>(dims.data(), static_cast<size_t>(ids.shape().rank() + 1)));

  // Only the rows looked up are decoded: a decode step reads one row of a 32000-row table.
  auto table_row = [&](int64_t i, float* dst) {
    if (table.dtype() == DataType::BFLOAT16) {
      const uint16_t* src = table.data<uint16_t>() + static_cast<int64_t>(id[i]) * d;
      for (int64_t j = 0; j < d; ++j) dst[j] = bfloat16_to_float(src[j]);
    } else {
      std::copy_n(table.data<float>() + static_cast<int64_t>(id[i]) * d, d, dst);
    }
  };
  if (table.layout() == Layout::ROW_MAJOR && (out_dtype == DataType::FLOAT32 || out_dtype == DataType::BFLOAT16)) {
    // Straight into the output's rows (its tile padding is left as the storage held it).
    output.reset(out_shape, out_dtype, layout);
    ScratchScope scratch;
    float* row = scratch.acquire_as<float>(static_cast<size_t>(d));
    for (int64_t i = 0; i < count; ++i) {
      table_row(i, row);
      ops_detail::write_row(output, i, row);
    }
    return;
  }
  std::vector<float> out(static_cast<size_t>(count * d));
  if (table.layout() == Layout::ROW_MAJOR) {
    for (int64_t i = 0; i < count; ++i) table_row(i, out.data() + i * d);
  } else {
    const std::vector<float> t = table.to_float();
    for (int64_t i = 0; i < count; ++i) std::copy(t.begin() + id[i] * d, t.begin() + (id[i] + 1) * d, out.begin() + i * d);
  }
  output = Tensor::from_float(out, out_shape, out_dtype, layout);
}

Tensor embedding(const Tensor& ids, const Tensor& table, std::optional<DataType> dtype, Layout layout) {
  Tensor out;
  embedding_into(ids, table, out, dtype, layout);
  return out;
}

RotaryTables make_rotary_tables(int64_t head_dim, int64_t max_positions, double theta) {
  MESHNN_CHECK(head_dim > 0 && head_dim % 2 == 0, "make_rotary_tables: head_dim must be even and > 0, got {}",
               head_dim);
  std::vector<double> inverse_frequencies(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inverse_frequencies[static_cast<size_t>(i)] = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
  return make_rotary_tables(inverse_frequencies, max_positions);
}

RotaryTables make_rotary_tables(std::span<const double> inverse_frequencies, int64_t max_positions, double scale) {
  MESHNN_CHECK(!inverse_frequencies.empty(), "make_rotary_tables: no inverse frequencies given");
  MESHNN_CHECK(max_positions > 0, "make_rotary_tables: max_positions must be > 0, got {}", max_positions);
  MESHNN_CHECK(std::isfinite(scale) && scale > 0, "make_rotary_tables: scale must be a positive number, got {}", scale);
  const int64_t half = static_cast<int64_t>(inverse_frequencies.size()), head_dim = 2 * half;
  std::vector<float> c(max_positions * head_dim), s(max_positions * head_dim);
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inverse_frequencies[static_cast<size_t>(i)];
      c[p * head_dim + i] = c[p * head_dim + half + i] = static_cast<float>(scale * std::cos(angle));
      s[p * head_dim + i] = s[p * head_dim + half + i] = static_cast<float>(scale * std::sin(angle));
    }
  const Shape shape{max_positions, head_dim};
  return {Tensor::from_float(c, shape, DataType::FLOAT32, Layout::ROW_MAJOR),
          Tensor::from_float(s, shape, DataType::FLOAT32, Layout::ROW_MAJOR)};
}

namespace {

// Rotates each row of x (rows of D) whose position is position_of(row).
template <class PositionOf>
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, PositionOf position_of, const char* what) {
  ops_detail::check_float(x, what, "x");
  MESHNN_CHECK(cos.shape().rank() == 2 && cos.shape() == sin.shape(),
               "{}: cos and sin must both be [positions, head_dim], got {} and {}", what, cos.shape(), sin.shape());
  const int64_t d = x.shape()[-1], max_pos = cos.shape()[0];
  MESHNN_CHECK(d % 2 == 0 && cos.shape()[1] == d, "{}: head_dim {} must be even and match the tables' {}", what, d,
               cos.shape()[1]);
  const std::vector<float> c = cos.to_float(), s = sin.to_float();
  std::vector<float> v = x.to_float();
  const int64_t half = d / 2;
  std::vector<float> row(d);
  for (int64_t r = 0; d > 0 && r < static_cast<int64_t>(v.size()) / d; ++r) {
    const int64_t p = position_of(r);
    MESHNN_CHECK(p >= 0 && p < max_pos, "{}: position {} is outside the tables' [0, {})", what, p, max_pos);
    float* xr = v.data() + r * d;
    std::copy(xr, xr + d, row.begin());
    const float* cr = c.data() + p * d;
    const float* sr = s.data() + p * d;
    for (int64_t i = 0; i < half; ++i) {
      xr[i] = row[i] * cr[i] - row[i + half] * sr[i];
      xr[i + half] = row[i + half] * cr[i + half] + row[i] * sr[i + half];
    }
  }
  return ops_detail::like(v, x.shape(), x);
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t position_offset) {
  MESHNN_CHECK(x.shape().rank() >= 2, "rotary_embedding: x must be [..., S, D], got {}", x.shape());
  const int64_t seq = x.shape()[-2];
  MESHNN_CHECK(position_offset >= 0, "rotary_embedding: position_offset must be >= 0, got {}", position_offset);
  return rotate(
      x, cos, sin, [&](int64_t row) { return position_offset + row % seq; }, "rotary_embedding");
}

Tensor rotary_embedding_decode(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               std::span<const int64_t> positions) {
  MESHNN_CHECK(x.shape().rank() == 4 && x.shape()[0] == 1, "rotary_embedding_decode: x must be [1, B, H, D], got {}",
               x.shape());
  const int64_t users = x.shape()[1], heads = x.shape()[2];
  MESHNN_CHECK(static_cast<int64_t>(positions.size()) == users,
               "rotary_embedding_decode: {} positions given for {} users", positions.size(), users);
  return rotate(
      x, cos, sin, [&](int64_t row) { return positions[row / heads]; }, "rotary_embedding_decode");
}

}  // namespace meshnn
