#include "meshnn/mesh/mesh_device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn {
namespace {

bool mpi_is_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void free_comm(MPI_Comm& comm) {
  if (comm != MPI_COMM_NULL && mpi_is_active()) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

void check_mesh_shape(MeshShape shape) {
  MESHNN_CHECK(shape.rows >= 1 && shape.cols >= 1, "MeshShape({}, {}) needs at least one row and one column",
               shape.rows, shape.cols);
}

}  // namespace

std::string MeshShape::to_string() const { return fmt::format("{}x{}", rows, cols); }

MeshShape parse_mesh_shape(const std::string& text) {
  int rows = 0, cols = 0;
  char x = 0, extra = 0;
  const int n = std::sscanf(text.c_str(), "%d%c%d%c", &rows, &x, &cols, &extra);
  MESHNN_CHECK(n == 3 && (x == 'x' || x == 'X') && rows >= 1 && cols >= 1,
               "mesh shape '{}' is not of the form RxC with R, C >= 1 (e.g. 1x2, 2x4, 8x4)", text);
  return {rows, cols};
}

std::string MeshCoordinate::to_string() const { return fmt::format("({}, {})", row, col); }

std::string_view to_string(Topology t) { return t == Topology::RING ? "Ring" : "Linear"; }

Topology parse_topology(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "ring") return Topology::RING;
  if (lower == "linear" || lower == "line") return Topology::LINEAR;
  throw Error(fmt::format("unknown topology '{}' (expected ring or linear)", name));
}

MeshDevicePtr MeshDevice::open(MeshShape shape, Topology topology, MPI_Comm comm) {
  check_mesh_shape(shape);
  const int size = comm_size(comm);
  MESHNN_CHECK(shape.num_devices() == size,
               "MeshShape({}, {}) needs {} devices (one MPI rank each) but the job has {} rank{}; run with "
               "mpirun -np {} or choose a mesh of {} devices",
               shape.rows, shape.cols, shape.num_devices(), size, size == 1 ? "" : "s", shape.num_devices(), size);
  MPI_Comm own = MPI_COMM_NULL;
  MESHNN_MPI_CHECK(MPI_Comm_dup(comm, &own));
  return MeshDevicePtr(new MeshDevice(shape, topology, own));
}

MeshDevice::MeshDevice(MeshShape shape, Topology topology, MPI_Comm comm)
    : shape_(shape), topology_(topology), rank_(comm_rank(comm)), comm_(comm), comm_kind_(detect_transport_kind(comm)) {
  build_axis_comms();
  set_fatal_context(describe_self());
}

MeshDevice::~MeshDevice() { free_comms(); }

void MeshDevice::build_axis_comms() {
  const MeshCoordinate me = coordinate();
  // Row communicator (cluster_axis 1): same row, ordered by column; column communicator
  // (cluster_axis 0): same column, ordered by row. Keys make group position == coordinate.
  MESHNN_MPI_CHECK(MPI_Comm_split(comm_, me.row, me.col, &row_comm_));
  MESHNN_MPI_CHECK(MPI_Comm_split(comm_, me.col, me.row, &column_comm_));
  row_kind_ = detect_transport_kind(row_comm_);
  column_kind_ = detect_transport_kind(column_comm_);
}

void MeshDevice::free_comms() {
  free_comm(row_comm_);
  free_comm(column_comm_);
  free_comm(comm_);
}

MPI_Comm MeshDevice::axis_comm(int cluster_axis) const {
  MESHNN_CHECK(cluster_axis == 0 || cluster_axis == 1, "cluster_axis must be 0 or 1, got {}", cluster_axis);
  return cluster_axis == 0 ? column_comm_ : row_comm_;
}

TransportKind MeshDevice::axis_transport_kind(int cluster_axis) const {
  MESHNN_CHECK(cluster_axis == 0 || cluster_axis == 1, "cluster_axis must be 0 or 1, got {}", cluster_axis);
  return cluster_axis == 0 ? column_kind_ : row_kind_;
}

int MeshDevice::axis_size(int cluster_axis) const {
  MESHNN_CHECK(cluster_axis == 0 || cluster_axis == 1, "cluster_axis must be 0 or 1, got {}", cluster_axis);
  return cluster_axis == 0 ? shape_.rows : shape_.cols;
}

int MeshDevice::axis_position(int cluster_axis) const {
  MESHNN_CHECK(cluster_axis == 0 || cluster_axis == 1, "cluster_axis must be 0 or 1, got {}", cluster_axis);
  return cluster_axis == 0 ? coordinate().row : coordinate().col;
}

MeshDevice::Submeshes MeshDevice::create_submeshes(MeshShape submesh_shape) {
  check_mesh_shape(submesh_shape);
  MESHNN_CHECK(shape_.rows % submesh_shape.rows == 0 && shape_.cols % submesh_shape.cols == 0,
               "submesh shape {} does not tile the {} mesh (rows and cols must divide)", submesh_shape.to_string(),
               shape_.to_string());
  const MeshShape grid{shape_.rows / submesh_shape.rows, shape_.cols / submesh_shape.cols};
  const MeshCoordinate me = coordinate();
  const int index = (me.row / submesh_shape.rows) * grid.cols + me.col / submesh_shape.cols;
  const int key = (me.row % submesh_shape.rows) * submesh_shape.cols + me.col % submesh_shape.cols;
  MPI_Comm sub = MPI_COMM_NULL;
  MESHNN_MPI_CHECK(MPI_Comm_split(comm_, index, key, &sub));
  MeshDevicePtr mine(new MeshDevice(submesh_shape, topology_, sub));
  set_fatal_context(describe_self());  // the parent stays this rank's identity in messages
  return {mine, index, grid.num_devices(), grid};
}

void MeshDevice::reshape(MeshShape new_shape) {
  check_mesh_shape(new_shape);
  MESHNN_CHECK(new_shape.num_devices() == shape_.num_devices(),
               "cannot reshape a {} mesh ({} devices) to {} ({} devices): the number of devices must stay the same",
               shape_.to_string(), shape_.num_devices(), new_shape.to_string(), new_shape.num_devices());
  free_comm(row_comm_);
  free_comm(column_comm_);
  shape_ = new_shape;
  build_axis_comms();
  set_fatal_context(describe_self());
}

void MeshDevice::synchronize() const { MESHNN_MPI_CHECK(MPI_Barrier(comm_)); }

void MeshDevice::close() { free_comms(); }

std::string MeshDevice::describe_self() const {
  return fmt::format("device {} {} of {} mesh", rank_, coordinate().to_string(), shape_.to_string());
}

}  // namespace meshnn
