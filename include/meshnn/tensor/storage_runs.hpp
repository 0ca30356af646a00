// Where the n equal parts of a tensor along one dim lie in its storage. Collectives use it to send
// parts straight from a tensor and receive them straight into one when each part is one run of
// storage, and to pack and unpack them otherwise; the distributed matmul's cost model uses it to
// charge those local passes.
#pragma once

#include <optional>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// How the n parts of `shape` along d sit in storage, in storage elements (TILE: padded, 1024 per
// tile): `outer` repetitions of [part 0 run][part 1 run]...; nullopt when a part boundary cuts tiles.
struct Runs {
  int64_t outer, run;
};
std::optional<Runs> slice_runs(const Shape& shape, Layout layout, int d, int n);

// Whether each part is one run of storage, so that moving it needs no packing pass.
inline bool parts_are_contiguous(const Shape& shape, Layout layout, int d, int n) {
  const std::optional<Runs> runs = slice_runs(shape, layout, d, n);
  return runs && runs->outer == 1;
}

}  // namespace meshnn
