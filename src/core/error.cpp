#include "meshnn/core/error.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace meshnn {
namespace {
std::mutex& context_mutex() {
  static std::mutex m;
  return m;
}
std::string& fatal_context() {
  static std::string context;
  return context;
}
}  // namespace

void set_fatal_context(const std::string& context) {
  std::lock_guard lock(context_mutex());
  fatal_context() = context;
}

void fatal(const std::string& message) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi_up = initialized && !finalized;
  int rank = -1;
  if (mpi_up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string context;
  {
    std::lock_guard lock(context_mutex());
    context = fatal_context();
  }
  // One fprintf so that lines from different ranks don't interleave mid-message.
  std::fprintf(stderr, "[meshnn rank %d%s%s] fatal: %s\n", rank, context.empty() ? "" : " ", context.c_str(),
               message.c_str());
  std::fflush(stderr);
  // MPI_Abort tears down every rank of the job; a plain throw or exit here would leave the
  // peers blocked in their next receive.
  if (mpi_up) MPI_Abort(MPI_COMM_WORLD, 70);
  std::abort();
}

}  // namespace meshnn
