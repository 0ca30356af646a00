// The fused collective matmuls over real ranks: all_gather_matmul gives the
// bits of all_gather then matmul (its unfused form) on every mesh shape and
// group of the world, every activation, weight and output dtype, tile-aligned
// and tile-cutting blocks; the unfused product against float64 math; argument
// problems fail alike on every rank before anything moves.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "meshnn/core/error.hpp"
#include "meshnn/distributed/collective_matmul.hpp"
#include "meshnn/tensor/concat.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using distributed::all_gather_matmul;
using distributed::CollectiveMatmulOptions;
using distributed::matmul_reduce_scatter;
using testing::all_mesh_shapes;
using testing::all_ranks_ok;
using testing::world_size;

MeshTensor placed(const Shape& shape, uint64_t seed, DataType dtype, const Placements& ps, const MeshDevicePtr& mesh) {
  const Tensor host = Tensor::from_float(testing::normal_values(shape.volume(), static_cast<uint32_t>(seed)), shape,
                                         DataType::FLOAT32, Layout::TILE);
  const Tensor zero(shape, DataType::FLOAT32, Layout::TILE);
  MeshTensor t = testing::with_logical_value(host, ps, mesh, zero, zero);
  return MeshTensor(mesh, t.shape(), t.placements(), t.local().typecast(dtype));
}

// Every schedule; the forced ones in small chunks so that blocks travel piece
// by piece.
constexpr Algorithm kAlgorithms[] = {Algorithm::AUTO, Algorithm::RING, Algorithm::BIDIRECTIONAL_RING, Algorithm::LINE};

std::pair<CollectiveMatmulOptions, CollectiveMatmulOptions> unfused_and_fused(Algorithm algorithm, DataType out) {
  CollectiveMatmulOptions unfused;
  unfused.output_dtype = out;
  unfused.fused = false;
  unfused.ccl.algorithm = algorithm;
  unfused.ccl.chunk_bytes = algorithm == Algorithm::AUTO ? 0 : 1024;
  CollectiveMatmulOptions fused = unfused;
  fused.fused = true;
  return {unfused, fused};
}

// fn(mesh, cluster_axis, members, split_axis) for every mesh shape of the world
// and every group on it of two or more devices (split_axis: the mesh axis the
// group runs along).
template <class Fn>
void for_each_group(Fn&& fn) {
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    if (world_size() == 1) break;
    auto mesh = MeshDevice::open(ms);
    for (std::optional<int> axis : {std::optional<int>{}, std::optional<int>{0}, std::optional<int>{1}}) {
      const int members = !axis ? ms.rows * ms.cols : *axis == 0 ? ms.rows : ms.cols;
      if (members == 1 || (!axis && ms.rows > 1 && ms.cols > 1)) continue;
      fn(mesh, axis, members, axis.value_or(ms.rows > 1 ? 0 : 1));
    }
  }
}

std::string group_name(const MeshDevicePtr& mesh, std::optional<int> axis) {
  return mesh->shape().to_string() + " axis " + (axis ? std::to_string(*axis) : "none");
}

struct Case {
  Shape a, b;
  int dim;
  DataType act, weight, out;
  bool b_column_split;
};

