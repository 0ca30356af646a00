// Small helpers over MPI: checked calls, checked int counts, and agreement on rank-local failures.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

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

// Runs fn on this rank, then agree_on_failure over comm on whether it threw: a step that can fail
// on some ranks only (a file one rank reads or writes) fails on every rank alike.
template <class Fn>
void run_agreed(MPI_Comm comm, const std::string& what, Fn&& fn) {
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    message = e.what();
  }
  agree_on_failure(comm, what, message.empty(), message);
}

// Rank 0's value of x, on every rank (one MPI_Bcast: control data, not a tensor collective). For
// what ranks must agree on but read locally, such as the clock a chat template prints the date of.
int64_t root_value(MPI_Comm comm, int64_t x);
// Rank 0's text (or its nullopt: no more text) on every rank, as root_value; the others' argument
// is ignored.
std::optional<std::string> root_text(MPI_Comm comm, const std::optional<std::string>& text);

// How a communicator's point-to-point messages travel: SHARED_MEMORY when every member runs on one
// node and MPI may use its shared-memory transport; NETWORK when the members span nodes or the
// job forced a network transport on one node (Open MPI's `--mca btl tcp,self`, the stand-in for
// separate nodes). Collective schedules choose piece sizes and algorithms per kind.
enum class TransportKind { SHARED_MEMORY, NETWORK };
std::string_view to_string(TransportKind kind);  // "shm", "net" (MESHNN_CCL_TRANSPORT's values)

// Whether Open MPI's component selection leaves point-to-point messages no shared-memory path:
// `btl` (the value of OMPI_MCA_btl, "" when unset) names no shared-memory BTL (sm, vader, smcuda)
// or excludes one ("^vader"), and `pml` (OMPI_MCA_pml, "" when unset) does not select a PML other
// than ob1 (ucx and cm pick their own transports and ignore the BTL list). Pure.
bool mca_forces_network(std::string_view pml, std::string_view btl);

// The kind of comm's messages, identical on every member: NETWORK if any member shares its node
// with fewer than all members (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) or runs under an Open MPI
// selection that forces the network (mca_forces_network on its OMPI_MCA_pml / OMPI_MCA_btl). The
// environment variable MESHNN_CCL_TRANSPORT=shm|net overrides the detection (set it on every
// rank; if ranks disagree, NETWORK wins). Collective over comm (one MPI_Allreduce): call it once
// per communicator and keep the result. A value other than shm or net on any rank throws the same
// meshnn::Error on every rank.
TransportKind detect_transport_kind(MPI_Comm comm);

}  // namespace meshnn
