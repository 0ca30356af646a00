// distributed::matmul over real ranks: every pair of operand placements (Replicate, Shard of each
// dim, Partial) on every mesh shape of the world, with and without requested output placements,
// against a float64 product computed apart; TT-NN's README example; the planner's choice and
// predicted time against costs worked out by hand; impossible requests fail alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "meshnn/core/error.hpp"
#include "meshnn/distributed/calibrate.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/ops/matmul.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using distributed::DistributedMatmulOptions;
using distributed::plan_matmul;
using distributed::StepKind;
using testing::all_ranks_ok;
using testing::all_mesh_shapes;
using testing::world_size;

// Small integers: every product and sum below is exact in float32, so results compare bitwise.
std::vector<float> small_integers(int64_t count, uint64_t seed) {
  std::vector<float> v = testing::seeded_values(count, seed, /*integers=*/true);
  for (float& x : v) x = static_cast<float>(static_cast<int>(x) % 5);
  return v;
}

Tensor host_tensor(const Shape& shape, uint64_t seed) {
  return Tensor::from_float(small_integers(shape.volume(), seed), shape, DataType::FLOAT32, Layout::TILE);
}

// The product in float64, from the row-major values, with B's leading dim broadcast (B is 2-D).
Tensor reference_product(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_float(), y = b.to_float();
  const int64_t batch = a.shape().rank() == 3 ? a.shape()[0] : 1, m = a.shape()[-2], k = a.shape()[-1],
                n = b.shape()[-1];
  std::vector<float> out(static_cast<size_t>(batch * m * n));
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += static_cast<double>(x[static_cast<size_t>((t * m + i) * k + p)]) * y[static_cast<size_t>(p * n + j)];
        out[static_cast<size_t>((t * m + i) * n + j)] = static_cast<float>(sum);
      }
  std::vector<int64_t> dims = a.shape().rank() == 3 ? std::vector<int64_t>{batch, m, n} : std::vector<int64_t>{m, n};
  return Tensor::from_float(out, Shape(dims), DataType::FLOAT32, Layout::TILE);
}

MeshTensor with_placements(const Tensor& host, const Placements& ps, const MeshDevicePtr& mesh) {
  return testing::with_logical_value(host, ps, mesh, host_tensor(host.shape(), 50), host_tensor(host.shape(), 51));
}

std::vector<Placement> candidates(int rank) {
  std::vector<Placement> out{Replicate{}, Partial{}};
  for (int d = 0; d < rank; ++d) out.push_back(Shard{d});
  return out;
}

// Every placement of A [4, 32, 64] and B [64, 64] on both axes that this mesh can hold; the product composed whole (after
// moving a Partial result to Replicate) equals the float64 product bit for bit.
TEST(DistributedMatmul, EveryPairOfPlacementsOnEveryMesh) {
  const Tensor a = host_tensor(Shape{4, 32, 64}, 1), b = host_tensor(Shape{64, 64}, 2);
  const Tensor expected = reference_product(a, b);
  const std::vector<Placements> outputs = {{Replicate{}, Replicate{}}, {Shard{1}, Shard{2}}, {Replicate{}, Shard{0}}};
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    // The issue's meshes (1x2, 2x1, 2x2, 1x4, 2x4): the others of 8 ranks add minutes, not cases.
    if (ms.rows > 2 && ms.cols < ms.rows) continue;
    if (world_size() == 8 && ms.rows != 2) continue;
    auto mesh = MeshDevice::open(ms);
    int checked = 0, failed = 0, refused = 0;
    std::string first;
    for (const Placement& a0 : candidates(3))
      for (const Placement& a1 : candidates(3))
        for (const Placement& b0 : candidates(2))
          for (const Placement& b1 : candidates(2)) {
            const Placements pa{a0, a1}, pb{b0, b1};
            if (testing::error_message_of([&] {
                  shard_shape_for(a.shape(), pa, ms, false);
                  shard_shape_for(b.shape(), pb, ms, false);
                }) != "")
              continue;  // operands that cannot be laid out so in the first place
            const MeshTensor ma = with_placements(a, pa, mesh), mb = with_placements(b, pb, mesh);
            const MeshTensor free_choice = distributed::matmul(ma, mb);
            Tensor whole = full_tensor(distributed::redistribute(free_choice, {Replicate{}, Replicate{}}));
            bool ok = testing::bitwise_equal(whole, expected);
            // A requested output placement, cycling through a few.
            const Placements want = outputs[static_cast<size_t>(checked) % outputs.size()];
            DistributedMatmulOptions options;
            options.output_placements = want;
            const std::string message = testing::error_message_of([&] {
              const MeshTensor placed = distributed::matmul(ma, mb, options);
              ok = ok && placed.placements() == normalize_placements(want, 3) &&
                   testing::bitwise_equal(full_tensor(placed), expected);
            });
            // Refused exactly when the requested output cannot be laid out on this mesh.
            const bool impossible =
                !testing::error_message_of([&] { shard_shape_for(expected.shape(), want, ms, false); }).empty();
            ok = ok && message.empty() != impossible;
            refused += message.empty() ? 0 : 1;
            ++checked;
            if (!ok && failed++ == 0) first = to_string(pa) + " x " + to_string(pb) + " -> " + to_string(want);
          }
    EXPECT_TRUE(all_ranks_ok(failed == 0)) << ms.to_string() << ": " << failed << " of " << checked << " wrong, first "
                                           << first << " (" << refused << " refused)";
  }
}

