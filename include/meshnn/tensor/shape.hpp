// A tensor shape: 1 to 8 dims of int64_t element counts (ttnn.Shape).
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace meshnn {

inline constexpr int kMaxRank = 8;

class Shape {
 public:
  Shape() = default;  // rank 0: a placeholder until a real shape is assigned
  // Throws meshnn::Error unless 1 <= rank <= 8 and every dim >= 0.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int rank() const { return rank_; }
  int64_t operator[](int dim) const { return dims_[static_cast<size_t>(normalize_dim(dim))]; }
  int64_t& operator[](int dim) { return dims_[static_cast<size_t>(normalize_dim(dim))]; }
  int64_t volume() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }

  // -1 means the last dim. Throws meshnn::Error("dim {dim} is out of range for a rank-{r} tensor").
  int normalize_dim(int dim) const;

  // Product of the dims before `dim` / after `dim` (dim normalised).
  int64_t outer_volume(int dim) const;
  int64_t inner_volume(int dim) const;

  std::string to_string() const;  // "[1, 1, 32, 4096]"
  bool operator==(const Shape&) const = default;  // dims past the rank are always 0

 private:
  // Inline rather than a heap vector: shapes are copied by every op and collective call, and a
  // heap allocation per copy is a measurable share of a small collective
  // (docs/design-measurements.md §10).
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace meshnn

template <>
struct fmt::formatter<meshnn::Shape> : fmt::formatter<std::string> {
  auto format(const meshnn::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};
