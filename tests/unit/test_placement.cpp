// Placement and chunk arithmetic, the box table, and core-binding arithmetic (no MPI needed).
#include <gtest/gtest.h>

#include "meshnn/core/error.hpp"
#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/runtime/runtime.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn {
namespace {

TEST(Placement, ShardCountsAndIndicesFollowRowMajorOrder) {
  const MeshShape m{2, 4};
  const Placements whole{Shard{3}, Shard{3}};  // ShardTensorToMesh(3)
  EXPECT_EQ(shard_count(whole, m, 3), 8);
  EXPECT_EQ(shard_index(whole, m, {1, 2}, 3), 6);
  const Placements two_d{Shard{2}, Shard{3}};  // ShardTensor2dMesh(2, 3)
  EXPECT_EQ(shard_count(two_d, m, 2), 2);
  EXPECT_EQ(shard_count(two_d, m, 3), 4);
  EXPECT_EQ(shard_index(two_d, m, {1, 2}, 2), 1);
  EXPECT_EQ(shard_index(two_d, m, {1, 2}, 3), 2);
  EXPECT_EQ(shard_count(two_d, m, 0), 1);
  EXPECT_EQ(to_string(two_d), "[Shard(2), Shard(3)]");
  EXPECT_EQ(to_string(Placements{Replicate{}, Partial{}}), "[Replicate(), Partial(sum)]");
}

TEST(Placement, ShardShapeIsCeilChunkAndNonDivisibleIsAnErrorUnlessPadded) {
  const MeshShape m{1, 3};
  const Placements p{Replicate{}, Shard{-1}};
  EXPECT_EQ(shard_shape_for(Shape{4, 96}, p, m, false), (Shape{4, 32}));
  EXPECT_THROW(shard_shape_for(Shape{4, 100}, p, m, false), Error);
  EXPECT_EQ(shard_shape_for(Shape{4, 100}, p, m, true), (Shape{4, 34}));
  try {
    shard_shape_for(Shape{4, 100}, p, m, false);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 1 of size 100"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 devices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(normalize_placements(Placements{Shard{4}, Replicate{}}, 4), Error);
  EXPECT_EQ(std::get<Shard>(normalize_placements(Placements{Shard{-1}, Replicate{}}, 4)[0]).dim, 3);
}

TEST(Placement, MapperAndComposerConfigsValidateDims) {
  EXPECT_THROW(ShardTensor2dMesh(2, 2), Error);
  EXPECT_THROW(ConcatMesh2dToTensor(1, 1), Error);
  const MeshMapperConfig m = ShardTensor2dMesh(std::nullopt, 3);
  EXPECT_TRUE(is_replicate(m.placements[0]));
  EXPECT_EQ(std::get<Shard>(m.placements[1]).dim, 3);
}

TEST(MeshTable, MatchesTtnnBoxDrawing) {
  const std::string expected =
      "   MeshDevice(rows=1, cols=2):\n"
      "┌───────────────┬───────────────┐\n"
      "│  Dev. ID: 0   │  Dev. ID: 1   │\n"
      "│    (0, 0)     │    (0, 1)     │\n"
      "└───────────────┴───────────────┘\n";
  EXPECT_EQ(visualize_mesh_device(MeshShape{1, 2}), expected);
  const std::string two_by_two = visualize_mesh_device(MeshShape{2, 2});
  EXPECT_NE(two_by_two.find("├───────────────┼───────────────┤"), std::string::npos);
  EXPECT_NE(two_by_two.find("(1, 1)"), std::string::npos);
}

TEST(MeshShapeParsing, AcceptsRxCOnly) {
  EXPECT_EQ(parse_mesh_shape("2x4"), (MeshShape{2, 4}));
  EXPECT_EQ(parse_mesh_shape("8X4"), (MeshShape{8, 4}));
  for (const char* bad : {"2", "2x", "x4", "0x2", "2x4x1", "axb", "-1x2"}) EXPECT_THROW(parse_mesh_shape(bad), Error) << bad;
  EXPECT_EQ(parse_topology("Linear"), Topology::LINEAR);
  EXPECT_THROW(parse_topology("torus"), Error);
}

TEST(CoreBinding, LocalRanksGetDisjointCoreRanges) {
  EXPECT_EQ(cores_for_local_rank(0, 2, 2), std::vector<int>{0});
  EXPECT_EQ(cores_for_local_rank(1, 2, 2), std::vector<int>{1});
  EXPECT_EQ(cores_for_local_rank(0, 1, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cores_for_local_rank(1, 3, 8), (std::vector<int>{2, 3, 4}));
  // Oversubscribed: one core each, round robin.
  EXPECT_EQ(cores_for_local_rank(5, 8, 2), std::vector<int>{1});
  // Every core used exactly once when ranks <= cores.
  for (int ranks = 1; ranks <= 8; ++ranks) {
    std::vector<int> used(8, 0);
    for (int r = 0; r < ranks; ++r)
      for (int c : cores_for_local_rank(r, ranks, 8)) ++used[static_cast<size_t>(c)];
    for (int u : used) EXPECT_EQ(u, 1);
  }
}

}  // namespace
}  // namespace meshnn