// Every plan the planner considers, not only its choice, computes the product.
TEST(DistributedMatmul, EveryCandidatePlanGivesTheProduct) {
  const Tensor a = host_tensor(Shape{64, 64}, 11), b = host_tensor(Shape{64, 128}, 12);
  const Tensor expected = reference_product(a, b);
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    if (ms.rows > 2) continue;
    auto mesh = MeshDevice::open(ms);
    const MeshTensor ma = with_placements(a, {Replicate{}, Shard{0}}, mesh);
    const MeshTensor mb = with_placements(b, {Partial{}, Shard{0}}, mesh);
    DistributedMatmulOptions options;
    options.output_placements = Placements{Replicate{}, Replicate{}};
    const auto plans = distributed::matmul_plans(a.shape(), a.dtype(), a.layout(), ma.placements(), b.shape(),
                                                 b.dtype(), b.layout(), mb.placements(), ms, options);
    int wrong = 0;
    for (const auto& plan : plans)
      wrong += testing::bitwise_equal(distributed::matmul(ma, mb, plan, options).local(), expected) ? 0 : 1;
    EXPECT_TRUE(all_ranks_ok(wrong == 0)) << ms.to_string() << ": " << wrong << " of " << plans.size() << " plans wrong";
    for (size_t i = 1; i < plans.size(); ++i) EXPECT_LE(plans[i - 1].predicted_s(), plans[i].predicted_s());
  }
}

// TT-NN's README example: replicated A [4, 1, 64, 64] times replicated B [1, 1, 64, 128] on a 2x4 mesh
// (any mesh of this world's size here): a local product, nothing moves, the result replicated.
TEST(DistributedMatmul, TtnnReadmeExampleRunsLocally) {
  const Tensor a = host_tensor(Shape{4, 1, 64, 64}, 3), b = host_tensor(Shape{1, 1, 64, 128}, 4);
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    const MeshTensor ma = distribute_tensor(a, ReplicateTensorToMesh(), mesh);
    const MeshTensor mb = distribute_tensor(b, ReplicateTensorToMesh(), mesh);
    const auto plan = plan_matmul(a.shape(), a.dtype(), a.layout(), ma.placements(), b.shape(), b.dtype(), b.layout(),
                                  mb.placements(), ms);
    EXPECT_TRUE(plan.a.steps.empty() && plan.b.steps.empty() && plan.communication_s == 0) << plan.explain();
    const MeshTensor c = distributed::matmul(ma, mb);
    EXPECT_EQ(c.shape(), (Shape{4, 1, 64, 128}));
    EXPECT_TRUE(all_ranks_ok(is_replicate(c.placement(0)) && is_replicate(c.placement(1)) &&
                             testing::bitwise_equal(c.local(), meshnn::matmul(a, b))));
  }
}

