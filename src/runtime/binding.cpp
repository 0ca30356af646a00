// Binds each rank to its own cores with hwloc. Ranks on one node (found through a shared-memory
// split of MPI_COMM_WORLD) take disjoint, contiguous ranges of the node's physical cores, so two
// ranks never compete for one core unless the node is oversubscribed.
#include <hwloc.h>
#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/runtime/runtime.hpp"

namespace meshnn {

std::vector<int> cores_for_local_rank(int local_rank, int local_ranks, int node_cores) {
  if (node_cores < 1) node_cores = 1;
  if (local_ranks > node_cores) return {local_rank % node_cores};
  std::vector<int> cores;
  const int begin = static_cast<int>(static_cast<int64_t>(local_rank) * node_cores / local_ranks);
  const int end = static_cast<int>(static_cast<int64_t>(local_rank + 1) * node_cores / local_ranks);
  for (int c = begin; c < end; ++c) cores.push_back(c);
  return cores;
}

std::string CoreBinding::describe() const {
  return fmt::format("host {} local rank {}/{}: cores [{}] (os cpus [{}]) of {}{}{}", host, local_rank, local_ranks,
                     fmt::join(cores, ", "), fmt::join(cpu_ids, ", "), node_cores,
                     shared ? ", shared (more ranks than cores)" : "", applied ? "" : ", not applied");
}

CoreBinding bind_this_rank(bool apply) {
  CoreBinding b;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  b.host = host;

  MPI_Comm node = MPI_COMM_NULL;
  MESHNN_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  b.local_rank = comm_rank(node);
  b.local_ranks = comm_size(node);
  MPI_Comm_free(&node);

  hwloc_topology_t topology;
  hwloc_topology_init(&topology);
  hwloc_topology_load(topology);
  hwloc_obj_type_t unit = HWLOC_OBJ_CORE;
  int units = hwloc_get_nbobjs_by_type(topology, unit);
  if (units <= 0) {
    unit = HWLOC_OBJ_PU;
    units = hwloc_get_nbobjs_by_type(topology, unit);
  }
  b.node_cores = units > 0 ? units : 1;
  b.cores = cores_for_local_rank(b.local_rank, b.local_ranks, b.node_cores);
  b.shared = b.local_ranks > b.node_cores;

  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (int c : b.cores) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topology, unit, static_cast<unsigned>(c));
    if (obj == nullptr) continue;
    hwloc_bitmap_or(set, set, obj->cpuset);
    b.cpu_ids.push_back(hwloc_bitmap_first(obj->cpuset));
  }
  if (apply && !hwloc_bitmap_iszero(set)) b.applied = hwloc_set_cpubind(topology, set, HWLOC_CPUBIND_PROCESS) == 0;
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topology);
  return b;
}

}  // namespace meshnn
