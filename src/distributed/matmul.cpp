#include "meshnn/distributed/matmul.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshnn/core/error.hpp"
#include "meshnn/distributed/collective_matmul.hpp"
#include "meshnn/distributed/summa.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/ops/matmul.hpp"

namespace meshnn::distributed {
namespace {

int axis_size(MeshShape mesh, int axis) { return axis == 0 ? mesh.rows : mesh.cols; }

// Dims of the product: batch dims aligned from the right, as ops::matmul broadcasts them.
struct Dims {
  int ra, rb, rc;
  const Shape *a, *b;
  int c_of_a(int d) const { return d + rc - ra; }
  int c_of_b(int d) const { return d + rc - rb; }
  // The operand's size along product dim c (1 when the operand has no such dim).
  int64_t a_size(int c) const { return c - (rc - ra) >= 0 ? (*a)[c - (rc - ra)] : 1; }
  int64_t b_size(int c) const { return c - (rc - rb) >= 0 ? (*b)[c - (rc - rb)] : 1; }
};

Shape product_shape(const Shape& a, const Shape& b) {
  const int rc = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rc));
  const Dims d{a.rank(), b.rank(), rc, &a, &b};
  for (int c = 0; c < rc - 2; ++c) {
    const int64_t x = d.a_size(c), y = d.b_size(c);
    MESHNN_CHECK(x == y || x == 1 || y == 1, "distributed matmul: batch dims of {} and {} do not broadcast", a, b);
    dims[static_cast<size_t>(c)] = std::max(x, y);
  }
  MESHNN_CHECK(a[-1] == b[-2], "distributed matmul: inner dims differ: A {} and B {}", a, b);
  dims[static_cast<size_t>(rc - 2)] = a[-2];
  dims[static_cast<size_t>(rc - 1)] = b[-1];
  return Shape(dims);
}

// The table in matmul.hpp: what one mesh axis of the local product is, if the pair fits a rule.
std::optional<Placement> product_rule(const Placement& pa, const Placement& pb, const Dims& d) {
  const bool ra = is_replicate(pa), rb = is_replicate(pb);
  if (ra && rb) return Replicate{};
  if ((is_partial(pa) && rb) || (ra && is_partial(pb))) {
    const ReduceOp op = is_partial(pa) ? std::get<Partial>(pa).op : std::get<Partial>(pb).op;
    if (op == ReduceOp::SUM) return Partial{};  // a product distributes over sums only
    return std::nullopt;
  }
  const int da = is_shard(pa) ? std::get<Shard>(pa).dim : -1, db = is_shard(pb) ? std::get<Shard>(pb).dim : -1;
  if (da == d.ra - 1 && db == d.rb - 2) return Partial{};
  if (da == d.ra - 2 && rb) return Shard{d.rc - 2};
  if (ra && db == d.rb - 1) return Shard{d.rc - 1};
  // Batch dims: both split alike, or one split where the other broadcasts.
  if (da >= 0 && da < d.ra - 2) {
    const int c = d.c_of_a(da);
    if ((rb && d.b_size(c) == 1) || (db >= 0 && db < d.rb - 2 && d.c_of_b(db) == c)) return Shard{c};
  }
  if (db >= 0 && db < d.rb - 2 && ra && d.a_size(d.c_of_b(db)) == 1) return Shard{d.c_of_b(db)};
  return std::nullopt;
}

// Where an operand may be moved to on one axis: as it is, whole, or split on any of its dims of
// more than one element.
std::vector<Placement> targets(const Shape& s, const Placement& now) {
  std::vector<Placement> out{now};
  if (!is_replicate(now)) out.push_back(Replicate{});
  for (int d = 0; d < s.rank(); ++d)
    if (s[d] > 1 && now != Placement{Shard{d}}) out.push_back(Shard{d});
  return out;
}

std::optional<RedistributePlan> try_plan(const Shape& s, DataType dtype, Layout layout, const Placements& from,
                                         const Placements& to, MeshShape mesh) {
  try {
    return plan_redistribute(s, dtype, layout, from, to, mesh);
  } catch (const Error&) {
    return std::nullopt;  // not a reachable layout (uneven split, Partial target): not a candidate
  }
}

}  // namespace

