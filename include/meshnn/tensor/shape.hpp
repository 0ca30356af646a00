// A tensor shape: 1 to 8 dims of int64_t element counts (ttnn.Shape).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace meshnn {

inline constexpr int kMaxRank = 8;

class Shape {
 public:
  Shape() = default;
  // Throws meshnn::Error unless 1 <= rank <= 8 and every dim >= 0.
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int dim) const { return dims_.at(normalize_dim(dim)); }
  int64_t& operator[](int dim) { return dims_.at(normalize_dim(dim)); }
  int64_t volume() const;
  const std::vector<int64_t>& dims() const { return dims_; }

  // -1 means the last dim. Throws meshnn::Error("dim {dim} is out of range for a rank-{r} tensor").
  int normalize_dim(int dim) const;

  // Product of the dims before `dim` / after `dim` (dim normalised).
  int64_t outer_volume(int dim) const;
  int64_t inner_volume(int dim) const;

  std::string to_string() const;  // "[1, 1, 32, 4096]"
  bool operator==(const Shape&) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace meshnn

template <>
struct fmt::formatter<meshnn::Shape> : fmt::formatter<std::string> {
  auto format(const meshnn::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string>::format(s.to_string(), ctx);
  }
};
