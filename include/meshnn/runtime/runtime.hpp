// Process-wide start-up: MPI, core binding and the rank's worker threads.
//
//   int main(int argc, char** argv) {
//     meshnn::Runtime runtime(argc, argv);   // MPI_Init_thread + hwloc binding + thread pool
//     auto mesh = meshnn::MeshDevice::open(meshnn::MeshShape{1, 2});
//     ...
//   }                                          // MPI_Finalize
//
// Environment:
//   MESHNN_NUM_THREADS=n     worker threads per rank (default: the cores the rank is bound to)
//   MESHNN_SHOW_BINDING=1    every rank prints its host, local rank, cores and threads
//   MESHNN_BIND=0            leave the process where the launcher put it
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meshnn/core/thread_pool.hpp"

namespace meshnn {

struct CoreBinding {
  std::string host;
  int local_rank = 0;    // rank among the ranks on this node
  int local_ranks = 1;   // ranks on this node
  int node_cores = 1;    // physical cores hwloc sees on this node
  std::vector<int> cores;    // logical indices of the cores this rank owns
  std::vector<int> cpu_ids;  // one OS cpu (first hardware thread) per owned core
  bool shared = false;   // more ranks than cores: cores are shared round-robin
  bool applied = false;  // the process was actually bound
  std::string describe() const;
};

// Which of a process's threads may call MPI.
//   FUNNELED  the main thread only: the default. Collectives and their watchdog run there and the
//             worker threads never call MPI, and MULTIPLE puts a lock around every call, adding
//             about 60% to a small exchange (docs/design-measurements.md §11).
//   MULTIPLE  any thread: the server's relay thread on world rank 0 (server/root_relay.hpp).
enum class MpiThreads { FUNNELED, MULTIPLE };

class Runtime {
 public:
  // Initialises MPI with the thread support asked for (warns if the library provides less than
  // FUNNELED; thread_level() says what it gave), binds this rank to its share of the node's cores
  // and starts the worker threads. One per process.
  Runtime(int& argc, char**& argv, MpiThreads threads = MpiThreads::FUNNELED);
  ~Runtime();  // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  static Runtime& instance();  // fatal if no Runtime exists
  static bool exists();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int thread_level() const { return thread_level_; }
  const CoreBinding& binding() const { return binding_; }
  ThreadPool& pool() { return *pool_; }

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  int thread_level_ = 0;
  CoreBinding binding_;
  std::unique_ptr<ThreadPool> pool_;
};

// Computes (without applying) the cores of local rank `local_rank` of `local_ranks`, as disjoint
// contiguous ranges of the node's cores; when ranks outnumber cores each rank gets one core,
// shared round-robin. Exposed for tests.
std::vector<int> cores_for_local_rank(int local_rank, int local_ranks, int node_cores);

}  // namespace meshnn