namespace {

// A plan's moves: A from pa to xa, B from pb to xb, and the product (placements `product`) to the
// requested output, priced; no compute yet. None when any move is impossible.
std::optional<MatmulPlan> plan_moves(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& pa,
                                     const Placements& xa, const Shape& b, DataType b_dtype, Layout b_layout,
                                     const Placements& pb, const Placements& xb, const Shape& c,
                                     const Placements& product, MeshShape mesh, const DistributedMatmulOptions& options) {
  const auto move_a = try_plan(a, a_dtype, a_layout, pa, xa, mesh);
  const auto move_b = try_plan(b, b_dtype, b_layout, pb, xb, mesh);
  std::optional<RedistributePlan> move_out = RedistributePlan{product, product, {}};
  if (options.output_placements)
    move_out = try_plan(c, DataType::FLOAT32, Layout::TILE, product, *options.output_placements, mesh);
  if (!move_a || !move_b || !move_out) return std::nullopt;
  MatmulPlan plan;
  plan.a = *move_a;
  plan.b = *move_b;
  plan.output = *move_out;
  plan.product = product;
  plan.product_shape = c;
  plan.communication_s = options.cost.seconds(*move_a) + options.cost.seconds(*move_b) + options.cost.seconds(*move_out);
  return plan;
}

// The SUMMA candidate (summa.hpp): A and B moved to its placements (or as they are), priced as
// the pipeline of panel broadcasts and products (MatmulPlan::overlap_s). None when B is not a
// matrix, the mesh is one device, or the shapes, dtypes or output do not allow it.
std::optional<MatmulPlan> summa_plan(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& pa,
                                     const Shape& b, DataType b_dtype, Layout b_layout, const Placements& pb,
                                     const Shape& c, MeshShape mesh, const DistributedMatmulOptions& options) {
  if (b.rank() != 2 || mesh.num_devices() == 1) return std::nullopt;
  const Placements xa = summa_a_placements(a.rank(), mesh), xb = summa_b_placements(mesh);
  try {
    check_summa(a, a_dtype, a_layout, xa, b, b_dtype, b_layout, xb, mesh);
  } catch (const Error&) {
    return std::nullopt;
  }
  std::optional<MatmulPlan> moved = plan_moves(a, a_dtype, a_layout, pa, xa, b, b_dtype, b_layout, pb, xb, c,
                                               summa_c_placements(c.rank(), mesh), mesh, options);
  if (!moved) return std::nullopt;
  MatmulPlan& plan = *moved;
  plan.summa = true;
  plan.summa_panel_width = summa_panel_width(a[-1], mesh);
  plan.summa_panels = a[-1] / plan.summa_panel_width;
  // One panel: A's [..., M/rows, width] along a mesh row, B's [width, N/cols] along a column.
  Shape a_panel = shard_shape_for(a, xa, mesh, false), b_panel = shard_shape_for(b, xb, mesh, false);
  a_panel[-1] = b_panel[0] = plan.summa_panel_width;
  const CostModel& cost = options.cost;
  const double t_c =
      cost.broadcast_seconds(1, mesh.cols, static_cast<double>(Tensor::storage_bytes(a_panel, a_dtype, Layout::TILE))) +
      cost.broadcast_seconds(0, mesh.rows, static_cast<double>(Tensor::storage_bytes(b_panel, b_dtype, Layout::TILE)));
  // A panel's local work: its product, its float32 sum (the product written, then added into the
  // sum: read twice, written once), and its copies into the panel buffers: A's panel is sliced then
  // copied by the owning column (1/cols of the panels), B's copied by the owning row.
  const double c_bytes = 4.0 * static_cast<double>(a_panel.volume() / a_panel[-1]) * static_cast<double>(b_panel[1]);
  const double copies = 2.0 * static_cast<double>(Tensor::storage_bytes(a_panel, a_dtype, Layout::TILE)) / mesh.cols +
                        static_cast<double>(Tensor::storage_bytes(b_panel, b_dtype, Layout::TILE)) / mesh.rows;
  const double t_p = cost.product_seconds(static_cast<double>(a_panel.volume() / a_panel[-1]),
                                          static_cast<double>(plan.summa_panel_width), static_cast<double>(b_panel[1])) +
                     (2.5 * c_bytes + copies) / cost.copy_bytes_per_s;
  const double panels = static_cast<double>(plan.summa_panels);
  // ...and once at the end the float32 sum cast to the output's dtype.
  plan.compute_s = panels * t_p + c_bytes / cost.copy_bytes_per_s;
  plan.communication_s += panels * t_c;
  plan.overlap_s = (panels - 1) * std::min(t_c, t_p);
  return moved;
}

// The fused forms of a one-product plan whose A move is one all_gather (all_gather_matmul) or
// whose output move is one reduce_scatter onto the product's rows or a batch dim
// (matmul_reduce_scatter), priced as the plan less the overlap the cost model expects; a gather of
// the contraction dim also sums its n chunk products in float32 (two more passes over the
// product each).
std::vector<MatmulPlan> fused_plans(const MatmulPlan& plan, const Shape& a, const Shape& b, MeshShape mesh,
                                    const CostModel& cost) {
  std::vector<MatmulPlan> out;
  if (plan.summa) return out;
  const Shape& c = plan.product_shape;
  const int a_rank = a.rank();
  // The collective matmuls split a batch dim only where b lacks it or broadcasts it.
  auto b_broadcasts = [&](int product_dim) {
    const int d = product_dim - (c.rank() - b.rank());
    return d < 0 || b[d] == 1;
  };
  auto fuse = [&](FusedCollective kind, const RedistributeStep& step, double chunk_transfer_s, double extra_s) {
    MatmulPlan f = plan;
    f.fused = kind;
    const double n = step.members, chunk_product_s = plan.compute_s / n;
    f.compute_s += extra_s + cost.fused_slowdown * plan.compute_s;
    f.overlap_s = cost.overlap_efficiency * (n - 1) * std::min(chunk_transfer_s, chunk_product_s);
    out.push_back(std::move(f));
  };
  if (plan.a.steps.size() == 1 && plan.a.steps[0].kind == StepKind::ALL_GATHER &&
      (plan.a.steps[0].dim >= a_rank - 2 || b_broadcasts(plan.a.steps[0].dim + c.rank() - a_rank))) {
    const RedistributeStep& s = plan.a.steps[0];
    const double local_c_bytes = 4.0 * static_cast<double>(shard_shape_for(c, plan.product, mesh, false).volume());
    fuse(FusedCollective::ALL_GATHER_MATMUL, s, cost.axis[s.axis].seconds(static_cast<double>(s.local_bytes_in)),
         s.dim == a_rank - 1 ? (s.members - 1) * 2.0 * local_c_bytes / cost.copy_bytes_per_s : 0.0);
  }
  if (plan.output.steps.size() == 1 && plan.output.steps[0].kind == StepKind::REDUCE_SCATTER &&
      (plan.output.steps[0].dim == c.rank() - 2 ||
       (plan.output.steps[0].dim < c.rank() - 2 && b_broadcasts(plan.output.steps[0].dim)))) {
    const RedistributeStep& s = plan.output.steps[0];
    fuse(FusedCollective::MATMUL_REDUCE_SCATTER, s,
         cost.reduce_axis[s.axis].seconds(static_cast<double>(s.local_bytes_in) / s.members), 0.0);
  }
  return out;
}

}  // namespace

