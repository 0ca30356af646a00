// redistribute over real ranks: every pair of placements (Replicate, Shard of two dims, Partial) on
// every mesh shape of the world, against the host tensor the placements describe; the plans'
// steps for hand-worked cases; impossible requests fail alike before anything moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/distributed/redistribute.hpp"
#include "meshnn/tensor/concat.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using distributed::plan_redistribute;
using distributed::redistribute;
using distributed::StepKind;
using testing::all_ranks_ok;
using testing::all_mesh_shapes;
using testing::world_size;

// Integer-valued floats, so that every sum below is exact in float32.
Tensor integers(const Shape& shape, uint64_t seed) {
  return Tensor::from_float(testing::seeded_values(shape.volume(), seed, /*integers=*/true), shape, DataType::FLOAT32,
                            Layout::TILE);
}

MeshTensor with_placements(const Tensor& host, const Placements& ps, const MeshDevicePtr& mesh) {
  return testing::with_logical_value(host, ps, mesh, integers(host.shape(), 900), integers(host.shape(), 901));
}

const Placement kCandidates[] = {Replicate{}, Shard{0}, Shard{2}, Partial{}};

TEST(Redistribute, EveryPairOfPlacementsGivesTheSameTensor) {
  const Shape shape{8, 3, 64};  // dims 0 and 2 split over up to 8 devices; 64 / 8 keeps whole rows
  const Tensor host = integers(shape, 7);
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    int checked = 0, failed = 0;
    std::string first_failure;
    for (const Placement& f0 : kCandidates)
      for (const Placement& f1 : kCandidates)
        for (const Placement& t0 : kCandidates)
          for (const Placement& t1 : kCandidates) {
            const Placements from{f0, f1}, to{t0, t1};
            if (is_partial(t0) || is_partial(t1)) continue;  // targets without Partial: composable
            const MeshTensor source = with_placements(host, from, mesh);
            const MeshTensor moved = redistribute(source, to);
            const bool ok = moved.placements() == normalize_placements(to, 3) &&
                            testing::bitwise_equal(full_tensor(moved), host);
            ++checked;
            if (!ok && failed++ == 0) first_failure = to_string(from) + " -> " + to_string(to);
          }
    EXPECT_TRUE(all_ranks_ok(failed == 0)) << ms.to_string() << ": " << failed << " of " << checked
                                           << " failed, first " << first_failure;
  }
}

