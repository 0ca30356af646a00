#include "meshnn/distributed/redistribute.hpp"

#include <fmt/format.h>

#include <optional>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/storage_runs.hpp"

namespace meshnn::distributed {
namespace {

int axis_size(MeshShape mesh, int axis) { return axis == 0 ? mesh.rows : mesh.cols; }

bool shards(const Placement& p, int dim) { return is_shard(p) && std::get<Shard>(p).dim == dim; }

// Builds the steps while tracking the placements they lead to.
class Planner {
 public:
  Planner(const Shape& global, DataType dtype, Layout layout, MeshShape mesh, Placements from)
      : global_(global), dtype_(dtype), layout_(layout), mesh_(mesh), current_(from) {}

  const Placements& current() const { return current_; }

  void add(StepKind kind, int axis, int dim, ReduceOp op, Placement result, int from_dim = -1) {
    RedistributeStep step{kind, axis, dim, op, current_, axis_size(mesh_, axis), local_bytes(), from_dim};
    step.after[axis] = result;
    // The shard shape of the new placements must exist: a dim that does not split evenly is an
    // error here, before anything moves.
    const Shape in = shard_shape_for(global_, current_, mesh_, /*allow_padding=*/false);
    const Shape out = shard_shape_for(global_, step.after, mesh_, /*allow_padding=*/false);
    step.local_copy_bytes = packing_bytes(step, in, out);
    current_ = step.after;
    steps_.push_back(step);
  }

  std::vector<RedistributeStep> take() { return std::move(steps_); }

 private:
  // What the ccl implementation of the step copies locally (src/ccl/ccl.cpp): a gather joins
  // the parts into its output, a reduce_scatter lays its input out slice by slice, an all_to_all
  // packs what it sends and unpacks what it receives, each unless the parts are runs of storage.
  int64_t packing_bytes(const RedistributeStep& step, const Shape& in, const Shape& out) const {
    const int n = step.members;
    auto bytes = [&](const Shape& s) { return static_cast<int64_t>(Tensor::storage_bytes(s, dtype_, layout_)); };
    switch (step.kind) {
      case StepKind::ALL_GATHER: return parts_are_contiguous(out, layout_, step.dim, n) ? 0 : bytes(out);
      case StepKind::REDUCE_SCATTER: return parts_are_contiguous(in, layout_, step.dim, n) ? 0 : bytes(in);
      case StepKind::ALL_TO_ALL:
        return (parts_are_contiguous(in, layout_, step.dim, n) ? 0 : bytes(in)) +
               (parts_are_contiguous(out, layout_, step.from_dim, n) ? 0 : bytes(out));
      case StepKind::ALL_REDUCE:
      case StepKind::LOCAL_SLICE: return 0;  // a slice is all copy, priced as such already
    }
    return 0;
  }

  int64_t local_bytes() const {
    return static_cast<int64_t>(
        Tensor::storage_bytes(shard_shape_for(global_, current_, mesh_, /*allow_padding=*/false), dtype_, layout_));
  }

  Shape global_;
  DataType dtype_;
  Layout layout_;
  MeshShape mesh_;
  Placements current_;
  std::vector<RedistributeStep> steps_;
};

// Whether dim d's split changes and it is split over both axes before or after: such a dim is
// gathered whole first, since a row-major split over all devices cannot be re-cut axis by axis.
bool regathered(int d, const Placements& from, const Placements& to) {
  const bool both_before = shards(from[0], d) && shards(from[1], d);
  const bool both_after = shards(to[0], d) && shards(to[1], d);
  const bool same = shards(from[0], d) == shards(to[0], d) && shards(from[1], d) == shards(to[1], d);
  return !same && (both_before || both_after);
}

}  // namespace

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::ALL_GATHER: return "all_gather";
    case StepKind::ALL_REDUCE: return "all_reduce";
    case StepKind::REDUCE_SCATTER: return "reduce_scatter";
    case StepKind::ALL_TO_ALL: return "all_to_all";
    case StepKind::LOCAL_SLICE: return "local slice";
  }
  return "?";
}

