// Mappers and composers over real ranks: every pair round-trips exactly, each rank's shard is the
// right piece of the host tensor, and bad requests fail alike on every rank leaving the mesh usable.
#include <gtest/gtest.h>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::all_ranks_ok;
using testing::bitwise_equal;
using testing::same_on_all_ranks;
using testing::seeded_tensor;
using testing::world_rank;
using testing::all_mesh_shapes;
using testing::world_size;

struct Format {
  DataType dtype;
  Layout layout;
};
const Format kFormats[] = {{DataType::FLOAT32, Layout::ROW_MAJOR}, {DataType::FLOAT32, Layout::TILE},
                           {DataType::BFLOAT16, Layout::ROW_MAJOR}, {DataType::BFLOAT16, Layout::TILE},
                           {DataType::BFLOAT8_B, Layout::TILE},     {DataType::BFLOAT4_B, Layout::TILE},
                           {DataType::INT32, Layout::TILE},         {DataType::UINT32, Layout::ROW_MAJOR}};

// The independent reference for one rank's piece: row-major float values cut with index math.
std::vector<float> reference_piece(const Tensor& host, int dim, int64_t begin, int64_t end) {
  const std::vector<float> v = host.to_float();
  const Shape& s = host.shape();
  const int d = s.normalize_dim(dim);
  const int64_t outer = s.outer_volume(d), inner = s.inner_volume(d);
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = begin; i < end; ++i)
      for (int64_t k = 0; k < inner; ++k) out.push_back(v[static_cast<size_t>((o * s[d] + i) * inner + k)]);
  return out;
}

// dims 0 and 3 of [8, 2, 32, 256] split evenly over 1, 2, 4 or 8 devices, and a last-dim cut of
// 256 / 8 = 32 never splits a 16-value block, so block floats round-trip bit for bit too.
const Shape kShape{8, 2, 32, 256};

TEST(Distribute, ShardTensorToMeshRoundTripsAndEachRankHoldsItsChunk) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (const Format& f : kFormats) {
      const Tensor host = seeded_tensor(kShape, f.dtype, f.layout, 100 + static_cast<int>(f.dtype));
      for (int dim : {0, -1, 3, -4}) {
        const MeshTensor mt = distribute_tensor(host, ShardTensorToMesh(dim), mesh);
        const int64_t chunk = kShape[dim] / world_size();
        const bool piece_ok =
            mt.local().to_float() == reference_piece(host, dim, chunk * world_rank(), chunk * (world_rank() + 1));
        const Tensor back = aggregate_tensor(mt, ConcatMeshToTensor(dim));
        EXPECT_TRUE(all_ranks_ok(piece_ok && bitwise_equal(back, host)))
            << ms.to_string() << " " << to_string(f.dtype) << " " << to_string(f.layout) << " dim " << dim;
      }
    }
  }
}

TEST(Distribute, ShardTensor2dMeshRoundTripsWithConcatMesh2d) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (const Format& f : kFormats) {
      const Tensor host = seeded_tensor(kShape, f.dtype, f.layout, 200 + static_cast<int>(f.dtype));
      for (auto [row_dim, col_dim] : {std::pair{0, 3}, std::pair{-1, 0}, std::pair{3, -4}}) {
        const MeshTensor mt = distribute_tensor(host, ShardTensor2dMesh(row_dim, col_dim), mesh);
        const MeshCoordinate c = mesh->coordinate();
        const int64_t rows_chunk = kShape[row_dim] / ms.rows, cols_chunk = kShape[col_dim] / ms.cols;
        const Tensor expected_piece = slice(slice(host, row_dim, rows_chunk * c.row, rows_chunk * (c.row + 1)),
                                            col_dim, cols_chunk * c.col, cols_chunk * (c.col + 1));
        const Tensor back = aggregate_tensor(mt, ConcatMesh2dToTensor(row_dim, col_dim));
        EXPECT_TRUE(all_ranks_ok(bitwise_equal(mt.local(), expected_piece) && bitwise_equal(back, host)))
            << ms.to_string() << " " << to_string(f.dtype) << " dims " << row_dim << "," << col_dim;
      }
    }
  }
}

TEST(Distribute, ReplicateKeepsWholeTensorAndListComposerReturnsEveryDevice) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    const Tensor host = seeded_tensor(Shape{3, 40, 72}, DataType::BFLOAT16, Layout::TILE, 5);
    const MeshTensor mt = distribute_tensor(host, ReplicateTensorToMesh(), mesh);
    const std::vector<Tensor> list = aggregate_tensor_list(mt);
    bool ok = bitwise_equal(mt.local(), host) && static_cast<int>(list.size()) == world_size();
    for (const Tensor& t : list) ok = ok && bitwise_equal(t, host);
    // Replicated on both axes: concatenating all devices gives N copies (TT-NN's behaviour).
    const Tensor copies = aggregate_tensor(mt, ConcatMeshToTensor(0));
    ok = ok && copies.shape() == Shape{3 * world_size(), 40, 72};
    // Half-sharded: rows replicated, cols sharded on dim 1 when it divides.
    EXPECT_TRUE(all_ranks_ok(ok)) << ms.to_string();
  }
}

