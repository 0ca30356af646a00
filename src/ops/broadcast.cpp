#include "broadcast.hpp"

#include <fmt/ranges.h>

#include <algorithm>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/shape.hpp"

namespace meshnn::ops_detail {

namespace {
std::string dims_string(const std::vector<int64_t>& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }
}  // namespace

std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const char* what) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    MESHNN_CHECK(da == db || da == 1 || db == 1, "{}: dims {} and {} do not broadcast (dim {} is {} vs {})", what,
                 dims_string(a), dims_string(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

BroadcastIndex::BroadcastIndex(const std::vector<int64_t>& in, const std::vector<int64_t>& out)
    : out_dims_(out), in_strides_(out.size(), 0) {
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    const size_t o = i + (out.size() - in.size());
    in_strides_[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
}

int64_t BroadcastIndex::operator()(int64_t out_index) const {
  int64_t in_index = 0;
  for (size_t i = out_dims_.size(); i-- > 0;) {
    const int64_t coord = out_index % out_dims_[i];
    out_index /= out_dims_[i];
    in_index += coord * in_strides_[i];
  }
  return in_index;
}

int64_t volume(const std::vector<int64_t>& dims) {
  int64_t v = 1;
  for (int64_t d : dims) v *= d;
  return v;
}

}  // namespace meshnn::ops_detail
