// SUMMA over real ranks: every mesh shape of the world (1xN and Nx1 included, where only one
// operand's panels travel), float32 and bfloat16 activations with bfloat16 / bfloat8_b weights,
// against a float64 product of the whole operands and against distributed::matmul's other plans;
// the same bits whatever the schedule, chunking and lookahead; the planner's price worked out by
// hand; argument problems fail alike on every rank before anything moves.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "meshnn/core/error.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/distributed/summa.hpp"
#include "meshnn/tensor/concat.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using distributed::SummaOptions;
using testing::all_mesh_shapes;
using testing::all_ranks_ok;
using testing::world_size;

// Values as `dtype` stores them, held as float32 (a shard of them converts back without change),
// small integers when `integers` (then every product and sum is exact in float32).
Tensor stored_values(const Shape& shape, uint64_t seed, DataType dtype, bool integers) {
  std::vector<float> v = integers ? testing::seeded_values(shape.volume(), seed, true)
                                  : testing::normal_values(shape.volume(), static_cast<uint32_t>(seed));
  if (integers)
    for (float& x : v) x = static_cast<float>(static_cast<int>(x) % 5);
  return Tensor::from_float(v, shape, dtype, Layout::TILE).typecast(DataType::FLOAT32);
}

MeshTensor placed(const Tensor& host, DataType dtype, const Placements& ps, const MeshDevicePtr& mesh) {
  const Tensor zero(host.shape(), DataType::FLOAT32, Layout::TILE);
  const MeshTensor t = testing::with_logical_value(host, ps, mesh, zero, zero);
  return MeshTensor(mesh, t.shape(), t.placements(), t.local().typecast(dtype));
}

// This device's block of C: rows of its mesh row, columns of its mesh column (from whole A and B).
struct Block {
  Tensor a_rows, b_columns;
};
Block block_of(const Tensor& a, const Tensor& b, const MeshDevice& mesh) {
  const MeshCoordinate me = mesh.coordinate();
  const int64_t m = a.shape()[-2] / mesh.num_rows(), n = b.shape()[-1] / mesh.num_cols();
  return {slice(a, a.shape().rank() - 2, me.row * m, (me.row + 1) * m), slice(b, 1, me.col * n, (me.col + 1) * n)};
}

struct Case {
  Shape a, b;
  DataType act, weight, out;
  bool integers;
};

// The cheapest plan of distributed::matmul that is not SUMMA (gathers and local products).
MeshTensor other_plan(const MeshTensor& a, const MeshTensor& b, DataType out) {
  distributed::DistributedMatmulOptions o;
  o.output_dtype = out;
  o.output_placements = distributed::summa_c_placements(a.shape().rank(), a.mesh()->shape());
  for (const auto& plan : distributed::matmul_plans(a.shape(), a.dtype(), a.layout(), a.placements(), b.shape(), b.dtype(),
                                                    b.layout(), b.placements(), a.mesh()->shape(), o))
    if (!plan.summa) return distributed::matmul(a, b, plan, o);
  throw Error("no plan without SUMMA");
}

// Every mesh of the world: within the dtypes' rounding of the float64 product
// (testing::matmul_close_to_float64: 2u|x||w| + K 2^-24 |x||w| per element, u = 2^-24 float32,
// 2^-8 bfloat16 output), and of distributed::matmul's other plans' result (both within that bound
// of the float64 product, hence of each other); bit for bit equal to them on small integers, where
// every sum is exact.
TEST(Summa, EveryMeshAgainstFloat64AndDistributedMatmul) {
  const std::vector<Case> cases = {
      {Shape{64, 256}, Shape{256, 128}, DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT32, false},
      {Shape{2, 64, 256}, Shape{256, 128}, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT16, false},
      {Shape{64, 256}, Shape{256, 64}, DataType::FLOAT32, DataType::BFLOAT8_B, DataType::FLOAT32, false},
      {Shape{64, 256}, Shape{256, 64}, DataType::BFLOAT16, DataType::BFLOAT16, DataType::FLOAT32, false},
      {Shape{64, 512}, Shape{512, 64}, DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT32, true},
  };
  int checked = 0;
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (const Case& c : cases) {
      const Tensor host_a = stored_values(c.a, 21, c.act, c.integers), host_b = stored_values(c.b, 22, c.weight, c.integers);
      const MeshTensor a = placed(host_a, c.act, distributed::summa_a_placements(c.a.rank(), ms), mesh);
      const MeshTensor b = placed(host_b, c.weight, distributed::summa_b_placements(ms), mesh);
      SummaOptions o;
      o.output_dtype = c.out;
      const MeshTensor got = distributed::summa(a, b, o);
      const Block mine = block_of(host_a, host_b, *mesh);
      const bool right = testing::matmul_close_to_float64(mine.a_rows, mine.b_columns, got.local(), c.out);
      const MeshTensor other = other_plan(a, b, c.out);
      const bool other_right = testing::matmul_close_to_float64(mine.a_rows, mine.b_columns, other.local(), c.out);
      const bool placements = got.placements() == other.placements() && got.shape() == other.shape();
      const bool exact = !c.integers || testing::bitwise_equal(got.local(), other.local());
      EXPECT_TRUE(all_ranks_ok(right && other_right && placements && exact))
          << ms.to_string() << " A " << fmt::format("{}", c.a) << " " << to_string(c.act) << " x "
          << to_string(c.weight) << " -> " << to_string(c.out) << ": close to float64 " << right
          << ", other plan close " << other_right << ", placements " << placements << ", exact " << exact;
      ++checked;
    }
  }
  EXPECT_GE(checked, 5);
}