TEST(Redistribute, PlansTakeTheStepsWorkedOutByHand) {
  const Shape shape{8, 16};
  const MeshShape mesh{2, 4};
  auto kinds = [&](const Placements& from, const Placements& to) {
    std::vector<std::pair<StepKind, int>> out;
    for (const auto& s : plan_redistribute(shape, DataType::FLOAT32, Layout::ROW_MAJOR, from, to, mesh).steps)
      out.push_back({s.kind, s.axis});
    return out;
  };
  using V = std::vector<std::pair<StepKind, int>>;
  EXPECT_EQ(kinds({Partial{}, Replicate{}}, {Shard{0}, Replicate{}}), (V{{StepKind::REDUCE_SCATTER, 0}}));
  EXPECT_EQ(kinds({Replicate{}, Replicate{}}, {Shard{0}, Shard{1}}),
            (V{{StepKind::LOCAL_SLICE, 0}, {StepKind::LOCAL_SLICE, 1}}));
  // Re-sharding along one axis is one exchange when no other split of either dim is involved...
  EXPECT_EQ(kinds({Shard{0}, Replicate{}}, {Shard{1}, Replicate{}}), (V{{StepKind::ALL_TO_ALL, 0}}));
  EXPECT_EQ(kinds({Shard{0}, Partial{}}, {Shard{1}, Replicate{}}),
            (V{{StepKind::ALL_REDUCE, 1}, {StepKind::ALL_TO_ALL, 0}}));
  // ...but here each axis's new dim is the other axis's old one.
  EXPECT_EQ(kinds({Shard{1}, Shard{0}}, {Shard{0}, Shard{1}}),
            (V{{StepKind::ALL_GATHER, 1}, {StepKind::ALL_GATHER, 0}, {StepKind::LOCAL_SLICE, 0},
               {StepKind::LOCAL_SLICE, 1}}));
  // A dim split row-major over all eight devices is gathered whole (inner axis first) to keep only
  // the column split.
  EXPECT_EQ(kinds({Shard{1}, Shard{1}}, {Replicate{}, Shard{1}}),
            (V{{StepKind::ALL_GATHER, 1}, {StepKind::ALL_GATHER, 0}, {StepKind::LOCAL_SLICE, 1}}));
  EXPECT_EQ(kinds({Partial{}, Shard{1}}, {Replicate{}, Shard{1}}), (V{{StepKind::ALL_REDUCE, 0}}));
  EXPECT_TRUE(kinds({Shard{0}, Partial{}}, {Shard{0}, Partial{}}).empty());
  const auto plan = plan_redistribute(shape, DataType::FLOAT32, Layout::ROW_MAJOR, {Shard{0}, Replicate{}},
                                      {Replicate{}, Replicate{}}, mesh);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].local_bytes_in, 4 * 16 * 4);  // a [4, 16] float32 shard
  EXPECT_NE(plan.explain().find("all_gather dim 0 along axis 0 (2 devices"), std::string::npos) << plan.explain();
  const auto exchange = plan_redistribute(shape, DataType::FLOAT32, Layout::ROW_MAJOR, {Replicate{}, Shard{1}},
                                          {Replicate{}, Shard{0}}, mesh);
  ASSERT_EQ(exchange.steps.size(), 1u);
  EXPECT_EQ(exchange.steps[0].from_dim, 1);
  EXPECT_EQ(exchange.steps[0].dim, 0);
  EXPECT_EQ(exchange.summary(), "all_to_all(d1->d0, axis 1)");
  EXPECT_DOUBLE_EQ(exchange.bytes_received(), 3.0 / 4 * (8 * 4 * 4));  // 3/4 of an [8, 4] float32 shard
  EXPECT_NE(exchange.explain().find("all_to_all dim 1 -> 0 along axis 1 (4 devices"), std::string::npos)
      << exchange.explain();
}

// The local packing the cost model charges: parts that are whole runs of storage move in place,
// others are copied apart or together (TILE columns interleave tile row by tile row).
TEST(Redistribute, PlansChargeThePackingOfPartsThatAreNotRunsOfStorage) {
  const MeshShape mesh{1, 2};
  auto packing = [&](const Shape& shape, Layout layout, const Placements& from, const Placements& to) {
    const auto plan = plan_redistribute(shape, DataType::FLOAT32, layout, from, to, mesh);
    EXPECT_EQ(plan.steps.size(), 1u) << plan.explain();
    return plan.steps.empty() ? int64_t{-1} : plan.steps[0].local_copy_bytes;
  };
  const Shape matrix{64, 128};  // float32 TILE: 2 x 4 tiles of 4 KiB
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Shard{0}}, {Replicate{}, Replicate{}}), 0);
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Shard{1}}, {Replicate{}, Replicate{}}), 64 * 128 * 4);
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Partial{}}, {Replicate{}, Shard{0}}), 0);
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Partial{}}, {Replicate{}, Shard{1}}), 64 * 128 * 4);
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Partial{}}, {Replicate{}, Replicate{}}), 0);
  // all_to_all of a [128, 128] matrix, rows -> columns: the [64, 128] shard sends its column
  // halves (packed: 32 KiB) and receives the row halves of its [128, 64] result (in place);
  // columns -> rows the other way round. A [32, 128] shard's column halves are runs already.
  const Shape square{128, 128};
  EXPECT_EQ(packing(square, Layout::TILE, {Replicate{}, Shard{0}}, {Replicate{}, Shard{1}}), 64 * 128 * 4);
  EXPECT_EQ(packing(square, Layout::TILE, {Replicate{}, Shard{1}}, {Replicate{}, Shard{0}}), 64 * 128 * 4);
  EXPECT_EQ(packing(matrix, Layout::TILE, {Replicate{}, Shard{0}}, {Replicate{}, Shard{1}}), 0);
  // A one-row-of-tiles matrix and row-major rows split on the outer dim are runs already.
  EXPECT_EQ(packing(Shape{32, 128}, Layout::TILE, {Replicate{}, Shard{1}}, {Replicate{}, Replicate{}}), 0);
  EXPECT_EQ(packing(Shape{8, 16}, Layout::ROW_MAJOR, {Replicate{}, Shard{0}}, {Replicate{}, Replicate{}}), 0);
  EXPECT_EQ(packing(Shape{8, 16}, Layout::ROW_MAJOR, {Replicate{}, Shard{1}}, {Replicate{}, Replicate{}}), 8 * 16 * 4);
}