double LinkCost::seconds(double bytes) const {
  if (const LinkSegment* s = segment_for(above, bytes)) return s->alpha_s + bytes * s->beta_s_per_byte;
  return alpha_s + bytes * beta_s_per_byte;
}

double CostModel::seconds(const RedistributeStep& s) const {
  const double n = s.members, bytes = static_cast<double>(s.local_bytes_in);
  const LinkCost &link = axis[s.axis], &reduce = reduce_axis[s.axis];
  const double packing = static_cast<double>(s.local_copy_bytes) / copy_bytes_per_s;
  switch (s.kind) {
    case StepKind::ALL_GATHER: return (n - 1) * link.seconds(bytes) + packing;
    case StepKind::REDUCE_SCATTER: return (n - 1) * reduce.seconds(bytes / n) + packing;
    // Every block straight to its owner over the axis's links: n-1 messages of a 1/n share.
    case StepKind::ALL_TO_ALL: return (n - 1) * link.seconds(bytes / n) + packing;
    case StepKind::ALL_REDUCE: return 2 * (n - 1) * reduce.seconds(bytes / n);
    case StepKind::LOCAL_SLICE: return bytes / n / copy_bytes_per_s;
  }
  return 0;
}

double CostModel::broadcast_seconds(int a, int members, double bytes) const {
  if (members <= 1 || bytes <= 0) return 0;
  constexpr double kChunkBytes = 1 << 20;  // ccl's default chunk
  const double hops = members / 2, chunks = std::ceil(bytes / kChunkBytes);
  return (hops + chunks - 1) * axis[a].seconds(bytes / chunks);
}

