// Mappers (host tensor -> mesh tensor) and composers (mesh tensor -> host tensor), as TT-NN names
// them: ReplicateTensorToMesh, ShardTensorToMesh, ShardTensor2dMesh and the general
// MeshMapperConfig; ConcatMeshToTensor, ConcatMesh2dToTensor, ListMeshToTensor.
//
// SPMD: every rank calls with the same host tensor; distribute_tensor keeps this rank's piece and
// communicates nothing. Composing gathers the shards over the mesh's own point-to-point messages.
#pragma once

#include <optional>
#include <vector>

#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn {

struct MeshMapperConfig {
  Placements placements{Replicate{}, Replicate{}};
  // A dim that does not split evenly is an error unless this is set; then the last shards are
  // padded with pad_value and composers drop the padding.
  bool allow_padding = false;
  float pad_value = 0.0f;
};

MeshMapperConfig ReplicateTensorToMesh();
// Split `dim` over all devices in row-major order.
MeshMapperConfig ShardTensorToMesh(int dim, bool allow_padding = false);
// dims = {dim split over mesh rows, dim split over mesh cols}; std::nullopt replicates on that axis.
// Throws meshnn::Error when both name the same dim.
MeshMapperConfig ShardTensor2dMesh(std::optional<int> row_dim, std::optional<int> col_dim, bool allow_padding = false);

// Keeps this rank's shard of `host` (which every rank holds whole). No communication. Validation
// errors (bad dim, non-divisible split, Partial placement) are meshnn::Error on every rank.
MeshTensor distribute_tensor(const Tensor& host, const MeshMapperConfig& mapper, const MeshDevicePtr& mesh);

struct MeshComposerConfig {
  enum class Kind { CONCAT, CONCAT_2D, LIST } kind = Kind::CONCAT;
  int dim = 0;                   // Concat
  int row_dim = 0, col_dim = 0;  // Concat2d: concat each row's shards on col_dim, then rows on row_dim
};
MeshComposerConfig ConcatMeshToTensor(int dim);
MeshComposerConfig ConcatMesh2dToTensor(int row_dim, int col_dim);  // dims must differ
MeshComposerConfig ListMeshToTensor();

// Gathers the shards to every rank (root = nullopt) or to one root and concatenates them as the
// composer says; padding added by the mapper is dropped on the dims it padded. On ranks other
// than the root the result is an empty Tensor. Collective over the mesh.
Tensor aggregate_tensor(const MeshTensor& tensor, const MeshComposerConfig& composer,
                        std::optional<int> root = std::nullopt);
// The composer the placements imply (torch's DTensor.full_tensor()): a Shard(d) axis is
// concatenated on d, a Replicate axis contributes one copy, padding is dropped. Throws
// meshnn::Error for a Partial axis (reduce first). Collective over the mesh.
Tensor full_tensor(const MeshTensor& tensor, std::optional<int> root = std::nullopt);

// ListMeshToTensor: one tensor per device, in device-id order.
std::vector<Tensor> aggregate_tensor_list(const MeshTensor& tensor, std::optional<int> root = std::nullopt);

}  // namespace meshnn
