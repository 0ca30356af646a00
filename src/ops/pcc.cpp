#include "meshnn/ops/pcc.hpp"

#include <cmath>
#include <vector>

#include "meshnn/core/error.hpp"

namespace meshnn {

namespace {

bool all_nan(std::span<const float> v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return true;
}

// TT-NN zeroes NaN and inf before the remaining checks (torch.nan_to_num-like with 0 for inf).
std::vector<double> cleaned(std::span<const float> v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::isfinite(v[i]) ? static_cast<double>(v[i]) : 0.0;
  return out;
}

// On the raw values, before NaN/inf are zeroed (a NaN or inf counts as non-zero, as in TT-NN's
// torch.any(x.bool()) test).
bool all_zero(std::span<const float> v) {
  for (float x : v)
    if (x != 0.0f) return false;
  return true;
}

}  // namespace

double pcc(std::span<const float> reference, std::span<const float> result) {
  MESHNN_CHECK(reference.size() == result.size(), "pcc: reference has {} values, result has {}", reference.size(),
               result.size());
  const bool ref_nan = all_nan(reference), res_nan = all_nan(result);
  if (ref_nan && res_nan) return 1.0;
  if (ref_nan != res_nan) return 0.0;

  if (all_zero(reference) != all_zero(result)) return 0.0;
  const std::vector<double> a = cleaned(reference), b = cleaned(result);
  if (a == b) return 1.0;

  const double n = static_cast<double>(a.size());
  double mean_a = 0, mean_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    mean_a += a[i];
    mean_b += b[i];
  }
  mean_a /= n;
  mean_b /= n;
  // Two-pass: subtracting the means first keeps the float64 sums accurate for offset data.
  double cov = 0, var_a = 0, var_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double da = a[i] - mean_a, db = b[i] - mean_b;
    cov += da * db;
    var_a += da * da;
    var_b += db * db;
  }
  // Both constant but unequal (equal returned above) -> 0. One constant, one not: the correlation
  // is undefined; 0 ("not correlated") rather than NaN so that threshold checks fail safely.
  if (var_a == 0.0 || var_b == 0.0) return 0.0;
  const double r = cov / std::sqrt(var_a * var_b);
  return std::fmax(-1.0, std::fmin(1.0, r));
}

double pcc(const Tensor& reference, const Tensor& result) {
  MESHNN_CHECK(reference.shape() == result.shape(), "pcc: reference shape {} differs from result shape {}",
               reference.shape(), result.shape());
  const std::vector<float> a = reference.to_float(), b = result.to_float();
  return pcc(a, b);
}

}  // namespace meshnn