double CostModel::product_seconds(double m, double k, double n) const {
  const double row_blocks = static_cast<double>(kernels::gemm_row_blocks(static_cast<int64_t>(m)));
  return 2.0 * m * k * n / matmul_flops_per_s + m * n * matmul_s_per_output + m * k * matmul_s_per_a +
         k * n * row_blocks * matmul_s_per_b;
}

double CostModel::seconds(const RedistributePlan& plan) const {
  double total = 0;
  for (const auto& s : plan.steps) total += seconds(s);
  return total;
}

std::string MatmulPlan::explain() const {
  std::string out = fmt::format("distributed matmul: {} candidate plan(s); chosen: predicted {:.3f} ms "
                                "(communication {:.3f} ms, local product {:.3f} ms)\n",
                                candidates, 1e3 * predicted_s(), 1e3 * communication_s, 1e3 * compute_s);
  out += "A: " + a.explain() + "B: " + b.explain();
  if (summa)
    out += fmt::format("SUMMA: {} panels of {} K elements, each broadcast along both mesh axes while the one "
                       "before is multiplied ({:.3f} ms of communication hidden)\n",
                       summa_panels, summa_panel_width, 1e3 * overlap_s);
  if (fused != FusedCollective::NONE)
    out += fmt::format("{}: the product of each arrived chunk runs while the next travels ({:.3f} ms hidden)\n",
                       fused == FusedCollective::ALL_GATHER_MATMUL ? "all_gather_matmul" : "matmul_reduce_scatter",
                       1e3 * overlap_s);
  out += fmt::format("local product {} -> placements {}\n", product_shape, meshnn::to_string(product));
  if (!output.steps.empty()) out += "output: " + output.explain();
  return out;
}

