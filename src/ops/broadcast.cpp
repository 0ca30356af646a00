#include "broadcast.hpp"

#include <fmt/ranges.h>

#include <algorithm>

#include "meshnn/core/error.hpp"

namespace meshnn::ops_detail {

namespace {
std::string dims_string(std::span<const int64_t> d) { return fmt::format("[{}]", fmt::join(d, ", ")); }
}  // namespace

Dims::Dims(std::span<const int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

void Dims::push_back(int64_t d) {
  MESHNN_CHECK(rank < kMaxRank, "more than {} dims", kMaxRank);
  values[static_cast<size_t>(rank++)] = d;
}

Dims broadcast_dims(std::span<const int64_t> a, std::span<const int64_t> b, const char* what) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    MESHNN_CHECK(da == db || da == 1 || db == 1, "{}: dims {} and {} do not broadcast (dim {} is {} vs {})", what,
                 dims_string(a), dims_string(b), i, da, db);
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

BroadcastIndex::BroadcastIndex(std::span<const int64_t> in, std::span<const int64_t> out) : out_dims_(out) {
  in_strides_.rank = out_dims_.rank;
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    const size_t o = i + (out.size() - in.size());
    in_strides_.values[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
}

int64_t BroadcastIndex::operator()(int64_t out_index) const {
  int64_t in_index = 0;
  for (int i = out_dims_.rank; i-- > 0;) {
    const auto u = static_cast<size_t>(i);
    const int64_t coord = out_index % out_dims_.values[u];
    out_index /= out_dims_.values[u];
    in_index += coord * in_strides_.values[u];
  }
  return in_index;
}

int64_t volume(std::span<const int64_t> dims) {
  int64_t v = 1;
  for (int64_t d : dims) v *= d;
  return v;
}

}  // namespace meshnn::ops_detail
