#include "meshnn/models/falcon/mlp.hpp"

#include <fmt/format.h>

#include <chrono>

#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/falcon/synthetic.hpp"
#include "meshnn/models/weight_placement.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/distributed/distribute.hpp"

namespace meshnn::models::falcon {
namespace {

MatmulOptions output_as(DataType dtype) {
  MatmulOptions o;
  o.output_dtype = dtype;
  return o;
}

Shape with_last(const Shape& s, int64_t last) {
  std::vector<int64_t> dims = s.to_vector();
  dims.back() = last;
  return Shape(dims);
}

// Collectives need a group of two or more devices; on a group of one (a 1x1 mesh, or a mesh axis
// of size 1) the partial sum already is the sum and the shards already are the whole.
int group_size(const MeshTensor& t, std::optional<int> cluster_axis) {
  return cluster_axis ? t.mesh_device().axis_size(*cluster_axis) : t.mesh_device().num_devices();
}

MeshTensor with_placements(const MeshTensor& t, const Shape& shape, std::optional<int> cluster_axis, const Placement& p) {
  Placements ps = t.placements();
  for (int axis = 0; axis < 2; ++axis)
    if (!cluster_axis || *cluster_axis == axis) ps[axis] = p;
  return MeshTensor(t.mesh(), shape, ps, t.local());
}

MeshTensor sum_over(const MeshTensor& t, std::optional<int> cluster_axis, Topology topology, int num_links) {
  if (group_size(t, cluster_axis) == 1) return with_placements(t, t.shape(), cluster_axis, Replicate{});
  return all_reduce(t, ReduceOp::SUM, cluster_axis, topology, num_links);
}

MeshTensor sum_scatter(const MeshTensor& t, int dim, Topology topology, int num_links) {
  if (group_size(t, std::nullopt) == 1) return with_placements(t, t.shape(), std::nullopt, Shard{dim});
  return reduce_scatter(t, dim, ReduceOp::SUM, std::nullopt, topology, num_links);
}

MeshTensor gather(const MeshTensor& t, int dim, Topology topology, int num_links) {
  if (group_size(t, std::nullopt) == 1) return with_placements(t, t.shape(), std::nullopt, Replicate{});
  return all_gather(t, dim, std::nullopt, topology, num_links);
}

}  // namespace

std::string_view to_string(TpVariant v) {
  switch (v) {
    case TpVariant::REDUCE_SCATTER: return "reduce_scatter";
    case TpVariant::ALL_REDUCE: return "all_reduce";
    case TpVariant::ALL_GATHER: return "all_gather";
    case TpVariant::PLANNED: return "planned";
  }
  return "?";
}

TpVariant parse_tp_variant(std::string_view name) {
  for (TpVariant v : {TpVariant::REDUCE_SCATTER, TpVariant::ALL_REDUCE, TpVariant::ALL_GATHER, TpVariant::PLANNED})
    if (name == to_string(v)) return v;
  throw Error(
      fmt::format("unknown tp variant '{}' (expected reduce_scatter, all_reduce, all_gather or planned)", name));
}

FalconMlp FalconMlp::load(const std::string& file, int layer, const MeshDevicePtr& mesh, const MlpOptions& options) {
  MESHNN_CHECK(options.act_dtype == DataType::FLOAT32 || options.act_dtype == DataType::BFLOAT16,
               "activations must be float32 or bfloat16, got {}", to_string(options.act_dtype));
  MESHNN_CHECK(options.weight_dtype == DataType::FLOAT32 || options.weight_dtype == DataType::BFLOAT16 ||
                   is_block_float(options.weight_dtype),
               "weights must be float32, bfloat16, bfloat8_b or bfloat4_b, got {}", to_string(options.weight_dtype));
  FalconMlp m;
  m.options_ = options;
  m.mesh_ = mesh;
  m.compute_mesh_ = mesh;
  if (options.mode == ParallelMode::HYBRID) {
    const auto subs = mesh->create_submeshes({1, mesh->num_cols()});
    m.compute_mesh_ = subs.mine;
    m.replica_ = subs.index;
    m.replicas_ = subs.count;
  }
  const io::Attributes attrs = io::read_root_attributes(file, mesh);
  m.hidden_ = io::required_int_attribute(attrs, "hidden_size", file);
  m.intermediate_ = io::required_int_attribute(attrs, "intermediate_size", file);

  // Placements of W1 [hidden, inter] and W2 [inter, hidden] (after the load-time transpose;
  // models/weight_placement.hpp): W1 column-parallel, W2 row-parallel, except in TT-NN's tutorial
  // variant, which splits both by columns and gathers between them.
  const bool tutorial_variant = (options.mode == ParallelMode::TP || options.mode == ParallelMode::HYBRID) &&
                                options.tp_variant == TpVariant::ALL_GATHER;
  const MeshMapperConfig w1_map = weight_mapper(options.mode, WeightRole::COLUMN_PARALLEL);
  const MeshMapperConfig w2_map =
      weight_mapper(options.mode, tutorial_variant ? WeightRole::COLUMN_PARALLEL : WeightRole::ROW_PARALLEL);
  const CompactBuffersScope compact;  // weights are never sent: packed tight, not rounded to huge pages
  io::LoadOptions lo{options.weight_dtype, Layout::TILE, /*transpose=*/true};
  lo.expected_shape = std::vector<int64_t>{m.intermediate_, m.hidden_};
  m.w1_ = io::load_tensor(file, mlp_key(layer, "dense_h_to_4h.weight"), w1_map, m.compute_mesh_, lo);
  lo.expected_shape = std::vector<int64_t>{m.hidden_, m.intermediate_};
  m.w2_ = io::load_tensor(file, mlp_key(layer, "dense_4h_to_h.weight"), w2_map, m.compute_mesh_, lo);
  return m;
}

MeshMapperConfig FalconMlp::input_mapper() const {
  switch (options_.mode) {
    case ParallelMode::DP: return ShardTensorToMesh(0, true);
    case ParallelMode::TP: return ReplicateTensorToMesh();
    case ParallelMode::TWO_D: return ShardTensor2dMesh(-1, std::nullopt, true);
    case ParallelMode::HYBRID: return ShardTensor2dMesh(0, std::nullopt, true);
  }
  return ReplicateTensorToMesh();
}

MeshTensor FalconMlp::forward(const MeshTensor& x, PhaseTimes& times) const {
  MESHNN_CHECK(x.mesh() == mesh_, "the input must live on the mesh the MLP was loaded on");
  MESHNN_CHECK(x.shape()[-1] == hidden_, "input hidden size {} does not match the model's {}", x.shape()[-1], hidden_);
  switch (options_.mode) {
    case ParallelMode::DP: return forward_dp(x, times);
    case ParallelMode::TP: return forward_tp(x, times);
    case ParallelMode::TWO_D: return forward_2d(x, times);
    case ParallelMode::HYBRID: {
      // This replica's batch chunk, replicated over its submesh, runs tp there; the result goes
      // back onto the whole mesh with the batch still split over the mesh rows.
      const MeshTensor local_x(compute_mesh_, x.shard_shape(), {Replicate{}, Replicate{}}, x.local());
      const MeshTensor y = forward_tp(local_x, times);
      return MeshTensor(mesh_, x.shape(), {Shard{0}, y.placement(1)}, y.local());
    }
  }
  return {};
}

MeshTensor FalconMlp::forward_dp(const MeshTensor& x, PhaseTimes& t) const {
  const Tensor y = timed(t.compute, [&] {
    const Tensor h = linear(x.local(), w1_.local(), nullptr, Activation::GELU, output_as(options_.act_dtype));
    return linear(h, w2_.local(), nullptr, Activation::NONE, output_as(options_.act_dtype));
  });
  return MeshTensor(mesh_, x.shape(), x.placements(), y);
}

MeshTensor FalconMlp::forward_tp(const MeshTensor& x, PhaseTimes& t) const {
  const MeshDevicePtr& mesh = x.mesh();
  const Shape inter_shape = with_last(x.shape(), intermediate_);
  const Tensor h = timed(t.compute, [&] {
    return linear(x.local(), w1_.local(), nullptr, Activation::GELU, output_as(options_.act_dtype));
  });
  if (options_.tp_variant == TpVariant::PLANNED)
    return ff2_planned(MeshTensor(mesh, inter_shape, {Shard{-1}, Shard{-1}}, h), x.shape(), t);
  if (options_.tp_variant == TpVariant::ALL_GATHER) {
    const MeshTensor h_sharded(mesh, inter_shape, {Shard{-1}, Shard{-1}}, h);
    const MeshTensor h_full = timed(t.communication, [&] {
      return gather(h_sharded, -1, options_.topology, options_.num_links);
    });
    const Tensor y = timed(t.compute, [&] {
      return linear(h_full.local(), w2_.local(), nullptr, Activation::NONE, output_as(options_.act_dtype));
    });
    return MeshTensor(mesh, x.shape(), {Shard{-1}, Shard{-1}}, y);
  }
  // Row-parallel FF2: float32 partial sums, reduced in float32, cast once.
  const Tensor partial = timed(t.compute, [&] {
    return linear(h, w2_.local(), nullptr, Activation::NONE, output_as(DataType::FLOAT32));
  });
  const MeshTensor y_partial(mesh, x.shape(), {Partial{}, Partial{}}, partial);
  MeshTensor y = timed(t.communication, [&] {
    return options_.tp_variant == TpVariant::REDUCE_SCATTER
               ? sum_scatter(y_partial, -1, options_.topology, options_.num_links)
               : sum_over(y_partial, std::nullopt, options_.topology, options_.num_links);
  });
  y.local() = timed(t.compute, [&] { return y.local().typecast(options_.act_dtype); });
  return y;
}

// FF2 of the planned variant: GELU(h) [.., I/N] times W2 [I/N, H] by distributed::matmul, asked
// for the reduce_scatter variant's output (hidden split over the devices) in the activation dtype.
distributed::DistributedMatmulOptions FalconMlp::ff2_options() const {
  distributed::DistributedMatmulOptions o;
  o.output_placements = Placements{Shard{-1}, Shard{-1}};
  o.output_dtype = options_.act_dtype;
  o.cost = options_.cost;
  return o;
}

distributed::MatmulPlan FalconMlp::ff2_plan(const Shape& x_shape) const {
  return distributed::plan_matmul(with_last(x_shape, intermediate_), options_.act_dtype, Layout::TILE,
                                  {Shard{-1}, Shard{-1}}, w2_.shape(), w2_.dtype(), w2_.layout(), w2_.placements(),
                                  compute_mesh_->shape(), ff2_options());
}

// The operands' and the output's moves count as communication, the product as compute.
MeshTensor FalconMlp::ff2_planned(const MeshTensor& h, const Shape& out_shape, PhaseTimes& t) const {
  const distributed::DistributedMatmulOptions o = ff2_options();
  const distributed::MatmulPlan plan = ff2_plan(out_shape);
  MeshTensor moved_h, moved_w;
  const MeshTensor *xh = nullptr, *xw = nullptr;  // the operands themselves where nothing moves
  timed(t.communication, [&] {
    xh = &distributed::plan_operand(h, plan.a, moved_h);
    xw = &distributed::plan_operand(w2_, plan.b, moved_w);
  });
  const MeshTensor product = timed(t.compute, [&] { return distributed::plan_product(*xh, *xw, plan, o); });
  MeshTensor y = timed(t.communication, [&] { return distributed::plan_output(product, plan, o); });
  MESHNN_CHECK(y.shape() == out_shape, "planned FF2 gave {} where {} was expected", y.shape(), out_shape);
  return y;
}

MeshTensor FalconMlp::forward_2d(const MeshTensor& x, PhaseTimes& t) const {
  const MeshDevicePtr& mesh = x.mesh();
  // FF1: x [.., H/R] times W1 [H/R, I/C] is a partial sum over the mesh rows.
  const Tensor h_partial = timed(t.compute, [&] {
    return linear(x.local(), w1_.local(), nullptr, Activation::NONE, output_as(DataType::FLOAT32));
  });
  const MeshTensor h_sum = timed(t.communication, [&] {
    return sum_over(MeshTensor(mesh, with_last(x.shape(), intermediate_), {Partial{}, Shard{-1}}, h_partial), 0,
                    options_.topology, options_.num_links);
  });
  // FF2: GELU(h) [.., I/C] times W2 [I/C, H/R] is a partial sum over the mesh cols.
  const Tensor y_partial = timed(t.compute, [&] {
    const Tensor h = gelu(h_sum.local().typecast(options_.act_dtype));
    return linear(h, w2_.local(), nullptr, Activation::NONE, output_as(DataType::FLOAT32));
  });
  MeshTensor y = timed(t.communication, [&] {
    return sum_over(MeshTensor(mesh, x.shape(), {Shard{-1}, Partial{}}, y_partial), 1, options_.topology,
                    options_.num_links);
  });
  y.local() = timed(t.compute, [&] { return y.local().typecast(options_.act_dtype); });
  return y;
}

std::string FalconMlp::describe() const {
  std::string out = fmt::format("Falcon MLP: hidden {}, intermediate {}, mode {}", hidden_, intermediate_,
                                to_string(options_.mode));
  if (options_.mode == ParallelMode::TP || options_.mode == ParallelMode::HYBRID)
    out += fmt::format(" ({})", to_string(options_.tp_variant));
  if (options_.mode == ParallelMode::HYBRID)
    out += fmt::format(", {} data-parallel replicas of a {} tensor-parallel submesh", replicas_,
                       compute_mesh_->shape().to_string());
  out += fmt::format("\n  x  placements {}\n  W1 [{}, {}] {} {}, shard {}\n  W2 [{}, {}] {} {}, shard {}\n",
                     to_string(normalize_placements(input_mapper().placements, 3)), hidden_, intermediate_,
                     to_string(w1_.dtype()), to_string(w1_.placements()), w1_.shard_shape(), intermediate_, hidden_,
                     to_string(w2_.dtype()), to_string(w2_.placements()), w2_.shard_shape());
  return out;
}

Tensor falcon_mlp_reference(const Tensor& x, const Tensor& w1, const Tensor& w2, DataType act_dtype) {
  MatmulOptions o;
  o.output_dtype = act_dtype;
  const Tensor h = linear(x, w1, nullptr, Activation::GELU, o);
  return linear(h, w2, nullptr, Activation::NONE, o);
}

}  // namespace meshnn::models::falcon
