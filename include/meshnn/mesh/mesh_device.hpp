// MeshDevice: a logical rows x cols grid of devices laid over MPI ranks, one rank per device.
//
// Rank r of the communicator the mesh is opened over is the device at (r / cols, r % cols).
// cluster_axis 0 groups the `rows` devices that share a column index; cluster_axis 1 groups the
// `cols` devices that share a row index. Each MeshDevice owns duplicated communicators, so its
// traffic never meets the caller's.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshnn/core/mpi_utils.hpp"

namespace meshnn {

struct MeshShape {
  int rows = 1;
  int cols = 1;
  int num_devices() const { return rows * cols; }
  bool operator==(const MeshShape&) const = default;
  std::string to_string() const;  // "1x2"
};
// Parses "RxC" (e.g. "2x4"); throws meshnn::Error otherwise.
MeshShape parse_mesh_shape(const std::string& text);

struct MeshCoordinate {
  int row = 0;
  int col = 0;
  bool operator==(const MeshCoordinate&) const = default;
  std::string to_string() const;  // "(0, 1)"
};

// Ring: wrap-around links; Linear: a line with two ends. Chooses the collective schedule.
enum class Topology { RING, LINEAR };
std::string_view to_string(Topology t);
Topology parse_topology(std::string_view name);  // "ring" / "linear" (case-insensitive)

class MeshDevice;
using MeshDevicePtr = std::shared_ptr<MeshDevice>;

class MeshDevice {
 public:
  // Collective over `comm`. Throws meshnn::Error on every rank, before any communication beyond
  // reading the communicator size, when shape.rows * shape.cols != size of comm or a dim < 1.
  static MeshDevicePtr open(MeshShape shape, Topology topology = Topology::RING, MPI_Comm comm = MPI_COMM_WORLD);
  ~MeshDevice();
  MeshDevice(const MeshDevice&) = delete;
  MeshDevice& operator=(const MeshDevice&) = delete;

  MeshShape shape() const { return shape_; }
  Topology topology() const { return topology_; }
  int num_devices() const { return shape_.num_devices(); }
  int num_rows() const { return shape_.rows; }
  int num_cols() const { return shape_.cols; }
  // This rank's device.
  int device_id() const { return rank_; }
  MeshCoordinate coordinate() const { return coordinate_of(rank_); }
  MeshCoordinate coordinate_of(int device_id) const { return {device_id / shape_.cols, device_id % shape_.cols}; }
  int device_id_of(MeshCoordinate c) const { return c.row * shape_.cols + c.col; }

  // Whole mesh, row-major. Owned by the mesh.
  MPI_Comm comm() const { return comm_; }
  // Devices along cluster_axis (0: my column, ordered by row; 1: my row, ordered by col).
  // Throws meshnn::Error for an axis other than 0 or 1.
  MPI_Comm axis_comm(int cluster_axis) const;
  int axis_size(int cluster_axis) const;      // rows for axis 0, cols for axis 1
  int axis_position(int cluster_axis) const;  // my row for axis 0, my col for axis 1
  // How comm()'s / axis_comm()'s messages travel (detect_transport_kind, decided collectively when
  // the communicators are made): the same on every rank of the communicator.
  TransportKind transport_kind() const { return comm_kind_; }
  TransportKind axis_transport_kind(int cluster_axis) const;

  // Tiles the mesh into equal submeshes of `submesh_shape` (row-major order of submeshes) and
  // returns the one this rank belongs to. Collective. Throws meshnn::Error unless the shape
  // divides the mesh shape in both dims.
  struct Submeshes {
    MeshDevicePtr mine;  // this rank's submesh
    int index = 0;       // its row-major index among the submeshes
    int count = 0;       // number of submeshes
    MeshShape grid;      // how the submeshes tile the mesh (rows x cols of submeshes)
  };
  Submeshes create_submeshes(MeshShape submesh_shape);

  // Same devices, a different shape of the same volume (row-major order kept). Collective.
  void reshape(MeshShape new_shape);

  // Barrier over the mesh (TT-NN's synchronize_device).
  void synchronize() const;
  // Frees the communicators; the mesh is unusable after. Also done by the destructor. Collective.
  void close();
  bool is_open() const { return comm_ != MPI_COMM_NULL; }

  // Identical on every rank: counts the collective operations issued on this mesh, so messages
  // of different operations get different tags.
  uint64_t next_operation_id() { return operation_counter_++; }

  // "device 3 (0, 3)", used to prefix messages.
  std::string describe_self() const;

 private:
  MeshDevice(MeshShape shape, Topology topology, MPI_Comm comm);
  void build_axis_comms();
  void free_comms();

  MeshShape shape_;
  Topology topology_;
  int rank_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm row_comm_ = MPI_COMM_NULL;     // cluster_axis 1
  MPI_Comm column_comm_ = MPI_COMM_NULL;  // cluster_axis 0
  TransportKind comm_kind_ = TransportKind::SHARED_MEMORY;
  TransportKind row_kind_ = TransportKind::SHARED_MEMORY;
  TransportKind column_kind_ = TransportKind::SHARED_MEMORY;
  uint64_t operation_counter_ = 0;
};

// TT-NN's box table of the mesh ("MeshDevice(rows=1, cols=2):" then one box per device with its
// id and coordinate). Pure: the same string on every rank.
std::string visualize_mesh_device(const MeshDevice& mesh);
std::string visualize_mesh_device(MeshShape shape);

// The same box table with caller-chosen lines in each device's cell (device id -> lines), used by
// the tensor view. Cells widen to fit the longest line.
std::string draw_mesh_table(MeshShape shape, const std::string& title,
                            const std::function<std::vector<std::string>(int)>& cell_lines);

}  // namespace meshnn
