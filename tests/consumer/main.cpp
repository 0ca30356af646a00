// Opens a 1x2 mesh, shards a tensor over it, all_gathers it back with meshnn's collective and
// checks every rank's shard and result against the values it was built from. Exits 1 on any
// mismatch. Run on 2 ranks: mpirun -np 2 consumer
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/mesh/mesh_device.hpp"

namespace {

using namespace meshnn;

constexpr int64_t kRows = 32, kCols = 128;

// The value at (row, col) of the global tensor; small integers, exact in float32.
float value_at(int64_t row, int64_t col) { return static_cast<float>(row * kCols + col); }

// Counts the elements of `got` (a rows x width block) that differ from the global tensor's
// columns [col0, col0 + width).
int mismatches(const std::vector<float>& got, int64_t col0, int64_t width) {
  if (got.size() != static_cast<size_t>(kRows * width)) return static_cast<int>(kRows * width);
  int bad = 0;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < width; ++c) bad += got[static_cast<size_t>(r * width + c)] != value_at(r, col0 + c);
  return bad;
}

int run() {
  auto mesh = MeshDevice::open(MeshShape{1, 2});
  const int device = mesh->device_id();

  std::vector<float> values(static_cast<size_t>(kRows * kCols));
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) values[static_cast<size_t>(r * kCols + c)] = value_at(r, c);
  const Tensor host = Tensor::from_float(values, Shape{1, 1, kRows, kCols}, DataType::FLOAT32, Layout::TILE);

  const MeshTensor sharded = distribute_tensor(host, ShardTensorToMesh(3), mesh);
  const int64_t width = kCols / mesh->num_devices();
  const int shard_bad = mismatches(sharded.local().to_float(), device * width, width);

  const MeshTensor gathered = all_gather(sharded, 3);
  int gathered_bad = mismatches(gathered.local().to_float(), 0, kCols);
  if (!(gathered.placements() == Placements{Replicate{}, Replicate{}})) ++gathered_bad;

  std::printf("device %d: shard %s (%d wrong), all_gather %s %s (%d wrong)\n", device,
              sharded.shard_shape().to_string().c_str(), shard_bad, gathered.local().shape().to_string().c_str(),
              to_string(gathered.placements()).c_str(), gathered_bad);
  return shard_bad == 0 && gathered_bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    status = run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other rank may be waiting in the collective
  }
  MPI_Finalize();
  return status;
}