// A [64, 128] Shard(0) times B [128, 256] Shard(1) on a 1x2 mesh, alpha 1 ms and beta 1 ms/KiB
// for gathers and reductions alike: gathering A costs 1 ms + 16 KiB (the [32, 128] float32 shard)
// = 17 ms; gathering B, 1 + 64 = 65 ms. Re-cutting A to Shard(K) is an all_to_all of half its
// shard (1 + 8 = 9 ms) but needs B re-cut alike (1 + 32 = 33 ms) and the partial product reduced
// (an all_reduce of the [64, 256] product: 2 x (1 + 32) = 66 ms). The planner gathers A.
TEST(DistributedMatmul, PlannerPicksTheCheapestByHandComputedCosts) {
  DistributedMatmulOptions options;
  for (auto& link : options.cost.axis) link = {1e-3, 1e-3 / 1024};
  for (auto& link : options.cost.reduce_axis) link = {1e-3, 1e-3 / 1024};
  options.cost.matmul_flops_per_s = 1e15;  // compute negligible next to the link
  options.cost.copy_bytes_per_s = 1e15;
  const auto plan = plan_matmul(Shape{64, 128}, DataType::FLOAT32, Layout::TILE, {Replicate{}, Shard{0}},
                                Shape{128, 256}, DataType::FLOAT32, Layout::TILE, {Replicate{}, Shard{1}}, {1, 2}, options);
  ASSERT_EQ(plan.a.steps.size(), 1u) << plan.explain();
  EXPECT_EQ(plan.a.steps[0].kind, StepKind::ALL_GATHER);
  EXPECT_TRUE(plan.b.steps.empty());
  EXPECT_EQ(plan.product[1], Placement{Shard{1}});
  EXPECT_NEAR(plan.communication_s, 17e-3, 1e-9) << plan.explain();
  EXPECT_GT(plan.candidates, 1);
  // Asked for a replicated output the cheapest is gathering B first (65 ms), then no output move,
  // against gathering A (17) and then the [64, 256] product's halves (1 + 32 = 33): 50 ms; both
  // re-cut to Shard(K) come to 9 + 33 + 66 = 108 ms.
  options.output_placements = Placements{Replicate{}, Replicate{}};
  const auto replicated = plan_matmul(Shape{64, 128}, DataType::FLOAT32, Layout::TILE, {Replicate{}, Shard{0}},
                                      Shape{128, 256}, DataType::FLOAT32, Layout::TILE, {Replicate{}, Shard{1}}, {1, 2},
                                      options);
  EXPECT_NEAR(replicated.communication_s, 50e-3, 1e-9) << replicated.explain();
}

