// Numpy-style broadcasting of leading dims (internal to src/ops). Dims are held inline, not in
// heap vectors: a decode step calls the ops that use them hundreds of times.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "meshnn/tensor/shape.hpp"

namespace meshnn::ops_detail {

// Up to kMaxRank dims (rank 0 allowed: no batch dims).
struct Dims {
  std::array<int64_t, kMaxRank> values{};
  int rank = 0;
  Dims() = default;
  explicit Dims(std::span<const int64_t> dims);
  std::span<const int64_t> span() const { return {values.data(), static_cast<size_t>(rank)}; }
  void push_back(int64_t d);  // throws meshnn::Error beyond kMaxRank
};

// Aligns from the right; each pair must be equal or one of them 1. Throws meshnn::Error with both
// shapes (what: the op name) otherwise.
Dims broadcast_dims(std::span<const int64_t> a, std::span<const int64_t> b, const char* what);

// Maps a linear index over `out` dims to the linear index over `in` (right-aligned, dims of 1
// repeat). in.size() <= out.size().
class BroadcastIndex {
 public:
  BroadcastIndex(std::span<const int64_t> in, std::span<const int64_t> out);
  int64_t operator()(int64_t out_index) const;

 private:
  Dims out_dims_, in_strides_;  // in_strides_ 0 where broadcast
};

int64_t volume(std::span<const int64_t> dims);

}  // namespace meshnn::ops_detail