std::vector<MatmulPlan> matmul_plans(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements,
                                     const Shape& b, DataType b_dtype, Layout b_layout, const Placements& b_placements,
                                     MeshShape mesh, const DistributedMatmulOptions& options) {
  MESHNN_CHECK(a.rank() >= 2 && b.rank() >= 2, "distributed matmul needs rank >= 2 operands, got A {} and B {}", a, b);
  const Shape c = product_shape(a, b);
  const Dims dims{a.rank(), b.rank(), c.rank(), &a, &b};
  Placements pa = normalize_placements(a_placements, a.rank()), pb = normalize_placements(b_placements, b.rank());
  for (int axis = 0; axis < 2; ++axis)
    if (axis_size(mesh, axis) == 1) pa[axis] = pb[axis] = Replicate{};
  std::vector<MatmulPlan> plans;
  const auto ta = std::array{targets(a, pa[0]), targets(a, pa[1])};
  const auto tb = std::array{targets(b, pb[0]), targets(b, pb[1])};
  for (const Placement& a0 : ta[0])
    for (const Placement& a1 : ta[1])
      for (const Placement& b0 : tb[0])
        for (const Placement& b1 : tb[1]) {
          Placements product;
          bool fits = true;
          const Placements xa{a0, a1}, xb{b0, b1};
          for (int axis = 0; axis < 2 && fits; ++axis) {
            if (axis_size(mesh, axis) == 1) {
              fits = is_replicate(xa[axis]) && is_replicate(xb[axis]);
              product[axis] = Replicate{};
              continue;
            }
            const auto p = product_rule(xa[axis], xb[axis], dims);
            fits = p.has_value();
            if (fits) product[axis] = *p;
          }
          if (!fits) continue;
          Shape local_c;
          try {
            local_c = shard_shape_for(c, product, mesh, false);
          } catch (const Error&) {
            continue;
          }
          std::optional<MatmulPlan> plan =
              plan_moves(a, a_dtype, a_layout, pa, xa, b, b_dtype, b_layout, pb, xb, c, product, mesh, options);
          if (!plan) continue;
          const Shape local_a = shard_shape_for(a, xa, mesh, false);
          plan->compute_s = options.cost.product_seconds(static_cast<double>(local_c.volume() / local_c[-1]),
                                                         static_cast<double>(local_a[-1]),
                                                         static_cast<double>(local_c[-1]));
          plans.push_back(std::move(*plan));
        }
  const size_t one_product_plans = plans.size();
  for (size_t i = 0; i < one_product_plans; ++i)
    for (MatmulPlan& f : fused_plans(plans[i], a, b, mesh, options.cost)) plans.push_back(std::move(f));
  if (auto p = summa_plan(a, a_dtype, a_layout, pa, b, b_dtype, b_layout, pb, c, mesh, options)) plans.push_back(std::move(*p));
  MESHNN_CHECK(!plans.empty(),
               "distributed matmul: no plan for A {} {} times B {} {} on a {} mesh{}: the dims do not split evenly "
               "over the devices in any way that fits",
               a, meshnn::to_string(pa), b, meshnn::to_string(pb), mesh.to_string(),
               options.output_placements ? fmt::format(" giving {}", meshnn::to_string(*options.output_placements)) : "");
  // Cheapest first; among equals the enumeration order, which starts with the operands as they are.
  std::stable_sort(plans.begin(), plans.end(),
                   [](const MatmulPlan& x, const MatmulPlan& y) { return x.predicted_s() < y.predicted_s(); });
  for (MatmulPlan& p : plans) p.candidates = static_cast<int>(plans.size());
  return plans;
}

std::string MatmulPlan::summary() const {
  const char* how = fused == FusedCollective::ALL_GATHER_MATMUL       ? " fused with A's gather (all_gather_matmul)"
                    : fused == FusedCollective::MATMUL_REDUCE_SCATTER ? " fused with the reduce_scatter (matmul_reduce_scatter)"
                                                                      : "";
  return fmt::format("A: {}; B: {}; product {}{}{}; output: {}", a.summary(), b.summary(), meshnn::to_string(product),
                     summa ? fmt::format(" by SUMMA ({} panels)", summa_panels) : "", how, output.summary());
}

MatmulPlan plan_matmul(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements,
                       const Shape& b, DataType b_dtype, Layout b_layout, const Placements& b_placements, MeshShape mesh,
                       const DistributedMatmulOptions& options) {
  std::vector<MatmulPlan> plans =
      matmul_plans(a, a_dtype, a_layout, a_placements, b, b_dtype, b_layout, b_placements, mesh, options);
  // Without a requested output, operands that fit a rule as they are stay as they are: the
  // product keeps their layout, as TT-NN's and DTensor's matmul do.
  if (!options.output_placements)
    for (MatmulPlan& p : plans)
      if (p.a.steps.empty() && p.b.steps.empty()) return std::move(p);
  return std::move(plans.front());
}

const MeshTensor& plan_operand(const MeshTensor& t, const RedistributePlan& moves, MeshTensor& moved) {
  if (moves.steps.empty()) return t;
  moved = redistribute(t, moves.to);
  return moved;
}

