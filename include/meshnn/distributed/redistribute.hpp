// redistribute: a mesh tensor from one placement per mesh axis to another (DTensor's redistribute,
// on TT-NN's placements), as a short plan of collectives:
//
//   Shard(d)  -> Replicate   all_gather(d) along the axis
//   Partial   -> Replicate   all_reduce along the axis
//   Partial   -> Shard(d)    reduce_scatter(d) along the axis
//   Replicate -> Shard(d)    a local slice, no communication
//   Shard(a)  -> Shard(b)    all_to_all(a -> b) along the axis when no other split of a or b is
//                            involved; otherwise all_gather(a) then a local slice of b
//
// Nothing can become Partial (it is the result of a computation, not a layout). A dim sharded on
// both axes is split row-major over all devices (axis 0 outer), so when such a dim changes how it
// is split it is first gathered whole (inner axis first) and then cut again (outer axis first).
//
// The plan is pure: the same on every rank and made before any message moves, so an impossible
// request (a Partial target, a dim that does not split evenly, a padded tensor) is the same
// meshnn::Error everywhere.
#pragma once

#include <string>
#include <vector>

#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::distributed {

enum class StepKind { ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, ALL_TO_ALL, LOCAL_SLICE };
std::string_view to_string(StepKind kind);  // "all_gather", ...

struct RedistributeStep {
  StepKind kind;
  int axis;          // the mesh axis (cluster_axis) it runs along
  int dim = -1;      // gathered, scattered or sliced tensor dim (all_to_all: the dim it splits)
  ReduceOp op = ReduceOp::SUM;
  Placements after;  // placements once the step has run
  int members = 1;   // devices along the axis
  int64_t local_bytes_in = 0;  // this step's input shard, bytes (what the cost model charges)
  int from_dim = -1;           // all_to_all: the dim sharded before the step
  // Bytes the step packs or unpacks on this device besides what it sends: the parts a gather,
  // reduce_scatter or all_to_all moves are copied apart or together when each is not one run of
  // the tensor's storage (a split of TILE columns, or of any dim under a larger one).
  int64_t local_copy_bytes = 0;
};

// Bytes one device receives in the step on a ring schedule (a local slice receives none).
double bytes_received(const RedistributeStep& step);

struct RedistributePlan {
  Placements from, to;
  std::vector<RedistributeStep> steps;
  // One line per step: "all_gather dim 1 along axis 1 (4 devices, 64 KiB shard) -> [...]".
  std::string explain() const;
  double bytes_received() const;  // over all steps
  // "all_gather(d1, axis 1), local slice(d0, axis 0)", "all_to_all(d0->d1, axis 1)" or "-".
  std::string summary() const;
};

// The plan for a tensor of `global` shape, `dtype` and `layout` on a mesh of `mesh` shape. Axes of
// one device need no step whatever their placements say.
RedistributePlan plan_redistribute(const Shape& global, DataType dtype, Layout layout, const Placements& from,
                                   const Placements& to, MeshShape mesh);

// Runs plan_redistribute's plan. Collective over t's mesh.
MeshTensor redistribute(const MeshTensor& t, const Placements& to);

}  // namespace meshnn::distributed
