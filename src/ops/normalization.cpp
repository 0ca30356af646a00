#include "meshnn/ops/normalization.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "op_utils.hpp"
#include "tile_rows.hpp"

namespace meshnn {

namespace {

// x (+ residual) as row-major values with rows of the last dim.
std::vector<float> input_rows(const Tensor& x, const Tensor* residual, const char* what) {
  ops_detail::check_float(x, what, "x");
  std::vector<float> h = x.to_float();
  if (residual != nullptr) {
    MESHNN_CHECK(residual->shape() == x.shape(), "{}: residual shape {} differs from x shape {}", what,
                 residual->shape(), x.shape());
    ops_detail::check_float(*residual, what, "residual");
    const std::vector<float> r = residual->to_float();
    for (size_t i = 0; i < h.size(); ++i) h[i] += r[i];
  }
  return h;
}

}  // namespace

namespace {

void rms_norm_row(float* r, int64_t w, float eps, const float* g) {
  // Eight partial sums: one chain of dependent double additions would take its latency per element.
  double partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= w; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += static_cast<double>(r[i + j]) * r[i + j];
  for (; i < w; ++i) partial[0] += static_cast<double>(r[i]) * r[i];
  const double sq = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                    ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  const double inv = 1.0 / std::sqrt(sq / w + eps);
  for (i = 0; i < w; ++i) r[i] = static_cast<float>(r[i] * inv * g[i]);
}

}  // namespace

void rms_norm_into(const Tensor& x, float eps, const Tensor* weight, Tensor& output, const Tensor* residual) {
  trace::Scope scope("op", "rms_norm");
  if (scope.active()) scope.describe(fmt::format(R"("x":"{}")", x.shape()));
  const int64_t w = x.shape().rank() > 0 ? x.shape()[-1] : 1;
  if (ops_detail::has_row_access(x) && (residual == nullptr || ops_detail::has_row_access(*residual)) &&
      (residual == nullptr || residual->shape() == x.shape()) && w > 0) {
    const float* g = ops_detail::channel_pointer(weight, w, 1.0f, "rms_norm", "weight");
    // Row by row in the stored layout: a decode step normalises 1 row of a 32-row tile. Each row is
    // read whole before it is written, so output may be x.
    output.reset(x.shape(), x.dtype(), x.layout());
    const int64_t rows = x.volume() / w;
    const auto normalise = [&](int64_t begin, int64_t end, int) {
      ScratchScope scratch;
      float* h = scratch.acquire_as<float>(static_cast<size_t>(w));
      float* r = scratch.acquire_as<float>(static_cast<size_t>(w));
      for (int64_t row = begin; row < end; ++row) {
        ops_detail::read_row(x, row, h);
        if (residual != nullptr) {
          ops_detail::read_row(*residual, row, r);
          for (int64_t i = 0; i < w; ++i) h[i] += r[i];
        }
        rms_norm_row(h, w, eps, g);
        ops_detail::write_row(output, row, h);
      }
    };
    ops_detail::run_rows(rows, w, normalise);
    return;
  }
  const std::vector<float> g = ops_detail::channel_values(weight, w, 1.0f, "rms_norm", "weight");
  std::vector<float> h = input_rows(x, residual, "rms_norm");
  for (size_t row = 0; w > 0 && row < h.size() / w; ++row) rms_norm_row(h.data() + row * w, w, eps, g.data());
  output = ops_detail::like(h, x.shape(), x);
}

Tensor rms_norm(const Tensor& x, float eps, const Tensor* weight, const Tensor* residual) {
  Tensor out;
  rms_norm_into(x, eps, weight, out, residual);
  return out;
}

void rms_norm_heads_in_place(Tensor& x, int64_t first_column, int64_t heads, const Tensor& weight, float eps) {
  trace::Scope scope("op", "rms_norm_heads");
  const int64_t w = x.shape().rank() > 0 ? x.shape()[-1] : 0, d = weight.volume();
  MESHNN_CHECK(ops_detail::has_row_access(x), "rms_norm_heads: x must be float32 or bfloat16, got {}",
               to_string(x.dtype()));
  MESHNN_CHECK(d > 0 && heads >= 0 && first_column >= 0 && first_column + heads * d <= w,
               "rms_norm_heads: {} heads of {} columns from column {} do not fit a last dim of {}", heads, d,
               first_column, w);
  if (heads == 0) return;
  const float* g = ops_detail::channel_pointer(&weight, d, 1.0f, "rms_norm_heads", "weight");
  const int64_t rows = x.volume() / w;
  const auto normalise = [&](int64_t begin, int64_t end, int) {
    ScratchScope scratch;
    float* h = scratch.acquire_as<float>(static_cast<size_t>(w));
    for (int64_t row = begin; row < end; ++row) {
      ops_detail::read_row(x, row, h);
      for (int64_t head = 0; head < heads; ++head) rms_norm_row(h + first_column + head * d, d, eps, g);
      ops_detail::write_row(x, row, h);
    }
  };
  ops_detail::run_rows(rows, w, normalise);
}

Tensor layer_norm(const Tensor& x, float eps, const Tensor* weight, const Tensor* bias, const Tensor* residual) {
  std::vector<float> h = input_rows(x, residual, "layer_norm");
  const int64_t w = x.shape()[-1];
  const std::vector<float> g = ops_detail::channel_values(weight, w, 1.0f, "layer_norm", "weight");
  const std::vector<float> b = ops_detail::channel_values(bias, w, 0.0f, "layer_norm", "bias");
  for (size_t row = 0; w > 0 && row < h.size() / w; ++row) {
    float* r = h.data() + row * w;
    double mean = 0;
    for (int64_t i = 0; i < w; ++i) mean += r[i];
    mean /= w;
    // Two passes: the variance of (x - mean) avoids cancellation for offset rows.
    double var = 0;
    for (int64_t i = 0; i < w; ++i) var += (r[i] - mean) * (r[i] - mean);
    var /= w;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < w; ++i) r[i] = static_cast<float>((r[i] - mean) * inv * g[i] + b[i]);
  }
  return ops_detail::like(h, x.shape(), x);
}

Tensor softmax(const Tensor& x, int dim) {
  ops_detail::check_float(x, "softmax", "x");
  const int d = x.shape().normalize_dim(dim);
  const int64_t n = x.shape()[d], inner = x.shape().inner_volume(d), outer = x.shape().outer_volume(d);
  std::vector<float> v = x.to_float();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      float* base = v.data() + o * n * inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, base[i * inner]);
      // All -inf: exp(-inf - -inf) = NaN, as torch.
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float e = std::exp(base[i * inner] - mx);
        base[i * inner] = e;
        sum += e;
      }
      const double inv = 1.0 / sum;
      for (int64_t i = 0; i < n; ++i) base[i * inner] = static_cast<float>(base[i * inner] * inv);
    }
  return ops_detail::like(v, x.shape(), x);
}

}  // namespace meshnn