MeshTensor plan_product(const MeshTensor& xa, const MeshTensor& xb, const MatmulPlan& plan,
                        const DistributedMatmulOptions& options) {
  MESHNN_CHECK(xa.mesh() == xb.mesh(), "distributed matmul: A and B are on different meshes");
  const MeshDevicePtr& mesh = xa.mesh();
  const DataType out_dtype = options.output_dtype.value_or(xa.dtype());
  if (plan.summa) {
    SummaOptions summa_options;
    summa_options.output_dtype = out_dtype;
    summa_options.panel_width = plan.summa_panel_width;
    return summa(xa, xb, summa_options);
  }
  // Partial sums stay float32 until their reduction, which quantises once.
  const bool partial = is_partial(plan.product[0]) || is_partial(plan.product[1]);
  MatmulOptions local_options;
  local_options.output_dtype = partial && !plan.output.steps.empty() ? DataType::FLOAT32 : out_dtype;
  return MeshTensor(mesh, plan.product_shape, plan.product, meshnn::matmul(xa.local(), xb.local(), false, false, local_options));
}

MeshTensor plan_output(const MeshTensor& product, const MatmulPlan& plan, const DistributedMatmulOptions& options) {
  if (plan.output.to == plan.product && plan.output.steps.empty() && !options.output_placements) return product;
  const DataType out_dtype = options.output_dtype.value_or(product.dtype());
  MeshTensor out = redistribute(product, plan.output.to);
  if (out.dtype() != out_dtype) out = MeshTensor(product.mesh(), out.shape(), out.placements(), out.local().typecast(out_dtype));
  return out;
}

namespace {

// A fused plan's run: the fused collective and the product in one call (collective_matmul.hpp),
// the other moves around it as in any plan.
MeshTensor run_fused(const MeshTensor& a, const MeshTensor& b, const MatmulPlan& plan,
                     const DistributedMatmulOptions& options) {
  CollectiveMatmulOptions fused;
  if (plan.fused == FusedCollective::ALL_GATHER_MATMUL) {
    const RedistributeStep& gather = plan.a.steps.at(0);
    // Partial sums stay float32 until their reduction, as plan_product keeps them.
    const bool partial = is_partial(plan.product[0]) || is_partial(plan.product[1]);
    fused.output_dtype = partial && !plan.output.steps.empty() ? DataType::FLOAT32 : *options.output_dtype;
    MeshTensor moved_b;
    MeshTensor product =
        all_gather_matmul(a, plan_operand(b, plan.b, moved_b), gather.dim, gather.axis, fused).product;
    return plan_output(product, plan, options);
  }
  const RedistributeStep& scatter = plan.output.steps.at(0);
  fused.output_dtype = *options.output_dtype;
  MeshTensor moved_a, moved_b;
  MeshTensor out = matmul_reduce_scatter(plan_operand(a, plan.a, moved_a), plan_operand(b, plan.b, moved_b),
                                         scatter.dim, scatter.axis, fused);
  // Axes of one device take the requested names, as redistribute gives them.
  return MeshTensor(out.mesh(), out.shape(), plan.output.to, std::move(out.local()));
}

}  // namespace

MeshTensor matmul(const MeshTensor& a, const MeshTensor& b, const MatmulPlan& plan, const DistributedMatmulOptions& options) {
  MESHNN_CHECK(a.mesh() == b.mesh(), "distributed matmul: A and B are on different meshes");
  DistributedMatmulOptions resolved = options;
  resolved.output_dtype = options.output_dtype.value_or(a.dtype());
  if (plan.fused != FusedCollective::NONE) return run_fused(a, b, plan, resolved);
  MeshTensor moved_a, moved_b;
  return plan_output(
      plan_product(plan_operand(a, plan.a, moved_a), plan_operand(b, plan.b, moved_b), plan, resolved), plan,
      resolved);
}

MeshTensor matmul(const MeshTensor& a, const MeshTensor& b, const DistributedMatmulOptions& options) {
  MESHNN_CHECK(a.mesh() == b.mesh(), "distributed matmul: A and B are on different meshes");
  return matmul(a, b,
                plan_matmul(a.shape(), a.dtype(), a.layout(), a.placements(), b.shape(), b.dtype(), b.layout(),
                            b.placements(), a.mesh()->shape(), options),
                options);
}

}  // namespace meshnn::distributed
