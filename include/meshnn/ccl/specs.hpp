// The pure half of the mesh-tensor collectives: which devices a call runs over (its group along a
// mesh axis or the whole mesh), the checks of its arguments and the placements, shapes and local
// shapes of its output. No communication: the same answer on every rank, so every rank throws the
// same error before any message moves. Public for what plans collectives (the distributed layer).
#pragma once

#include <mpi.h>

#include <optional>
#include <string_view>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::ccl {

int mesh_axis_size(MeshShape s, int axis);

// One or both mesh axes (no heap: resolved on every call).
struct AxisList {
  int v[2] = {0, 1};
  int n = 0;
  const int* begin() const { return v; }
  const int* end() const { return v + n; }
  size_t size() const { return static_cast<size_t>(n); }
  int operator[](size_t i) const { return v[i]; }
};

// The devices a collective runs over, and which mesh axes its placement change applies to.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1, position = 0;
  AxisList axes;  // mesh axes whose placement the op rewrites
  std::optional<int> cluster_axis;
  TransportKind transport = TransportKind::SHARED_MEMORY;  // how comm's messages travel
};

// Device id of group position k (for messages only).
int member_id(const MeshDevice& mesh, const Group& g, int k);
// Throws meshnn::Error for a cluster_axis other than 0, 1 or none, an axis of one device, or a
// group of one device.
Group resolve_group(const MeshDevice& mesh, std::optional<int> cluster_axis, std::string_view op);
// dim normalised against the shape's rank; meshnn::Error when out of range.
int normalize(const Shape& shape, int dim, std::string_view op);
// Whether mesh axis `axis` of t's mesh has more than one device.
bool nontrivial(const MeshTensor& t, int axis);

struct OutputSpec {
  Shape global, local;
  Placements placements;
};

// A dim sharded on both axes means a row-major split over all devices: only consistent if axis 0
// is the outer split, so adding axis 0 under an existing axis-1 split of the same dim is not.
void check_nested_shard(const MeshTensor& t, const Group& g, int d, std::string_view op, std::string_view what);
OutputSpec gather_spec(const MeshTensor& t, const Group& g, int d);
void check_reducible(const MeshTensor& t, const Group& g, ReduceOp op, std::string_view name);
OutputSpec reduce_scatter_spec(const MeshTensor& t, const Group& g, int d, ReduceOp op);
OutputSpec all_reduce_spec(const MeshTensor& t, const Group& g, ReduceOp op);
// in_dim, out_dim normalised.
OutputSpec all_to_all_spec(const MeshTensor& t, const Group& g, int in_dim, int out_dim);
void check_common(const MeshTensor& t, int num_links, std::string_view op);
void check_output(const MeshTensor& out, const OutputSpec& s, const MeshTensor& in, std::string_view op);

}  // namespace meshnn::ccl