// The accumulation order is the panel order whatever moves the panels: every schedule, chunking
// and lookahead gives the same bits, and so does a second run.
TEST(Summa, SameBitsWhateverTheScheduleChunkingAndLookahead) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    const Shape sa{64, 256}, sb{256, 64};
    const MeshTensor a = placed(stored_values(sa, 31, DataType::BFLOAT16, false), DataType::BFLOAT16,
                                distributed::summa_a_placements(2, ms), mesh);
    const MeshTensor b = placed(stored_values(sb, 32, DataType::BFLOAT8_B, false), DataType::BFLOAT8_B,
                                distributed::summa_b_placements(ms), mesh);
    SummaOptions base;
    base.output_dtype = DataType::FLOAT32;
    base.panel_width = 32;
    const MeshTensor first = distributed::summa(a, b, base);
    bool same = true;
    for (Algorithm algorithm : {Algorithm::AUTO, Algorithm::RING, Algorithm::BIDIRECTIONAL_RING, Algorithm::LINE,
                                Algorithm::DIRECT})
      for (int lookahead : {1, 3}) {
        SummaOptions o = base;
        o.ccl.algorithm = algorithm;
        o.ccl.chunk_bytes = algorithm == Algorithm::AUTO ? 0 : 1024;
        o.lookahead = lookahead;
        o.num_links = lookahead;
        if (algorithm == Algorithm::LINE) o.topology = Topology::LINEAR;
        same = same && testing::bitwise_equal(distributed::summa(a, b, o).local(), first.local());
      }
    EXPECT_TRUE(all_ranks_ok(same)) << ms.to_string();
  }
}