double bytes_received(const RedistributeStep& s) {
  const double n = s.members, bytes = static_cast<double>(s.local_bytes_in);
  switch (s.kind) {
    case StepKind::ALL_GATHER: return (n - 1) * bytes;
    case StepKind::REDUCE_SCATTER:
    case StepKind::ALL_TO_ALL: return (n - 1) / n * bytes;
    case StepKind::ALL_REDUCE: return 2 * (n - 1) / n * bytes;
    case StepKind::LOCAL_SLICE: return 0;
  }
  return 0;
}

double RedistributePlan::bytes_received() const {
  double total = 0;
  for (const auto& s : steps) total += distributed::bytes_received(s);
  return total;
}

std::string RedistributePlan::summary() const {
  std::string out;
  for (const auto& s : steps)
    out += fmt::format("{}{}({}{}axis {})", out.empty() ? "" : ", ", to_string(s.kind),
                       s.from_dim >= 0 ? fmt::format("d{}->", s.from_dim) : "",
                       s.dim >= 0 ? fmt::format("d{}, ", s.dim) : "", s.axis);
  return out.empty() ? "-" : out;
}

std::string RedistributePlan::explain() const {
  std::string out = fmt::format("redistribute {} -> {}: {}\n", meshnn::to_string(from), meshnn::to_string(to),
                                steps.empty() ? "nothing to do" : fmt::format("{} step(s)", steps.size()));
  for (const RedistributeStep& s : steps) {
    const std::string what =
        s.kind == StepKind::ALL_REDUCE       ? fmt::format("all_reduce ({})", meshnn::to_string(s.op))
        : s.kind == StepKind::REDUCE_SCATTER ? fmt::format("reduce_scatter ({}) dim {}", meshnn::to_string(s.op), s.dim)
        : s.kind == StepKind::ALL_TO_ALL     ? fmt::format("all_to_all dim {} -> {}", s.from_dim, s.dim)
                                             : fmt::format("{} dim {}", to_string(s.kind), s.dim);
    out += fmt::format("  {} along axis {} ({} devices, {} byte shard) -> {}\n", what, s.axis, s.members,
                       s.local_bytes_in, meshnn::to_string(s.after));
  }
  return out;
}

RedistributePlan plan_redistribute(const Shape& global, DataType dtype, Layout layout, const Placements& from_in,
                                   const Placements& to_in, MeshShape mesh) {
  const int rank = global.rank();
  Placements from = normalize_placements(from_in, rank), to = normalize_placements(to_in, rank);
  RedistributePlan plan{from, to, {}};
  // An axis of one device holds the whole tensor whatever it is called.
  for (int axis = 0; axis < 2; ++axis)
    if (axis_size(mesh, axis) == 1) from[axis] = to[axis] = Replicate{};
  for (int axis = 0; axis < 2; ++axis)
    MESHNN_CHECK(!is_partial(to[axis]) || from[axis] == to[axis],
                 "redistribute {} -> {}: mesh axis {} cannot become {}: only a computation (a matmul over a sharded "
                 "contraction dim) makes partial sums",
                 meshnn::to_string(plan.from), meshnn::to_string(plan.to), axis, meshnn::to_string(to[axis]));

  Planner p(global, dtype, layout, mesh, from);
  // 1. Take away what changes, inner axis first: gathers and reductions.
  for (int axis : {1, 0}) {
    const Placement have = p.current()[axis], want = to[axis];
    const int other = 1 - axis;
    if (is_shard(have)) {
      const int d = std::get<Shard>(have).dim;
      // Re-sharding to another dim is one exchange when no other split of either dim is involved
      // (the local shard then holds both dims whole along this axis's group).
      if (is_shard(want) && have != want) {
        const int b = std::get<Shard>(want).dim;
        const bool alone = !shards(p.current()[other], d) && !shards(p.current()[other], b) && !shards(to[other], d) &&
                           !shards(to[other], b);
        if (alone) {
          p.add(StepKind::ALL_TO_ALL, axis, b, ReduceOp::SUM, want, d);
          continue;
        }
      }
      if (have != want || regathered(d, from, to)) {
        if (axis == 0 && shards(p.current()[1], d))  // the inner split of d goes first
          p.add(StepKind::ALL_GATHER, 1, d, ReduceOp::SUM, Replicate{});
        p.add(StepKind::ALL_GATHER, axis, d, ReduceOp::SUM, Replicate{});
      }
    } else if (is_partial(have) && have != want) {
      const ReduceOp op = std::get<Partial>(have).op;
      // Scattering straight into the target dim is one step when no other split of that dim
      // is involved; otherwise reduce whole and cut afterwards.
      if (is_shard(want) && !shards(p.current()[other], std::get<Shard>(want).dim) &&
          !shards(to[other], std::get<Shard>(want).dim))
        p.add(StepKind::REDUCE_SCATTER, axis, std::get<Shard>(want).dim, op, want);
      else
        p.add(StepKind::ALL_REDUCE, axis, -1, op, Replicate{});
    }
  }
  // 2. Cut what is now whole, outer axis first.
  for (int axis : {0, 1}) {
    if (p.current()[axis] == to[axis]) continue;
    MESHNN_CHECK(is_replicate(p.current()[axis]) && is_shard(to[axis]), "redistribute {} -> {}: no plan for mesh axis {}",
                 meshnn::to_string(plan.from), meshnn::to_string(plan.to), axis);
    p.add(StepKind::LOCAL_SLICE, axis, std::get<Shard>(to[axis]).dim, ReduceOp::SUM, to[axis]);
  }
  plan.steps = p.take();
  return plan;
}