// Fused collective matmuls are candidates priced as their unfused plan less the overlap the cost
// model expects, chosen only when that wins, and run by all_gather_matmul / matmul_reduce_scatter
// with the unfused plan's result. Costs by hand on 1x2, A [64, 128] split on rows, B [128, 256]
// whole, output replicated; links 1 ms + 1 ms per KiB, the whole product 40 ms:
//   gather A (16 KiB shard: 17 ms), then the whole product:  57 ms
//   fused, overlap_efficiency 0.5: 57 - 0.5 min(17, 40 / 2) = 48.5 ms
//   the product of A's rows (20 ms), then gather the [32, 256] output (32 KiB: 33 ms): 53 ms
TEST(DistributedMatmul, FusedPlansAreChosenOnlyWhereTheirOverlapWins) {
  auto mesh = MeshDevice::open({1, world_size()});
  const int n = world_size();
  const Shape sa{32 * n, 128}, sb{128, 256};
  DistributedMatmulOptions options;
  for (auto& link : options.cost.axis) link = {1e-3, 1e-3 / 1024};
  for (auto& link : options.cost.reduce_axis) link = {1e-3, 1e-3 / 1024};
  options.cost.matmul_flops_per_s = 2.0 * 64 * 128 * 256 / 40e-3;
  options.cost.copy_bytes_per_s = 1e15;
  options.output_placements = Placements{Replicate{}, Replicate{}};
  auto plan = [&] {
    return plan_matmul(sa, DataType::FLOAT32, Layout::TILE, {Replicate{}, Shard{0}}, sb, DataType::FLOAT32,
                       Layout::TILE, {Replicate{}, Replicate{}}, mesh->shape(), options);
  };
  if (n == 2) {
    EXPECT_EQ(plan().fused, distributed::FusedCollective::NONE) << plan().explain();
    EXPECT_NEAR(plan().predicted_s(), 53e-3, 1e-9) << plan().explain();
    options.cost.overlap_efficiency = 0.5;
    const auto fused = plan();
    EXPECT_EQ(fused.fused, distributed::FusedCollective::ALL_GATHER_MATMUL) << fused.explain();
    EXPECT_NEAR(fused.predicted_s(), 48.5e-3, 1e-9) << fused.explain();
    EXPECT_NE(fused.explain().find("all_gather_matmul"), std::string::npos) << fused.explain();
    // A fused form that costs a tenth of its product more: 48.5 + 4 = 52.5 ms, still the cheapest.
    options.cost.fused_slowdown = 0.1;
    EXPECT_NEAR(plan().predicted_s(), 52.5e-3, 1e-9) << plan().explain();
    options.cost.fused_slowdown = 0;
  }
  if (n < 2) return;
  // Every fused candidate runs and gives its unfused twin's result (the operands are small
  // integers, so even the K split's other order of float32 sums is exact): A split on rows, on a
  // batch dim, on K with B whole, and on K with B split alike (partial sums scattered on rows).
  options.cost.overlap_efficiency = 1;
  struct Case {
    Shape a, b;
    Placement pa, pb, out;
  };
  const Case cases[] = {
      {sa, sb, Shard{0}, Replicate{}, Replicate{}},
      {Shape{2 * n, 32, 64}, Shape{64, 96}, Shard{0}, Replicate{}, Replicate{}},
      {Shape{64, 32 * n}, Shape{32 * n, 64}, Shard{1}, Replicate{}, Replicate{}},
      {Shape{32 * n, 32 * n}, Shape{32 * n, 64}, Shard{1}, Shard{0}, Shard{0}},
  };
  int fused_runs[3] = {0, 0, 0};
  for (const Case& k : cases) {
    options.output_placements = Placements{Replicate{}, k.out};
    const Tensor ha = host_tensor(k.a, 31), hb = host_tensor(k.b, 32);
    const MeshTensor a = with_placements(ha, {Replicate{}, k.pa}, mesh);
    const MeshTensor b = with_placements(hb, {Replicate{}, k.pb}, mesh);
    for (const auto& p : distributed::matmul_plans(k.a, a.dtype(), a.layout(), a.placements(), k.b, b.dtype(),
                                                   b.layout(), b.placements(), mesh->shape(), options)) {
      if (p.fused == distributed::FusedCollective::NONE) continue;
      distributed::MatmulPlan twin = p;
      twin.fused = distributed::FusedCollective::NONE;
      const Tensor got = full_tensor(distributed::matmul(a, b, p, options));
      const Tensor want = full_tensor(distributed::matmul(a, b, twin, options));
      EXPECT_TRUE(all_ranks_ok(testing::bitwise_equal(got, want))) << p.summary();
      EXPECT_TRUE(all_ranks_ok(testing::bitwise_equal(got, reference_product(ha, hb)))) << p.summary();
      ++fused_runs[static_cast<int>(p.fused)];
    }
  }
  EXPECT_GT(fused_runs[static_cast<int>(distributed::FusedCollective::ALL_GATHER_MATMUL)], 2);
  EXPECT_GT(fused_runs[static_cast<int>(distributed::FusedCollective::MATMUL_REDUCE_SCATTER)], 0);
}

