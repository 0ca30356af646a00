#include "meshnn/runtime/runtime.hpp"

#include "meshnn/core/process_context.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn {

CoreBinding bind_this_rank(bool apply);  // binding.cpp

namespace {

Runtime* g_runtime = nullptr;

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string(v) != "0";
}
}  // namespace

Runtime::Runtime(int& argc, char**& argv, MpiThreads threads) {
  if (g_runtime != nullptr) fatal("meshnn::Runtime created twice in one process");
  const int required = threads == MpiThreads::MULTIPLE ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  MESHNN_MPI_CHECK(MPI_Init_thread(&argc, &argv, required, &thread_level_));
  // Errors come back as codes and go through meshnn::fatal, which names the rank and coordinate.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  world_rank_ = comm_rank(MPI_COMM_WORLD);
  world_size_ = comm_size(MPI_COMM_WORLD);
  g_runtime = this;
  if (thread_level_ < MPI_THREAD_FUNNELED && world_rank_ == 0)
    std::fprintf(stderr, "meshnn: warning: MPI provides thread level %d only, below FUNNELED; the worker "
                 "threads are outside what it supports\n", thread_level_);

  binding_ = bind_this_rank(env_flag("MESHNN_BIND", true));
  int workers = static_cast<int>(binding_.cores.size());
  if (const char* v = std::getenv("MESHNN_NUM_THREADS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024) fatal(fmt::format("MESHNN_NUM_THREADS='{}' is not a thread count from 1 to 1024", v));
    workers = static_cast<int>(n);
  }
  std::vector<int> cpus;
  if (binding_.applied && static_cast<int>(binding_.cpu_ids.size()) == workers) cpus = binding_.cpu_ids;
  // Workers poll between jobs only where each has a core of its own (docs/performance.md: a wake-up
  // from sleep took 40-80 us, many decode-step ops take less); with ranks sharing cores, or more
  // workers than the rank's cores, polling would take time from the workers that have work.
  const bool own_cores = !binding_.shared && workers <= static_cast<int>(binding_.cores.size());
  pool_ = std::make_unique<ThreadPool>(workers, cpus, own_cores ? kWorkerPollTime : std::chrono::microseconds{0});
  set_default_worker_pool(pool_.get());
  set_ranks_share_cores(binding_.shared);

  if (env_flag("MESHNN_SHOW_BINDING", false)) {
    std::fprintf(stderr, "[meshnn rank %d] %s, %d worker thread%s\n", world_rank_, binding_.describe().c_str(),
                 workers, workers == 1 ? "" : "s");
    std::fflush(stderr);
  }
}

Runtime::~Runtime() {
  set_default_worker_pool(nullptr);
  set_ranks_share_cores(true);
  pool_.reset();
  g_runtime = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Runtime& Runtime::instance() {
  if (g_runtime == nullptr) fatal("meshnn::Runtime::instance() called before a Runtime was created");
  return *g_runtime;
}

bool Runtime::exists() { return g_runtime != nullptr; }

}  // namespace meshnn
