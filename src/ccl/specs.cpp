#include "meshnn/ccl/specs.hpp"

#include <fmt/format.h>

#include "meshnn/core/error.hpp"

namespace meshnn::ccl {

int mesh_axis_size(MeshShape s, int axis) { return axis == 0 ? s.rows : s.cols; }

int member_id(const MeshDevice& mesh, const Group& g, int k) {
  if (!g.cluster_axis) return k;
  const MeshCoordinate me = mesh.coordinate();
  return *g.cluster_axis == 0 ? mesh.device_id_of({k, me.col}) : mesh.device_id_of({me.row, k});
}

Group resolve_group(const MeshDevice& mesh, std::optional<int> cluster_axis, std::string_view op) {
  Group g;
  g.cluster_axis = cluster_axis;
  const MeshShape shape = mesh.shape();
  if (cluster_axis) {
    const int a = *cluster_axis;
    MESHNN_CHECK(a == 0 || a == 1, "{}: cluster_axis must be 0 or 1 (or none for the whole mesh), got {}", op, a);
    MESHNN_CHECK(mesh_axis_size(shape, a) > 1,
                 "{}: cluster_axis {} of a {} mesh groups a single device; use cluster_axis {} or none", op, a,
                 shape.to_string(), 1 - a);
    g.comm = mesh.axis_comm(a);
    g.size = mesh.axis_size(a);
    g.position = mesh.axis_position(a);
    g.transport = mesh.axis_transport_kind(a);
    g.axes.v[0] = a;
    g.axes.n = 1;
  } else {
    g.comm = mesh.comm();
    g.size = mesh.num_devices();
    g.position = mesh.device_id();
    g.transport = mesh.transport_kind();
    g.axes.n = 2;
  }
  MESHNN_CHECK(g.size > 1, "{} needs more than one device, got {} (a {} mesh)", op, g.size, shape.to_string());
  return g;
}

int normalize(const Shape& shape, int dim, std::string_view op) {
  MESHNN_CHECK(dim >= -shape.rank() && dim < shape.rank(), "{}: dim {} is out of range for a rank-{} tensor of shape {}",
               op, dim, shape.rank(), shape);
  return dim < 0 ? dim + shape.rank() : dim;
}

bool nontrivial(const MeshTensor& t, int axis) { return mesh_axis_size(t.mesh_device().shape(), axis) > 1; }


void check_nested_shard(const MeshTensor& t, const Group& g, int d, std::string_view op, std::string_view what) {
  if (g.axes.size() != 1) return;
  const int a = g.axes[0], other = 1 - a;
  const auto* s = std::get_if<Shard>(&t.placement(other));
  MESHNN_CHECK(!(a == 0 && s && s->dim == d && nontrivial(t, other)),
               "{}: {} dim {} on cluster_axis 0 while cluster_axis 1 shards the same dim ({}) leaves a non-row-major "
               "split; use cluster_axis 1 or none",
               op, what, d, to_string(t.placements()));
}

OutputSpec gather_spec(const MeshTensor& t, const Group& g, int d) {
  constexpr std::string_view op = "all_gather";
  bool any_shard = false, any_replicate = false;
  for (int a : g.axes) {
    if (!nontrivial(t, a)) continue;
    const Placement& pl = t.placement(a);
    if (const auto* s = std::get_if<Shard>(&pl)) {
      MESHNN_CHECK(s->dim == d, "all_gather: dim {} but the tensor is sharded on dim {} along mesh axis {} ({})", d,
                   s->dim, a, to_string(t.placements()));
      any_shard = true;
    } else if (is_partial(pl)) {
      throw Error(fmt::format("all_gather: the tensor is {} along mesh axis {}: reduce it first (reduce_scatter or "
                              "all_reduce)", to_string(pl), a));
    } else {
      any_replicate = true;
    }
  }
  MESHNN_CHECK(!(any_shard && any_replicate), "all_gather over the whole mesh needs the same placement on both axes, got {}",
               to_string(t.placements()));
  if (any_shard) check_nested_shard(t, g, d, op, "gathering");
  MESHNN_CHECK(!t.is_padded(), "all_gather: the tensor's shards carry padding (shape {}, shard {}); not supported",
               t.shape(), t.shard_shape());
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  s.local[d] = s.local[d] * g.size;
  if (!any_shard) s.global[d] = s.global[d] * g.size;  // replicated input: N copies side by side
  for (int a : g.axes) s.placements[a] = Replicate{};
  return s;
}

void check_reducible(const MeshTensor& t, const Group& g, ReduceOp op, std::string_view name) {
  for (int a : g.axes) {
    if (!nontrivial(t, a)) continue;
    const Placement& pl = t.placement(a);
    if (const auto* p = std::get_if<Partial>(&pl)) {
      MESHNN_CHECK(p->op == op, "{}: the tensor is {} along mesh axis {} but the reduction is {}", name, to_string(pl), a,
                   to_string(op));
    } else {
      MESHNN_CHECK(is_replicate(pl), "{}: the tensor is {} along mesh axis {}: reducing different shards is "
                   "meaningless (all_gather it instead)", name, to_string(pl), a);
    }
  }
}

OutputSpec reduce_scatter_spec(const MeshTensor& t, const Group& g, int d, ReduceOp op) {
  check_reducible(t, g, op, "reduce_scatter");
  check_nested_shard(t, g, d, "reduce_scatter", "scattering");
  const int64_t size = t.local().shape()[d];
  MESHNN_CHECK(size % g.size == 0, "reduce_scatter: dim {} of size {} (shard shape {}) does not divide over {} devices",
               d, size, t.shard_shape(), g.size);
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  s.local[d] = size / g.size;
  for (int a : g.axes) s.placements[a] = Shard{d};
  return s;
}

OutputSpec all_reduce_spec(const MeshTensor& t, const Group& g, ReduceOp op) {
  check_reducible(t, g, op, "all_reduce");
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  for (int a : g.axes) s.placements[a] = Replicate{};
  return s;
}

OutputSpec all_to_all_spec(const MeshTensor& t, const Group& g, int in_dim, int out_dim) {
  MESHNN_CHECK(in_dim != out_dim, "all_to_all: in_dim and out_dim are both {}: the split would not change", in_dim);
  for (int a : g.axes) {
    if (!nontrivial(t, a)) continue;
    const Placement& pl = t.placement(a);
    MESHNN_CHECK(pl == Placement{Shard{in_dim}},
                 "all_to_all: the tensor is {} along mesh axis {} but all_to_all takes Shard({}) there ({}){}",
                 to_string(pl), a, in_dim, to_string(t.placements()),
                 is_partial(pl) ? ": reduce it first (reduce_scatter)" : is_replicate(pl) ? ": slice it instead" : "");
  }
  check_nested_shard(t, g, in_dim, "all_to_all", "gathering");
  check_nested_shard(t, g, out_dim, "all_to_all", "scattering");
  MESHNN_CHECK(!t.is_padded(), "all_to_all: the tensor's shards carry padding (shape {}, shard {}); not supported",
               t.shape(), t.shard_shape());
  const int64_t size = t.local().shape()[out_dim];
  MESHNN_CHECK(size % g.size == 0, "all_to_all: out_dim {} of size {} (shard shape {}) does not divide over {} devices",
               out_dim, size, t.shard_shape(), g.size);
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  s.local[in_dim] = s.local[in_dim] * g.size;
  s.local[out_dim] = size / g.size;
  for (int a : g.axes) s.placements[a] = Shard{out_dim};
  return s;
}

void check_common(const MeshTensor& t, int num_links, std::string_view op) {
  MESHNN_CHECK(t.mesh() != nullptr && t.mesh_device().is_open(), "{}: the tensor's mesh is not open", op);
  MESHNN_CHECK(num_links >= 1 && num_links <= ccl::kMaxLinks, "{}: num_links must be 1..{}, got {}", op, ccl::kMaxLinks,
               num_links);
}

void check_output(const MeshTensor& out, const OutputSpec& s, const MeshTensor& in, std::string_view op) {
  MESHNN_CHECK(out.mesh() == in.mesh() && out.shape() == s.global && out.local().shape() == s.local &&
                   out.placements() == s.placements && out.dtype() == in.dtype() && out.layout() == in.layout(),
               "{}: output tensor {} {} {} {} does not match the expected {} {} {} {}", op, out.shape(),
               to_string(out.placements()), to_string(out.dtype()), to_string(out.layout()), s.global,
               to_string(s.placements), to_string(in.dtype()), to_string(in.layout()));
}

}  // namespace meshnn::ccl