// A short calibration gives every rank the same positive figures, and they survive a file.
TEST(DistributedMatmul, CalibrationIsSharedAndSurvivesAFile) {
  auto mesh = MeshDevice::open({1, world_size()});
  distributed::CalibrationOptions options;
  options.gather_bytes = {1 << 12, 1 << 16, 1 << 18};
  options.repeats = 3;
  options.products = {{64, 256, 256}};
  const distributed::Calibration c = distributed::calibrate(mesh, options);
  EXPECT_TRUE(testing::same_on_all_ranks(c.describe())) << c.describe();
  EXPECT_GT(c.model.matmul_flops_per_s, 1e6);
  EXPECT_GT(c.model.copy_bytes_per_s, 1e6);
  if (world_size() > 1) {
    EXPECT_GT(c.model.axis[1].beta_s_per_byte, 0);
  }
  const std::string path = ::testing::TempDir() + "/meshnn_cost_" + std::to_string(testing::world_rank()) + ".json";
  distributed::save_cost_model(c.model, path);
  const distributed::CostModel back = distributed::load_cost_model(path);
  for (int a = 0; a < 2; ++a) {
    EXPECT_EQ(back.axis[a].alpha_s, c.model.axis[a].alpha_s);
    EXPECT_EQ(back.axis[a].beta_s_per_byte, c.model.axis[a].beta_s_per_byte);
    EXPECT_EQ(back.axis[a].above.size(), c.model.axis[a].above.size());
    for (double bytes : {1e3, 1e5, 1e7}) {
      EXPECT_EQ(back.axis[a].seconds(bytes), c.model.axis[a].seconds(bytes));
      EXPECT_EQ(back.reduce_axis[a].seconds(bytes), c.model.reduce_axis[a].seconds(bytes));
    }
  }
  EXPECT_EQ(back.matmul_flops_per_s, c.model.matmul_flops_per_s);
  EXPECT_EQ(back.matmul_s_per_output, c.model.matmul_s_per_output);
  EXPECT_EQ(back.matmul_s_per_a, c.model.matmul_s_per_a);
  EXPECT_EQ(back.matmul_s_per_b, c.model.matmul_s_per_b);
  EXPECT_EQ(back.overlap_efficiency, c.model.overlap_efficiency);
  EXPECT_EQ(back.fused_slowdown, c.model.fused_slowdown);
  EXPECT_TRUE(c.model.overlap_efficiency >= 0 && c.model.overlap_efficiency <= 1);
  EXPECT_EQ(c.overlap.axis >= 0, world_size() > 1) << c.describe();
  std::ofstream(path) << R"({"axes": [{"alpha_s": 1e-6, "beta_s_per_byte": 1e-9}], "matmul_flops_per_s": 1})";
  const std::string bad = testing::error_message_of([&] { distributed::load_cost_model(path); });
  EXPECT_NE(bad.find("'axes' must list the two mesh axes"), std::string::npos) << bad;
  std::remove(path.c_str());
}

// The product cost's fit: times made from known terms give the terms back (the default
// calibration shapes tell all four apart); terms the times do not support stay 0; one product
// gives the FLOP rate alone.
TEST(DistributedMatmul, ProductCostFitRecoversItsTerms) {
  distributed::CostModel truth;
  truth.matmul_flops_per_s = 3e11;
  truth.matmul_s_per_output = 0.5e-9;
  truth.matmul_s_per_a = 0.2e-9;
  truth.matmul_s_per_b = 0.3e-9;
  auto timed = [](const distributed::CostModel& model) {
    std::vector<distributed::ProductSample> samples;
    for (const auto& p : distributed::CalibrationOptions{}.products)
      samples.push_back({p.m, p.k, p.n, model.product_seconds(p.m, p.k, p.n)});
    return samples;
  };
  const distributed::ProductFit fit = distributed::fit_product_cost(timed(truth));
  EXPECT_NEAR(fit.flops_per_s / truth.matmul_flops_per_s, 1.0, 1e-6);
  EXPECT_NEAR(fit.s_per_output / truth.matmul_s_per_output, 1.0, 1e-6);
  EXPECT_NEAR(fit.s_per_a / truth.matmul_s_per_a, 1.0, 1e-6);
  EXPECT_NEAR(fit.s_per_b / truth.matmul_s_per_b, 1.0, 1e-6);
  EXPECT_LT(fit.max_relative_error, 1e-9);

  distributed::CostModel flat;  // the rate alone: the other terms fit to 0
  flat.matmul_flops_per_s = 2e11;
  const distributed::ProductFit rate_only = distributed::fit_product_cost(timed(flat));
  EXPECT_NEAR(rate_only.flops_per_s / flat.matmul_flops_per_s, 1.0, 1e-6);
  EXPECT_NEAR(rate_only.s_per_output + rate_only.s_per_a + rate_only.s_per_b, 0.0, 1e-15);

  const distributed::ProductFit one = distributed::fit_product_cost({{256, 512, 1024, 2.0 * 256 * 512 * 1024 / 1e11}});
  EXPECT_NEAR(one.flops_per_s / 1e11, 1.0, 1e-12);
  EXPECT_EQ(one.s_per_output, 0.0);
}

