#include "meshnn/models/weight_placement.hpp"

namespace meshnn::models {

MeshMapperConfig weight_mapper(ParallelMode mode, WeightRole role) {
  constexpr bool kPad = true;  // sizes need not divide over the devices (e.g. intermediate 688)
  switch (mode) {
    case ParallelMode::DP:
      return ReplicateTensorToMesh();
    case ParallelMode::TP:
    case ParallelMode::HYBRID:
      switch (role) {
        case WeightRole::COLUMN_PARALLEL: return ShardTensorToMesh(1, kPad);
        case WeightRole::ROW_PARALLEL: return ShardTensorToMesh(0, kPad);
        case WeightRole::HIDDEN_VECTOR: return ReplicateTensorToMesh();
      }
      break;
    case ParallelMode::TWO_D:
      switch (role) {
        case WeightRole::COLUMN_PARALLEL: return ShardTensor2dMesh(0, 1, kPad);
        case WeightRole::ROW_PARALLEL: return ShardTensor2dMesh(1, 0, kPad);
        case WeightRole::HIDDEN_VECTOR: return ShardTensor2dMesh(0, std::nullopt, kPad);
      }
      break;
  }
  return ReplicateTensorToMesh();
}

}  // namespace meshnn::models