// On every mesh and group, fused = unfused bit for bit (gathered and product),
// and the unfused product is A @ B.
TEST(AllGatherMatmul, FusedGivesTheUnfusedBitsOnEveryGroup) {
  const std::vector<Case> cases = {
      {Shape{1, 64, 96}, Shape{96, 128}, 1, DataType::FLOAT32, DataType::BFLOAT8_B, DataType::FLOAT32, false},
      {Shape{1, 64, 96}, Shape{96, 128}, 1, DataType::BFLOAT16, DataType::BFLOAT16, DataType::BFLOAT16, true},
      {Shape{1, 64, 96}, Shape{96, 128}, 1, DataType::BFLOAT16, DataType::BFLOAT4_B, DataType::BFLOAT8_B, false},
      {Shape{4, 32, 64}, Shape{64, 64}, 0, DataType::FLOAT32, DataType::FLOAT32, DataType::FLOAT32, true},
      {Shape{96, 64}, Shape{64, 64}, 0, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::FLOAT32,
       false},  // blocks cut tiles
      // The contraction dim: each chunk times its rows of B.
      {Shape{1, 64, 256}, Shape{256, 128}, 2, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT16, true},
      {Shape{40, 128}, Shape{128, 96}, 1, DataType::FLOAT32, DataType::BFLOAT4_B, DataType::FLOAT32, false},
  };
  int checked = 0;
  for_each_group([&](const MeshDevicePtr& mesh, std::optional<int> axis, int members, int gathered_axis) {
    for (const Case& c : cases) {
      if (c.a[c.dim] % members != 0 || (c.b_column_split && c.b[-1] % members != 0)) continue;
      Placements pa{Replicate{}, Replicate{}}, pb{Replicate{}, Replicate{}};
      pa[gathered_axis] = Shard{c.dim};
      if (c.b_column_split) pb[gathered_axis] = Shard{c.b.rank() - 1};
      const MeshTensor a = placed(c.a, 7, c.act, pa, mesh), b = placed(c.b, 8, c.weight, pb, mesh);
      for (Algorithm algorithm : kAlgorithms) {
        const auto [unfused, fused] = unfused_and_fused(algorithm, c.out);
        const auto u = all_gather_matmul(a, b, c.dim, axis, unfused);
        const bool right = testing::matmul_close_to_float64(u.gathered.local(), b.local(), u.product.local(), c.out);
        const auto f = all_gather_matmul(a, b, c.dim, axis, fused);
        // Split on K the sums run in another order: A @ B within the same
        // bound, and the same bits on a second run instead.
        const bool on_k = c.dim == c.a.rank() - 1;
        const auto again = on_k ? all_gather_matmul(a, b, c.dim, axis, fused) : f;
        const bool same = testing::bitwise_equal(f.gathered.local(), u.gathered.local()) &&
                          testing::bitwise_equal(f.product.local(), on_k ? again.product.local() : u.product.local()) &&
                          (!on_k || testing::matmul_close_to_float64(f.gathered.local(), b.local(), f.product.local(), c.out)) &&
                          f.product.placements() == u.product.placements();
        EXPECT_TRUE(all_ranks_ok(same && right))
            << group_name(mesh, axis) << " A " << fmt::format("{}", c.a) << " dim " << c.dim << " " << to_string(c.act)
            << " x " << to_string(c.weight) << " -> " << to_string(c.out) << " " << to_string(algorithm)
            << ": same bits " << same << ", close to float64 " << right;
        ++checked;
      }
    }
  });
  if (world_size() > 1) {
    EXPECT_GE(checked, 20);
  }
}

// Values as `dtype` stores them, held as float32: a split of them converts back
// without change.
Tensor stored_values(const Shape& shape, uint64_t seed, DataType dtype) {
  return Tensor::from_float(testing::normal_values(shape.volume(), static_cast<uint32_t>(seed)), shape, dtype,
                            Layout::TILE)
      .typecast(DataType::FLOAT32);
}

struct ScatterCase {
  Shape a, b;
  int scatter_dim;  // of the product
  DataType act, weight, out;
  bool a_partial;  // A Partial x B Replicate instead of both split on K
};