// The planner's SUMMA price on a 2x2 mesh with a synthetic cost model, by hand. A [64, 2048] and
// B [2048, 128], float32, already in SUMMA's placements: K blocks of 1024 on both axes, so panels
// of 512 (the default's cap), 4 of them. A panel [32, 512] = 64 KiB, B panel [512, 64] = 128 KiB;
// a broadcast to 2 members is 1 hop of 1 chunk:
//   t_c = (1 + 64) ms + (1 + 128) ms = 194 ms,  t_p = 2 * 32 * 512 * 64 / 1e7 flop/s = 209.7152 ms
//   predicted = t_c + 3 max(t_c, t_p) + t_p = 194 + 629.1456 + 209.7152 = 1032.8608 ms
// (communication 4 t_c = 776 ms, compute 4 t_p = 838.8608 ms, overlap 3 min = 582 ms). Gathering A
// along rows (129 ms) and B along columns (257 ms) then one product (838.8608 ms) is 1224.8608 ms.
TEST(Summa, PlannerPricesItByHand) {
  distributed::DistributedMatmulOptions options;
  for (auto& link : options.cost.axis) link = {1e-3, 1e-3 / 1024};
  for (auto& link : options.cost.reduce_axis) link = {1e-3, 1e-3 / 1024};
  options.cost.matmul_flops_per_s = 1e7;
  options.cost.copy_bytes_per_s = 1e15;
  const MeshShape mesh{2, 2};
  const Shape a{64, 2048}, b{2048, 128};
  const auto plan = distributed::plan_matmul(a, DataType::FLOAT32, Layout::TILE, {Shard{0}, Shard{1}}, b,
                                             DataType::FLOAT32, Layout::TILE, {Shard{0}, Shard{1}}, mesh, options);
  ASSERT_TRUE(plan.summa) << plan.explain();
  EXPECT_EQ(plan.summa_panels, 4);
  EXPECT_EQ(plan.summa_panel_width, 512);
  EXPECT_TRUE(plan.a.steps.empty() && plan.b.steps.empty() && plan.output.steps.empty());
  EXPECT_NEAR(plan.communication_s, 776e-3, 1e-9);
  EXPECT_NEAR(plan.compute_s, 838.8608e-3, 1e-9);
  EXPECT_NEAR(plan.overlap_s, 582e-3, 1e-9);
  EXPECT_NEAR(plan.predicted_s(), 1032.8608e-3, 1e-9) << plan.explain();
  EXPECT_NE(plan.explain().find("SUMMA: 4 panels of 512 K elements"), std::string::npos) << plan.explain();
  EXPECT_NE(plan.summary().find("by SUMMA (4 panels)"), std::string::npos) << plan.summary();
  // Among every plan for these operands it is the cheapest; the gathers' plan costs what the
  // comment says.
  const auto all = distributed::matmul_plans(a, DataType::FLOAT32, Layout::TILE, {Shard{0}, Shard{1}}, b,
                                             DataType::FLOAT32, Layout::TILE, {Shard{0}, Shard{1}}, mesh, options);
  EXPECT_TRUE(all.front().summa) << all.front().explain();
  bool gathers_priced = false;
  for (const auto& p : all)
    if (!p.summa && p.a.steps.size() == 1 && p.b.steps.size() == 1 && p.output.steps.empty() &&
        p.a.steps[0].kind == distributed::StepKind::ALL_GATHER && p.b.steps[0].kind == distributed::StepKind::ALL_GATHER)
      gathers_priced = std::abs(p.predicted_s() - 1224.8608e-3) < 1e-9;
  EXPECT_TRUE(gathers_priced);
}

// Placements off SUMMA's, a 3-D B, K that does not match, a panel width straddling owners: the same
// error on every rank before anything moves, and the mesh still works after.
TEST(Summa, BadArgumentsFailAlikeOnEveryRank) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    const Placements pa = distributed::summa_a_placements(2, ms), pb = distributed::summa_b_placements(ms);
    const MeshTensor a = placed(stored_values(Shape{64, 256}, 1, DataType::FLOAT32, true), DataType::FLOAT32, pa, mesh);
    const MeshTensor b = placed(stored_values(Shape{256, 64}, 2, DataType::BFLOAT16, true), DataType::BFLOAT16, pb, mesh);
    const MeshTensor b_short = placed(stored_values(Shape{128, 64}, 3, DataType::BFLOAT16, true), DataType::BFLOAT16,
                                      pb, mesh);
    const MeshTensor b_whole =
        placed(stored_values(Shape{256, 64}, 4, DataType::BFLOAT16, true), DataType::BFLOAT16, {Replicate{}, Replicate{}}, mesh);
    const MeshTensor b_3d = placed(stored_values(Shape{1, 256, 64}, 5, DataType::BFLOAT16, true), DataType::BFLOAT16,
                                   {Replicate{}, Replicate{}}, mesh);
    std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"K differs", [&] { distributed::summa(a, b_short); }},
        {"3-D B", [&] { distributed::summa(a, b_3d); }},
        {"panel width 48", [&] {
           SummaOptions o;
           o.panel_width = 48;
           distributed::summa(a, b, o);
         }},
        {"lookahead 0", [&] {
           SummaOptions o;
           o.lookahead = 0;
           distributed::summa(a, b, o);
         }},
    };
    if (ms.num_devices() > 1) calls.push_back({"B replicated", [&] { distributed::summa(a, b_whole); }});
    for (const auto& [what, call] : calls) {
      const std::string message = testing::error_message_of(call);
      EXPECT_FALSE(message.empty()) << ms.to_string() << " " << what;
      EXPECT_TRUE(testing::same_on_all_ranks(message)) << ms.to_string() << " " << what << ": " << message;
    }
    // Still usable: the next collective matches up.
    EXPECT_TRUE(all_ranks_ok(distributed::summa(a, b).local().shape() ==
                             Shape{64 / ms.rows, 64 / ms.cols}));
  }
}

}  // namespace
}  // namespace meshnn
