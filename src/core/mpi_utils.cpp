#include "meshnn/core/mpi_utils.hpp"

#include <fmt/format.h>

#include <vector>

namespace meshnn {

void fatal_mpi_error(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fatal(fmt::format("MPI call failed: {}: {}", call, std::string(text, length)));
}

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MESHNN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  MESHNN_MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}

void agree_on_failure(MPI_Comm comm, const std::string& what, bool local_ok, const std::string& local_message) {
  // Control-plane agreement (a few bytes), not tensor data: MPI's own collectives are fine here.
  const int size = comm_size(comm);
  const int my_status = local_ok ? 0 : 1;
  std::vector<int> statuses(size);
  MESHNN_MPI_CHECK(MPI_Allgather(&my_status, 1, MPI_INT, statuses.data(), 1, MPI_INT, comm));
  int first_failed = -1;
  std::string failed_list;
  for (int r = 0; r < size; ++r) {
    if (!statuses[r]) continue;
    if (first_failed < 0) first_failed = r;
    failed_list += (failed_list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (first_failed < 0) return;

  // Everyone learns the lowest failing rank's message, so the thrown text is identical everywhere.
  int length = comm_rank(comm) == first_failed ? static_cast<int>(local_message.size()) : 0;
  MESHNN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_failed, comm));
  std::string message(static_cast<size_t>(length), '\0');
  if (comm_rank(comm) == first_failed) message = local_message;
  MESHNN_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first_failed, comm));
  throw Error(fmt::format("{} failed on rank{} {}: {}", what, failed_list.find(',') == std::string::npos ? "" : "s",
                          failed_list, message));
}

}  // namespace meshnn