// On every mesh and group, fused = unfused bit for bit, and this member's slice
// is its block of the whole product (float64 from the operands' values).
TEST(MatmulReduceScatter, FusedGivesTheUnfusedBitsOnEveryGroup) {
  const std::vector<ScatterCase> cases = {
      {Shape{1, 128, 256}, Shape{256, 64}, 1, DataType::FLOAT32, DataType::BFLOAT8_B, DataType::FLOAT32, false},
      {Shape{1, 128, 256}, Shape{256, 64}, 1, DataType::BFLOAT16, DataType::BFLOAT16, DataType::BFLOAT16, false},
      {Shape{4, 32, 128}, Shape{128, 96}, 0, DataType::BFLOAT16, DataType::BFLOAT4_B, DataType::BFLOAT8_B, false},
      {Shape{128, 64}, Shape{64, 64}, 0, DataType::FLOAT32, DataType::FLOAT32, DataType::FLOAT32, true},
      {Shape{96, 128}, Shape{128, 64}, 0, DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT32,
       false},  // cuts tiles
  };
  int checked = 0;
  for_each_group([&](const MeshDevicePtr& mesh, std::optional<int> axis, int members, int split_axis) {
    const int position = split_axis == 0 ? mesh->coordinate().row : mesh->coordinate().col;
    for (const ScatterCase& c : cases) {
      const int product_rank = std::max(c.a.rank(), c.b.rank());
      const int a_dim = c.scatter_dim - (product_rank - c.a.rank());
      if (c.a[a_dim] % members != 0 || c.a[-1] % (32 * members) != 0) continue;
      const Tensor host_a = stored_values(c.a, 11, c.act), host_b = stored_values(c.b, 12, c.weight);
      Placements pa{Replicate{}, Replicate{}}, pb{Replicate{}, Replicate{}};
      pa[split_axis] = c.a_partial ? Placement{Partial{}} : Placement{Shard{c.a.rank() - 1}};
      if (!c.a_partial) pb[split_axis] = Shard{c.b.rank() - 2};
      const Tensor zero(c.a, DataType::FLOAT32, Layout::TILE);
      const Tensor noise = stored_values(c.a, 13, c.act);
      MeshTensor a =
          testing::with_logical_value(host_a, pa, mesh, c.a_partial ? noise : zero, c.a_partial ? noise : zero);
      a = MeshTensor(mesh, a.shape(), a.placements(), a.local().typecast(c.act));
      MeshTensor b = testing::with_logical_value(host_b, pb, mesh, host_b, host_b);
      b = MeshTensor(mesh, b.shape(), b.placements(), b.local().typecast(c.weight));
      const int64_t block = c.a[a_dim] / members;
      const Tensor my_rows = slice(host_a, a_dim, position * block, (position + 1) * block);
      // Each schedule has its own order of sums: fused and unfused use the same
      // one.
      for (Algorithm algorithm : kAlgorithms) {
        const auto [unfused, fused] = unfused_and_fused(algorithm, c.out);
        const MeshTensor u = matmul_reduce_scatter(a, b, c.scatter_dim, axis, unfused);
        const bool right = testing::matmul_close_to_float64(my_rows, host_b, u.local(), c.out);
        const MeshTensor f = matmul_reduce_scatter(a, b, c.scatter_dim, axis, fused);
        const bool same = testing::bitwise_equal(f.local(), u.local()) && f.placements() == u.placements();
        EXPECT_TRUE(all_ranks_ok(same && right))
            << group_name(mesh, axis) << " A " << fmt::format("{}", c.a) << " scatter dim " << c.scatter_dim << " "
            << to_string(c.act) << " x " << to_string(c.weight) << " -> " << to_string(c.out) << " "
            << to_string(algorithm) << ": same bits " << same << ", close to float64 " << right;
        ++checked;
      }
    }
  });
  if (world_size() > 1) {
    EXPECT_GE(checked, 12);
  }
}

// all_gather_matmul on a batch dim B has too or with B split on K,
// matmul_reduce_scatter without partial sums or onto the product's columns: the
// same error on every rank, before anything moves (the mesh stays usable).
TEST(CollectiveMatmul, BadArgumentsFailAlikeOnEveryRank) {
  if (world_size() == 1) GTEST_SKIP() << "needs a group of 2 or more";
  auto mesh = MeshDevice::open(MeshShape{1, world_size()});
  const int n = world_size();
  const MeshTensor a_rows = placed(Shape{32 * n, 64}, 1, DataType::FLOAT32, {Replicate{}, Shard{0}}, mesh);
  const MeshTensor a_k = placed(Shape{32, 64 * n}, 1, DataType::FLOAT32, {Replicate{}, Shard{1}}, mesh);
  const MeshTensor a_batch = placed(Shape{2 * n, 32, 64}, 1, DataType::FLOAT32, {Replicate{}, Shard{0}}, mesh);
  const MeshTensor b_batch = placed(Shape{2 * n, 64, 64}, 2, DataType::BFLOAT16, {Replicate{}, Replicate{}}, mesh);
  const MeshTensor b_k_split = placed(Shape{64, 64}, 2, DataType::BFLOAT16, {Replicate{}, Shard{0}}, mesh);
  const MeshTensor b_wide = placed(Shape{64 * n, 64}, 2, DataType::BFLOAT16, {Replicate{}, Replicate{}}, mesh);
  const MeshTensor b_k_split_wide = placed(Shape{64 * n, 64}, 2, DataType::BFLOAT16, {Replicate{}, Shard{0}}, mesh);
  for (auto [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"a batch dim B has too", [&] { all_gather_matmul(a_batch, b_batch, 0); }},
           {"B split on K", [&] { all_gather_matmul(a_rows, b_k_split, 0); }},
           {"no partial sums to scatter", [&] { matmul_reduce_scatter(a_rows, b_wide, 0); }},
           {"scatter on the columns", [&] { matmul_reduce_scatter(a_k, b_k_split_wide, 1); }},
       }) {
    const std::string message = testing::error_message_of(call);
    EXPECT_FALSE(message.empty()) << what;
    EXPECT_TRUE(testing::same_on_all_ranks(message)) << what << ": " << message;
  }
  // Still usable.
  const MeshTensor b = placed(Shape{64, 64}, 3, DataType::BFLOAT16, {Replicate{}, Replicate{}}, mesh);
  EXPECT_TRUE(all_gather_matmul(a_rows, b, 0).product.local().shape() == (Shape{32 * n, 64}));
}

}  // namespace
}  // namespace meshnn
