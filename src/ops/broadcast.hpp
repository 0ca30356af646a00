// Numpy-style broadcasting of leading dims (internal to src/ops).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshnn::ops_detail {

// Aligns from the right; each pair must be equal or one of them 1. Throws meshnn::Error with both
// shapes (what: the op name) otherwise.
std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* what);

// Maps a linear index over `out` dims to the linear index over `in` (right-aligned, dims of 1
// repeat). in.size() <= out.size().
class BroadcastIndex {
 public:
  BroadcastIndex(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
  int64_t operator()(int64_t out_index) const;

 private:
  std::vector<int64_t> out_dims_, in_strides_;  // in_strides_ 0 where broadcast
};

int64_t volume(const std::vector<int64_t>& dims);

}  // namespace meshnn::ops_detail
