// distributed::matmul: C = A @ B on mesh tensors of any placements, what TT-NN's
// ttnn.distributed.matmul sets out to be. Each mesh axis of the local product follows one rule:
//
//   A           B           local product
//   Replicate   Replicate   Replicate
//   Shard(M)    Replicate   Shard(M)        row-parallel over the axis
//   Replicate   Shard(N)    Shard(N)        column-parallel
//   Shard(K)    Shard(K)    Partial(sum)    contraction split: sums pending
//   Partial     Replicate   Partial(sum)    (and mirrored)
//   Shard(b)    Shard(b)    Shard(b)        a batch dim both have; or one side's, where the other
//                                           broadcasts it
//
// Operands that fit a rule as they are multiply in place, and the product keeps their layout (as
// TT-NN's and DTensor's matmul do). Otherwise, or when output placements are requested, the
// planner considers every way of moving the operands (redistribute: gathers, reductions, local
// slices) into a rule, plus the product's move to the requested placements, and picks the least
// predicted time: communication from an alpha-beta model per mesh axis plus the local product from
// a FLOP rate (CostModel). plan_matmul is pure (the same
// on every rank, no data needed: a dry run); every impossible request is an error before any
// communication.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshnn/distributed/link_segment.hpp"
#include "meshnn/distributed/redistribute.hpp"