// Shard(a) -> Shard(b) on one axis (the other axis whole, or split on a third dim) is one
// all_to_all, with the bits of the path it replaces: all_gather(a), then this device's slice of b.
TEST(Redistribute, ShardToShardIsOneAllToAllWithTheGatherAndSlicesBits) {
  const Shape shape{8, 4, 64};
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (int axis : {0, 1}) {
      const int n = mesh->axis_size(axis), other = 1 - axis;
      if (n == 1) continue;
      for (const auto& [a, b] : {std::pair{0, 2}, std::pair{2, 0}}) {
        for (const Placement& beside : {Placement{Replicate{}}, Placement{Shard{1}}}) {
          if (is_shard(beside) && shape[1] % mesh->axis_size(other) != 0) continue;
          for (const auto& [dtype, layout] : {std::pair{DataType::FLOAT32, Layout::ROW_MAJOR},
                                              std::pair{DataType::BFLOAT16, Layout::TILE},
                                              std::pair{DataType::BFLOAT8_B, Layout::TILE}}) {
            Placements from{Replicate{}, Replicate{}}, to{Replicate{}, Replicate{}};
            from[axis] = Shard{a};
            to[axis] = Shard{b};
            from[other] = to[other] = beside;
            const auto plan = plan_redistribute(shape, dtype, layout, from, to, ms);
            const bool one_step = plan.steps.size() == 1 && plan.steps[0].kind == StepKind::ALL_TO_ALL &&
                                  plan.steps[0].axis == axis && plan.steps[0].from_dim == a && plan.steps[0].dim == b;
            MeshMapperConfig mapper;
            mapper.placements = from;
            const MeshTensor source = distribute_tensor(testing::seeded_tensor(shape, dtype, layout, 5), mapper, mesh);
            const MeshTensor moved = redistribute(source, to);
            // The old path, by hand.
            const Tensor gathered = all_gather(source, a, axis).local();
            const int64_t chunk = gathered.shape()[b] / n, k = mesh->axis_position(axis);
            const Tensor old = slice(gathered, b, k * chunk, (k + 1) * chunk);
            const Tensor& got = moved.local();
            const bool same = moved.placements() == to && got.shape() == old.shape() &&
                              std::memcmp(got.data<std::byte>(), old.data<std::byte>(), old.size_bytes()) == 0;
            EXPECT_TRUE(all_ranks_ok(one_step && same))
                << ms.to_string() << " " << to_string(from) << " -> " << to_string(to) << " " << to_string(dtype)
                << " " << to_string(layout) << (one_step ? "" : ": planned " + plan.summary());
          }
        }
      }
    }
  }
}

TEST(Redistribute, ImpossibleRequestsFailAlikeBeforeAnythingMoves) {
  auto mesh = MeshDevice::open({1, world_size()});
  const MeshTensor t = with_placements(integers(Shape{8, 3, 64}, 1), {Replicate{}, Replicate{}}, mesh);
  const std::string partial = testing::error_message_of([&] { redistribute(t, {Replicate{}, Partial{}}); });
  const std::string uneven = testing::error_message_of([&] { redistribute(t, {Replicate{}, Shard{1}}); });
  EXPECT_TRUE(testing::same_on_all_ranks(partial) && testing::same_on_all_ranks(uneven));
  if (world_size() > 1) {
    EXPECT_NE(partial.find("cannot become Partial(sum)"), std::string::npos) << partial;
    if (world_size() != 3) {
      EXPECT_NE(uneven.find("cannot shard dim 1 of size 3"), std::string::npos) << uneven;
    }
  }
  // The mesh is still usable.
  EXPECT_TRUE(testing::bitwise_equal(full_tensor(redistribute(t, {Replicate{}, Shard{0}})), full_tensor(t)));
}

}  // namespace
}  // namespace meshnn
