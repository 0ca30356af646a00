#include "meshnn/tensor/shape.hpp"

#include <fmt/ranges.h>

#include <algorithm>

#include "meshnn/core/error.hpp"

namespace meshnn {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  MESHNN_CHECK(!dims.empty() && dims.size() <= static_cast<size_t>(kMaxRank),
               "a tensor shape needs 1 to {} dims, got {}", kMaxRank, dims.size());
  for (int64_t d : dims) MESHNN_CHECK(d >= 0, "shape {} has a negative dim", fmt::format("[{}]", fmt::join(dims, ", ")));
  std::copy(dims.begin(), dims.end(), dims_.begin());
  rank_ = static_cast<int>(dims.size());
}

int64_t Shape::volume() const {
  int64_t v = 1;
  for (int64_t d : dims()) v *= d;
  return v;
}

int Shape::normalize_dim(int dim) const {
  const int r = rank();
  MESHNN_CHECK(dim >= -r && dim < r, "dim {} is out of range for a rank-{} tensor of shape {}", dim, r, to_string());
  return dim < 0 ? dim + r : dim;
}

int64_t Shape::outer_volume(int dim) const {
  const int d = normalize_dim(dim);
  int64_t v = 1;
  for (int i = 0; i < d; ++i) v *= dims_[i];
  return v;
}

int64_t Shape::inner_volume(int dim) const {
  const int d = normalize_dim(dim);
  int64_t v = 1;
  for (int i = d + 1; i < rank(); ++i) v *= dims_[i];
  return v;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

}  // namespace meshnn
