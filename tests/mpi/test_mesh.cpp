// MeshDevice over MPI: shapes vs rank count, coordinates, axis communicators, submeshes, reshape.
// Runs at 1, 2, 4 and 8 ranks and tries every mesh shape R x C with R * C = ranks.
#include <gtest/gtest.h>

#include "meshnn/core/error.hpp"
#include "meshnn/mesh/mesh_device.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::all_ranks_ok;
using testing::same_on_all_ranks;
using testing::world_rank;
using testing::all_mesh_shapes;
using testing::world_size;

TEST(MeshDevice, WrongSizeFailsWithTheSameMessageOnEveryRankAndNothingHangs) {
  const int n = world_size();
  for (MeshShape bad : {MeshShape{n + 1, 1}, MeshShape{2, n}, MeshShape{0, n}}) {
    const std::string message = testing::error_message_of([&] { MeshDevice::open(bad); });
    EXPECT_TRUE(all_ranks_ok(!message.empty())) << bad.to_string();
    EXPECT_TRUE(same_on_all_ranks(message)) << message;
  }
  const std::string message = testing::error_message_of([&] { MeshDevice::open({n + 1, 1}); });
  EXPECT_NE(message.find(fmt::format("needs {} devices", n + 1)), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("has {} rank", n)), std::string::npos) << message;
  // The job is still usable.
  EXPECT_TRUE(all_ranks_ok(MeshDevice::open({1, n})->num_devices() == n));
}

TEST(MeshDevice, CoordinatesAreRowMajorAndAxisGroupsMatchTheGrid) {
  for (MeshShape shape : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(shape);
    const MeshCoordinate c = mesh->coordinate();
    bool ok = c.row == world_rank() / shape.cols && c.col == world_rank() % shape.cols;
    ok = ok && mesh->device_id_of(c) == world_rank() && mesh->num_devices() == world_size();
    // cluster_axis 0: my column, ordered by row; cluster_axis 1: my row, ordered by column.
    for (int axis = 0; axis < 2; ++axis) {
      MPI_Comm comm = mesh->axis_comm(axis);
      int size = 0, pos = 0;
      MPI_Comm_size(comm, &size);
      MPI_Comm_rank(comm, &pos);
      ok = ok && size == mesh->axis_size(axis) && pos == mesh->axis_position(axis);
      // Everyone in my group shares my col (axis 0) or my row (axis 1).
      int key = axis == 0 ? c.col : c.row, min_key = 0, max_key = 0;
      MPI_Allreduce(&key, &min_key, 1, MPI_INT, MPI_MIN, comm);
      MPI_Allreduce(&key, &max_key, 1, MPI_INT, MPI_MAX, comm);
      ok = ok && min_key == key && max_key == key;
    }
    EXPECT_TRUE(all_ranks_ok(ok)) << shape.to_string();
    EXPECT_THROW(mesh->axis_comm(2), Error);
    EXPECT_TRUE(same_on_all_ranks(visualize_mesh_device(*mesh)));
    mesh->synchronize();
  }
}

TEST(MeshDevice, SubmeshesTileTheMesh) {
  for (MeshShape shape : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(shape);
    // Split into 1-row submeshes (data-parallel replicas of a row).
    const auto rows = mesh->create_submeshes({1, shape.cols});
    bool ok = rows.count == shape.rows && rows.index == mesh->coordinate().row &&
              rows.mine->coordinate() == MeshCoordinate{0, mesh->coordinate().col};
    EXPECT_TRUE(all_ranks_ok(ok)) << shape.to_string();
    if (shape.cols % 2 == 0) {
      const auto halves = mesh->create_submeshes({shape.rows, shape.cols / 2});
      ok = halves.count == 2 && halves.index == mesh->coordinate().col / (shape.cols / 2) &&
           halves.mine->num_devices() == world_size() / 2;
      EXPECT_TRUE(all_ranks_ok(ok)) << shape.to_string();
    }
    if (shape.cols > 1) {
      const std::string message = testing::error_message_of([&] { mesh->create_submeshes({shape.rows + 1, 1}); });
      EXPECT_TRUE(all_ranks_ok(!message.empty()));
      EXPECT_TRUE(same_on_all_ranks(message));
    }
  }
}

TEST(MeshDevice, ReshapeKeepsRankOrderAndRejectsOtherVolumes) {
  const int n = world_size();
  auto mesh = MeshDevice::open({1, n});
  mesh->reshape({n, 1});
  bool ok = mesh->shape() == MeshShape{n, 1} && mesh->coordinate() == MeshCoordinate{world_rank(), 0} &&
            mesh->axis_size(0) == n;
  EXPECT_TRUE(all_ranks_ok(ok));
  const std::string message = testing::error_message_of([&] { mesh->reshape({n + 1, 1}); });
  EXPECT_TRUE(all_ranks_ok(!message.empty() && mesh->shape() == MeshShape{n, 1}));
  EXPECT_TRUE(same_on_all_ranks(message));
  mesh->synchronize();
}

}  // namespace
}  // namespace meshnn