MeshTensor redistribute(const MeshTensor& t, const Placements& to) {
  MESHNN_CHECK(!t.is_padded(), "redistribute of a padded mesh tensor ({}) is not supported: compose it and map it again",
               t.describe());
  const MeshDevicePtr& mesh = t.mesh();
  const RedistributePlan plan = plan_redistribute(t.shape(), t.dtype(), t.layout(), t.placements(), to, mesh->shape());
  // Starting from the plan's own names for the axes of one device (same shard, nothing moves).
  Placements start = plan.from;
  for (int axis = 0; axis < 2; ++axis)
    if (axis_size(mesh->shape(), axis) == 1) start[axis] = Replicate{};
  // Each step reads the tensor before it and returns a new one; the input itself is copied only
  // when nothing moves or its placements must be renamed first (a shard of many MiB costs a
  // fresh buffer and a pass over it; a Partial product's all_reduce paid two such copies).
  std::optional<MeshTensor> owned;
  if (start != t.placements()) owned.emplace(mesh, t.shape(), start, t.local());
  for (const RedistributeStep& s : plan.steps) {
    const MeshTensor& x = owned ? *owned : t;
    MeshTensor next;
    switch (s.kind) {
      case StepKind::ALL_GATHER: next = all_gather(x, s.dim, s.axis); break;
      case StepKind::ALL_REDUCE: next = all_reduce(x, s.op, s.axis); break;
      case StepKind::REDUCE_SCATTER: next = reduce_scatter(x, s.dim, s.op, s.axis); break;
      case StepKind::ALL_TO_ALL: next = all_to_all(x, s.from_dim, s.dim, s.axis); break;
      case StepKind::LOCAL_SLICE: {
        // This device's chunk of the dim under the new placements, inside the chunk it holds now.
        const MeshCoordinate me = mesh->coordinate();
        const Shape shard = shard_shape_for(x.shape(), s.after, mesh->shape(), false);
        const int64_t chunk = shard[s.dim], held = x.local().shape()[s.dim];
        const int64_t offset = shard_index(s.after, mesh->shape(), me, s.dim) * chunk -
                               shard_index(x.placements(), mesh->shape(), me, s.dim) * held;
        // One dim: whole tiles (or rows) are copied as they are stored.
        next = MeshTensor(mesh, x.shape(), s.after, slice(x.local(), s.dim, offset, offset + chunk));
        break;
      }
    }
    owned = std::move(next);
  }
  // Axes of one device take the requested names without moving anything.
  const Placements named = normalize_placements(to, t.shape().rank());
  if (!owned) return MeshTensor(mesh, t.shape(), named, t.local());
  return MeshTensor(mesh, owned->shape(), named, std::move(owned->local()));
}

}  // namespace meshnn::distributed