// A link of several ranges prices each message by the range that holds its size, and keeps its
// ranges through a file; ranges out of order are an error naming them.
TEST(DistributedMatmul, PiecewiseLinksPriceByRangeAndSurviveAFile) {
  distributed::CostModel model;
  model.axis[1] = {1e-6, 1e-9, {{1024, 2e-6, 1e-10}, {1 << 20, 0, 2e-10}}};
  EXPECT_DOUBLE_EQ(model.axis[1].seconds(1000), 1e-6 + 1000 * 1e-9);
  EXPECT_DOUBLE_EQ(model.axis[1].seconds(1024), 2e-6 + 1024 * 1e-10);
  EXPECT_DOUBLE_EQ(model.axis[1].seconds(1 << 21), (1 << 21) * 2e-10);
  // A gather of a 4 KiB shard on 2 devices: one message in the middle range.
  distributed::RedistributeStep step{StepKind::ALL_GATHER, 1, 0, ReduceOp::SUM, {}, 2, 4096};
  EXPECT_DOUBLE_EQ(model.seconds(step), 2e-6 + 4096 * 1e-10);
  const std::string path = ::testing::TempDir() + "/meshnn_ranges_" + std::to_string(testing::world_rank()) + ".json";
  distributed::save_cost_model(model, path);
  const distributed::CostModel back = distributed::load_cost_model(path);
  ASSERT_EQ(back.axis[1].above.size(), 2u);
  for (double bytes : {100.0, 5000.0, 4e6}) EXPECT_EQ(back.axis[1].seconds(bytes), model.axis[1].seconds(bytes));
  std::ofstream(path) << R"({"axes": [{"alpha_s": 0, "beta_s_per_byte": 1, "reduce_alpha_s": 0,
      "reduce_beta_s_per_byte": 1}, {"alpha_s": 0, "beta_s_per_byte": 1, "reduce_alpha_s": 0,
      "reduce_beta_s_per_byte": 1, "above": [{"from_bytes": 4096, "alpha_s": 0, "beta_s_per_byte": 1},
      {"from_bytes": 1024, "alpha_s": 0, "beta_s_per_byte": 1}]}], "matmul_flops_per_s": 1, "copy_bytes_per_s": 1})";
  const std::string bad = testing::error_message_of([&] { distributed::load_cost_model(path); });
  EXPECT_NE(bad.find("axes[1].above must start at rising sizes"), std::string::npos) << bad;
  std::remove(path.c_str());
}

TEST(DistributedMatmul, ImpossibleRequestsFailAlikeBeforeAnythingMoves) {
  auto mesh = MeshDevice::open({1, world_size()});
  const MeshTensor a = with_placements(host_tensor(Shape{32, 64}, 5), {Replicate{}, Replicate{}}, mesh);
  const MeshTensor b = with_placements(host_tensor(Shape{48, 64}, 6), {Replicate{}, Replicate{}}, mesh);
  const std::string inner = testing::error_message_of([&] { distributed::matmul(a, b); });
  EXPECT_NE(inner.find("inner dims differ"), std::string::npos) << inner;
  EXPECT_TRUE(testing::same_on_all_ranks(inner));
  if (world_size() > 1) {
    // Three rows cannot be split over the devices, whatever moves first.
    DistributedMatmulOptions options;
    options.output_placements = Placements{Replicate{}, Shard{0}};
    const MeshTensor a3 = with_placements(host_tensor(Shape{3, 64}, 5), {Replicate{}, Replicate{}}, mesh);
    const MeshTensor b2 = with_placements(host_tensor(Shape{64, 64}, 6), {Replicate{}, Replicate{}}, mesh);
    const std::string uneven = testing::error_message_of([&] { distributed::matmul(a3, b2, options); });
    EXPECT_NE(uneven.find("no plan"), std::string::npos) << uneven;
    EXPECT_TRUE(testing::same_on_all_ranks(uneven));
  }
}

}  // namespace
}  // namespace meshnn
