#include "meshnn/tensor/mesh_tensor.hpp"

#include <fmt/format.h>

#include "meshnn/core/error.hpp"

namespace meshnn {
namespace {

int axis_size(MeshShape shape, int axis) { return axis == 0 ? shape.rows : shape.cols; }

bool shards_dim(const Placement& p, int dim) {
  const auto* s = std::get_if<Shard>(&p);
  return s != nullptr && s->dim == dim;
}

}  // namespace

Placements normalize_placements(const Placements& placements, int rank) {
  Placements out = placements;
  for (Placement& p : out) {
    if (auto* s = std::get_if<Shard>(&p)) {
      MESHNN_CHECK(s->dim >= -rank && s->dim < rank, "Shard({}) is out of range for a rank-{} tensor", s->dim, rank);
      if (s->dim < 0) s->dim += rank;
    }
  }
  return out;
}

int shard_count(const Placements& placements, MeshShape shape, int dim) {
  int count = 1;
  for (int axis = 0; axis < 2; ++axis)
    if (shards_dim(placements[axis], dim)) count *= axis_size(shape, axis);
  return count;
}

int shard_index(const Placements& placements, MeshShape shape, MeshCoordinate coord, int dim) {
  // Axis 0 is the outer split: a dim sharded on both axes is split row-major over the devices.
  const bool by_rows = shards_dim(placements[0], dim);
  const bool by_cols = shards_dim(placements[1], dim);
  if (by_rows && by_cols) return coord.row * shape.cols + coord.col;
  if (by_rows) return coord.row;
  if (by_cols) return coord.col;
  return 0;
}

Shape shard_shape_for(const Shape& global, const Placements& placements, MeshShape shape, bool allow_padding) {
  const Placements ps = normalize_placements(placements, global.rank());
  Shape dims = global;
  for (int d = 0; d < global.rank(); ++d) {
    const int count = shard_count(ps, shape, d);
    if (count == 1) continue;
    const int64_t size = global[d];
    const int64_t chunk = (size + count - 1) / count;
    MESHNN_CHECK(allow_padding || size % count == 0,
                 "cannot shard dim {} of size {} (tensor shape {}) evenly over {} devices of the {} mesh; "
                 "ask for padding to pad it to {}",
                 d, size, global, count, shape.to_string(), chunk * count);
    dims[d] = chunk;
  }
  return dims;
}

MeshTensor::MeshTensor(MeshDevicePtr mesh, Shape global_shape, Placements placements, Tensor local)
    : mesh_(std::move(mesh)), global_shape_(std::move(global_shape)), local_(std::move(local)) {
  MESHNN_CHECK(mesh_ != nullptr, "a MeshTensor needs an open MeshDevice");
  placements_ = normalize_placements(placements, global_shape_.rank());
  const Shape expected = shard_shape_for(global_shape_, placements_, mesh_->shape(), /*allow_padding=*/true);
  MESHNN_CHECK(local_.shape() == expected,
               "local shard of shape {} does not match placements {} of a {} tensor on a {} mesh (expected {})",
               local_.shape(), to_string(placements_), global_shape_, mesh_->shape().to_string(), expected);
}

bool MeshTensor::is_padded() const {
  const Shape& shard = local_.shape();
  const MeshShape mesh_shape = mesh_->shape();
  for (int d = 0; d < global_shape_.rank(); ++d)
    if (shard[d] * shard_count(placements_, mesh_shape, d) != global_shape_[d]) return true;
  return false;
}

std::string MeshTensor::describe() const {
  const MeshShape ms = mesh_->shape();
  std::string out = fmt::format("MeshTensor(shape={}, dtype={}, layout={}, placements={})\n", global_shape_,
                                to_string(dtype()), to_string(layout()), to_string(placements_));
  for (int axis = 0; axis < 2; ++axis) {
    const char* axis_name = axis == 0 ? "mesh axis 0 (rows)" : "mesh axis 1 (cols)";
    if (const auto* s = std::get_if<Shard>(&placements_[axis]))
      out += fmt::format("  {}: dim {} sharded over {} devices\n", axis_name, s->dim, axis_size(ms, axis));
    else if (const auto* p = std::get_if<Partial>(&placements_[axis]))
      out += fmt::format("  {}: partial {} awaiting a reduction\n", axis_name, to_string(p->op));
    else
      out += fmt::format("  {}: replicated\n", axis_name);
  }
  if (is_padded()) out += "  (shards include padding that composers drop)\n";
  const Shape shard = shard_shape();
  out += draw_mesh_table(ms, "Shards:", [&](int id) {
    return std::vector<std::string>{fmt::format("Dev. ID: {}", id), mesh_->coordinate_of(id).to_string(),
                                    shard.to_string()};
  });
  return out;
}

}  // namespace meshnn
