#include "meshnn/tensor/storage_runs.hpp"

#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {

std::optional<Runs> slice_runs(const Shape& shape, Layout layout, int d, int n) {
  const int r = shape.rank();
  if (layout == Layout::ROW_MAJOR) return Runs{shape.outer_volume(d), shape[d] / n * shape.inner_volume(d)};
  if (r == 1) {
    const int64_t part = shape[0] / n;
    if (part % kTileWidth) return std::nullopt;
    return Runs{1, part * kTileHeight};
  }
  const int64_t hp = round_up_to_tile(shape[r - 2]), wp = round_up_to_tile(shape[r - 1]);
  int64_t batch = 1;
  for (int k = 0; k < r - 2; ++k) batch *= shape[k];
  if (d < r - 2) {
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < d; ++k) outer *= shape[k];
    for (int k = d + 1; k < r - 2; ++k) inner *= shape[k];
    return Runs{outer, shape[d] / n * inner * hp * wp};
  }
  const int64_t part = shape[d] / n;
  if (part % kTileWidth) return std::nullopt;
  if (d == r - 2) return Runs{batch, part * wp};
  return Runs{batch * (hp / kTileHeight), part * kTileHeight};
}

}  // namespace meshnn
