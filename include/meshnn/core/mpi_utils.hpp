// Small helpers over MPI: checked calls, checked int counts, and agreement on rank-local failures.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <limits>
#include <string>

#include "meshnn/core/error.hpp"

namespace meshnn {

// An MPI call failing mid-operation cannot be reported symmetrically: abort the job.
#define MESHNN_MPI_CHECK(call)                                                        \
  do {                                                                                \
    int meshnn_mpi_rc_ = (call);                                                      \
    if (meshnn_mpi_rc_ != MPI_SUCCESS) ::meshnn::fatal_mpi_error(#call, meshnn_mpi_rc_); \
  } while (0)

[[noreturn]] void fatal_mpi_error(const char* call, int code);

// MPI counts are int: convert a size, aborting if it does not fit (callers chunk large transfers).
inline int checked_mpi_count(int64_t n) {
  if (n < 0 || n > std::numeric_limits<int>::max())
    fatal("message of " + std::to_string(n) + " elements does not fit an MPI int count");
  return static_cast<int>(n);
}

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

// Rank-local failures, made symmetric (STYLE.md rule 3): every rank passes its own status; all
// learn who failed. If any rank failed, every rank throws the same meshnn::Error:
//   "<what> failed on rank(s) 1, 3: <message of the lowest failing rank>"
// Collective over comm; call it at the end of a phase that may fail locally.
void agree_on_failure(MPI_Comm comm, const std::string& what, bool local_ok, const std::string& local_message);

}  // namespace meshnn