TEST(Distribute, FullTensorComposesByPlacementsWhateverTheMix) {
  const Shape odd{5, 3, 40, 72};  // nothing divides evenly: padding on every sharded dim
  const Tensor host = seeded_tensor(odd, DataType::BFLOAT16, Layout::TILE, 31);
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (const Placements& ps : {Placements{Replicate{}, Replicate{}}, Placements{Shard{0}, Replicate{}},
                                 Placements{Replicate{}, Shard{-1}}, Placements{Shard{2}, Shard{3}},
                                 Placements{Shard{1}, Shard{1}}}) {
      const MeshTensor mt = distribute_tensor(host, MeshMapperConfig{ps, true, 0.0f}, mesh);
      EXPECT_TRUE(all_ranks_ok(bitwise_equal(full_tensor(mt), host))) << ms.to_string() << " " << to_string(ps);
    }
    const MeshTensor partial(mesh, odd, {Partial{}, Replicate{}}, host);
    const std::string message = testing::error_message_of([&] { full_tensor(partial); });
    EXPECT_TRUE(all_ranks_ok(message.find("Partial(sum)") != std::string::npos)) << message;
  }
}

TEST(Distribute, GatherToRootLeavesOtherRanksEmpty) {
  auto mesh = MeshDevice::open({1, world_size()});
  const Tensor host = seeded_tensor(kShape, DataType::FLOAT32, Layout::TILE, 9);
  const MeshTensor mt = distribute_tensor(host, ShardTensorToMesh(0), mesh);
  const int root = world_size() - 1;
  const Tensor back = aggregate_tensor(mt, ConcatMeshToTensor(0), root);
  const bool ok = world_rank() == root ? bitwise_equal(back, host) : back.size_bytes() == 0;
  EXPECT_TRUE(all_ranks_ok(ok));
  EXPECT_THROW(aggregate_tensor(mt, ConcatMeshToTensor(0), world_size()), Error);
}

TEST(Distribute, NonDivisibleSplitIsAnErrorUnlessPaddingIsRequested) {
  const int n = world_size();
  auto mesh = MeshDevice::open({1, n});
  const Shape odd{3, 5 * n + 3, 70};  // dim 1 never divides by n > 1
  for (const Format& f : kFormats) {
    const Tensor host = seeded_tensor(odd, f.dtype, f.layout, 77);
    if (n > 1) {
      const std::string message = testing::error_message_of([&] { distribute_tensor(host, ShardTensorToMesh(1), mesh); });
      EXPECT_TRUE(all_ranks_ok(message.find("cannot shard dim 1 of size") != std::string::npos)) << message;
      EXPECT_TRUE(same_on_all_ranks(message));
    }
    // Padded on request: shards are ceil-sized, the composer drops the padding. Rows are cut,
    // which never splits a 16-value block, so every dtype comes back bit for bit.
    const MeshTensor mt = distribute_tensor(host, ShardTensorToMesh(1, /*allow_padding=*/true), mesh);
    const bool ok = mt.shape() == odd && mt.shard_shape()[1] == (odd[1] + n - 1) / n && mt.is_padded() == (n > 1) &&
                    bitwise_equal(aggregate_tensor(mt, ConcatMeshToTensor(1)), host);
    EXPECT_TRUE(all_ranks_ok(ok)) << to_string(f.dtype);
  }
}

TEST(Distribute, BadDimsAndMismatchedPlacementsFailAlikeAndLeaveTheMeshUsable) {
  const int n = world_size();
  auto mesh = MeshDevice::open({1, n});
  const Tensor host = seeded_tensor(kShape, DataType::FLOAT32, Layout::TILE, 3);
  std::vector<std::function<void()>> bad = {
      [&] { distribute_tensor(host, ShardTensorToMesh(4), mesh); },
      [&] { distribute_tensor(host, ShardTensorToMesh(-5), mesh); },
      [&] { distribute_tensor(host, MeshMapperConfig{{Replicate{}, Partial{}}}, mesh); },
      [&] { aggregate_tensor(distribute_tensor(host, ReplicateTensorToMesh(), mesh), ConcatMeshToTensor(7)); },
      [&] { aggregate_tensor(distribute_tensor(host, ReplicateTensorToMesh(), mesh), ConcatMesh2dToTensor(1, -3)); },
      [&] { MeshTensor(mesh, host.shape(), {Replicate{}, Replicate{}}, slice(host, 0, 0, 1)); },  // wrong shard shape
  };
  if (n > 1) {
    // Sharded on dim 3 but composed along dim 2: a meaningless concatenation, refused.
    bad.push_back([&] { aggregate_tensor(distribute_tensor(host, ShardTensorToMesh(3), mesh), ConcatMeshToTensor(2)); });
    // A Partial tensor must be reduced before composing.
    bad.push_back([&] { aggregate_tensor(MeshTensor(mesh, host.shape(), {Replicate{}, Partial{}}, host), ConcatMeshToTensor(0)); });
  }
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string message = testing::error_message_of(bad[i]);
    EXPECT_TRUE(all_ranks_ok(!message.empty())) << "case " << i;
    EXPECT_TRUE(same_on_all_ranks(message)) << "case " << i << ": " << message;
  }
  // Still usable: a normal round trip after all those errors.
  const MeshTensor mt = distribute_tensor(host, ShardTensorToMesh(-1), mesh);
  EXPECT_TRUE(all_ranks_ok(bitwise_equal(aggregate_tensor(mt, ConcatMeshToTensor(-1)), host)));
}

TEST(Distribute, TensorViewShowsShardShapesAndPlacements) {
  auto mesh = MeshDevice::open({1, world_size()});
  const MeshTensor mt = distribute_tensor(seeded_tensor(kShape, DataType::BFLOAT16, Layout::TILE, 1), ShardTensorToMesh(3), mesh);
  const std::string view = mt.describe();
  const std::string shard = fmt::format("[8, 2, 32, {}]", 256 / world_size());
  EXPECT_TRUE(all_ranks_ok(view.find(shard) != std::string::npos && view.find("Shard(3)") != std::string::npos)) << view;
  EXPECT_TRUE(same_on_all_ranks(view));
}

}  // namespace
}  // namespace meshnn
