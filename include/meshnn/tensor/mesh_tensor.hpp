// MeshTensor: a tensor spread over a MeshDevice. It knows its global logical shape, dtype, layout
// and one placement per mesh axis; each rank holds only its own shard (local()).
//
// Sharding follows torch.chunk: a dim split over n devices gets chunks of ceil(size / n). When a
// dim is sharded on both mesh axes the split is over all rows*cols devices in row-major order
// (ShardTensorToMesh). If the mapper padded a non-divisible dim, the shards cover the padded size
// and shape() stays the logical one; composers drop the padding.
#pragma once

#include <memory>
#include <string>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/tensor/placement.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

class MeshTensor {
 public:
  MeshTensor() = default;
  // Wraps a local shard. Throws meshnn::Error if the placements don't fit the shape (bad dim,
  // a dim sharded twice) or local.shape() is not the shard shape they imply.
  MeshTensor(MeshDevicePtr mesh, Shape global_shape, Placements placements, Tensor local);

  const MeshDevicePtr& mesh() const { return mesh_; }
  MeshDevice& mesh_device() const { return *mesh_; }
  const Shape& shape() const { return global_shape_; }  // global logical shape
  const Placements& placements() const { return placements_; }
  const Placement& placement(int cluster_axis) const { return placements_.at(cluster_axis); }
  DataType dtype() const { return local_.dtype(); }
  Layout layout() const { return local_.layout(); }
  const Tensor& local() const { return local_; }
  Tensor& local() { return local_; }

  // Shard shape every device holds (same on all ranks), and whether it includes padding.
  Shape shard_shape() const { return local_.shape(); }
  bool is_padded() const;

  // "MeshTensor(shape=[..], dtype=bfloat16, layout=TILE, placements=[..])" plus a per-device
  // table of shard shapes and which dims are sharded/replicated on which axis. Same on every rank.
  std::string describe() const;

 private:
  MeshDevicePtr mesh_;
  Shape global_shape_;
  Placements placements_{Replicate{}, Replicate{}};
  Tensor local_;
};

// Placement arithmetic, pure and identical on every rank.
// How many devices split `dim` under `placements` on a mesh of `shape` (1 if not sharded).
int shard_count(const Placements& placements, MeshShape shape, int dim);
// Which chunk of `dim` the device at `coord` holds (row-major over the sharding axes).
int shard_index(const Placements& placements, MeshShape shape, MeshCoordinate coord, int dim);
// The shard shape: each sharded dim becomes ceil(size / count). Throws meshnn::Error when a dim
// does not divide and allow_padding is false ("cannot shard dim 3 of size 100 over 3 devices ...").
Shape shard_shape_for(const Shape& global, const Placements& placements, MeshShape shape, bool allow_padding);
// Normalises the Shard dims (negative -> positive) against a rank; throws meshnn::Error for a dim
// out of range or one tensor dim sharded by both axes with different meanings.
Placements normalize_placements(const Placements& placements, int rank);

}  // namespace meshnn