namespace meshnn::distributed {

// Time of moving a message along one mesh axis: alpha per message, beta per byte. A calibrated
// link has further ranges, each from some size on with its own alpha and beta (protocols and
// caches change with the size: one line fitted to 16 MiB messages overprices 1 MiB ones twice);
// the defaults are one range.
struct LinkCost {
  double alpha_s = 5e-6;
  double beta_s_per_byte = 1.0 / 4e9;
  std::vector<LinkSegment> above;  // ascending from_bytes, all > 0
  double seconds(double bytes) const;
};

struct CostModel {
  LinkCost axis[2];                  // gathers along cluster_axis 0 (a column) and 1 (a row)
  LinkCost reduce_axis[2];           // reductions, whose steps also add what arrives
  double matmul_flops_per_s = 5e10;  // one device's local matmul rate
  // What a local product costs beyond its FLOPs at that rate (product_seconds): the blocked
  // kernel's work outside its micro-kernel, per output value (C written and converted), per value
  // of A (packed once) and per value of B for each block of A's rows (B is decoded once per block,
  // kernels::gemm_row_blocks). The rate alone mispriced shapes by 10-15% (K = 512 against 2048, M
  // = 1024 against 512). 0 unless calibrated.
  double matmul_s_per_output = 0, matmul_s_per_a = 0, matmul_s_per_b = 0;
  double copy_bytes_per_s = 1e10;    // local slices
  // The share of a chunk's transfer a fused collective matmul hides behind the product of the
  // chunk before (collective_matmul.hpp), from 0 to 1. It is the machine's, not the algorithm's:
  // where the transport's copies take the very core the product needs (shared memory with one
  // core per rank) nothing is hidden; a network card or a spare core moves data on its own. 0
  // unless calibrated: the planner then never prefers a fused form.
  double overlap_efficiency = 0;
  // The share of the product's time a fused form adds: its chunk products are smaller than one
  // product, and a row split reads all of B once per block. Calibrated beside overlap_efficiency
  // (one measurement gives their net effect: a fused form slower than unfused sets this, one
  // faster sets overlap_efficiency).
  double fused_slowdown = 0;
  // Seconds each step of a plan takes (ring schedules: n - 1 messages of a shard each for a
  // gather, of a 1/n slice for a reduce_scatter, twice that for an all_reduce), plus the step's
  // local packing (RedistributeStep::local_copy_bytes) at the copy rate.
  double seconds(const RedistributeStep& step) const;
  double seconds(const RedistributePlan& plan) const;
  // A broadcast of `bytes` along `axis` among `members` as ccl's AUTO schedule relays it on a
  // ring: two chains of h = ceil((members-1)/2) hops, the buffer in c = ceil(bytes / 1 MiB)
  // chunks pipelined down them: (h + c - 1) * (alpha + bytes / c * beta).
  double broadcast_seconds(int axis, int members, double bytes) const;
  // One device's product [m, k] x [k, n] (m: all its rows, batches folded).
  double product_seconds(double m, double k, double n) const;
};

struct DistributedMatmulOptions {
  std::optional<Placements> output_placements;  // default: the local product's
  std::optional<DataType> output_dtype;         // default: A's dtype
  CostModel cost;
};

// A collective run fused with the local product (collective_matmul.hpp) instead of before or
// after it: A's one all_gather with the product, or the product with the output's one
// reduce_scatter.
enum class FusedCollective { NONE, ALL_GATHER_MATMUL, MATMUL_REDUCE_SCATTER };

struct MatmulPlan {
  RedistributePlan a, b;  // the operands' moves
  Placements product;     // placements of the local product
  RedistributePlan output;  // the product's move to the requested placements (no steps without one)
  Shape product_shape;
  double compute_s = 0, communication_s = 0;
  // SUMMA (summa.hpp) instead of one local product: panels of summa_panel_width K elements,
  // broadcast along both axes while the previous panel is multiplied. overlap_s is the
  // communication hidden behind the products: with P panels, t_c both broadcasts of one panel and
  // t_p one panel's product, the pipeline takes t_c + (P-1) max(t_c, t_p) + t_p, so
  // overlap_s = (P-1) min(t_c, t_p) off the sum P t_c + P t_p.
  bool summa = false;
  int64_t summa_panel_width = 0, summa_panels = 0;
  // Fused: the fused step (a.steps[0] or output.steps[0]) runs chunk by chunk with the product,
  // n chunks for its n members; overlap_s = overlap_efficiency (n-1) min(one chunk's transfer,
  // one chunk's product), and compute_s grows by fused_slowdown of the product.
  FusedCollective fused = FusedCollective::NONE;
  double overlap_s = 0;
  int candidates = 0;  // ways considered
  double predicted_s() const { return compute_s + communication_s - overlap_s; }
  double bytes_received() const { return a.bytes_received() + b.bytes_received() + output.bytes_received(); }
  std::string explain() const;
  std::string summary() const;  // one line: each operand's moves, the product, the output's move
};

// Every plan considered, cheapest predicted first.
std::vector<MatmulPlan> matmul_plans(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements,
                                     const Shape& b, DataType b_dtype, Layout b_layout, const Placements& b_placements,
                                     MeshShape mesh, const DistributedMatmulOptions& options = {});

// The plan matmul runs: the operands as they are when they fit a rule and no output placement
// is requested, else the cheapest of matmul_plans.
MatmulPlan plan_matmul(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements,
                       const Shape& b, DataType b_dtype, Layout b_layout, const Placements& b_placements, MeshShape mesh,
                       const DistributedMatmulOptions& options = {});

// Runs plan_matmul's plan. Collective over the operands' mesh (both must be on the same one).
MeshTensor matmul(const MeshTensor& a, const MeshTensor& b, const DistributedMatmulOptions& options = {});
// Runs a given plan (one of matmul_plans for these operands: benchmarks time the alternatives).
MeshTensor matmul(const MeshTensor& a, const MeshTensor& b, const MatmulPlan& plan,
                  const DistributedMatmulOptions& options = {});

// The parts of a plan's run, in order, for callers that time each (a benchmark against its
// predictions, a job splitting compute from communication): the operands' moves (plan_operand);
// then the
// product of the moved operands (predicted plan.compute_s, or for SUMMA its whole pipeline); then
// the product's move to the output placements and to options.output_dtype (unset: the product's
// dtype), predicted cost.seconds(plan.output).
// An operand as the plan's product takes it: `t` itself when its moves have no steps (no copy: a
// weight that stays where it is must not be copied on every call), else redistribute(t, moves.to),
// kept in `moved`.
const MeshTensor& plan_operand(const MeshTensor& t, const RedistributePlan& moves, MeshTensor& moved);
MeshTensor plan_product(const MeshTensor& moved_a, const MeshTensor& moved_b, const MatmulPlan& plan,
                        const DistributedMatmulOptions& options = {});
MeshTensor plan_output(const MeshTensor& product, const MatmulPlan& plan, const DistributedMatmulOptions& options = {});

}  // namespace meshnn::distributed
