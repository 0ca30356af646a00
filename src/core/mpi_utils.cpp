#include "meshnn/core/mpi_utils.hpp"

#include <fmt/format.h>

#include <cstdlib>
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

int64_t root_value(MPI_Comm comm, int64_t x) {
  MESHNN_MPI_CHECK(MPI_Bcast(&x, 1, MPI_INT64_T, 0, comm));
  return x;
}

std::optional<std::string> root_text(MPI_Comm comm, const std::optional<std::string>& text) {
  const int64_t length = root_value(comm, text ? static_cast<int64_t>(text->size()) : -1);
  if (length < 0) return std::nullopt;
  std::string received = comm_rank(comm) == 0 ? *text : std::string(static_cast<size_t>(length), '\0');
  MESHNN_MPI_CHECK(MPI_Bcast(received.data(), checked_mpi_count(length), MPI_CHAR, 0, comm));
  return received;
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

std::string_view to_string(TransportKind kind) { return kind == TransportKind::NETWORK ? "net" : "shm"; }

namespace {

// Open MPI's MCA lists: "a,b" includes only a and b, "^a,b" excludes a and b.
bool list_names(std::string_view list, std::string_view name) {
  if (!list.empty() && list.front() == '^') list.remove_prefix(1);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

bool is_exclusion(std::string_view list) { return !list.empty() && list.front() == '^'; }

std::string_view env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string_view(v) : std::string_view();
}

}  // namespace

bool mca_forces_network(std::string_view pml, std::string_view btl) {
  if (btl.empty()) return false;
  if (!pml.empty() && !is_exclusion(pml) && !list_names(pml, "ob1")) return false;
  // Open MPI 4 calls its shared-memory BTL vader (sm is its alias), Open MPI 5 calls it sm.
  bool names_shm = false;
  for (std::string_view shm : {"sm", "vader", "smcuda"}) names_shm = names_shm || list_names(btl, shm);
  return is_exclusion(btl) ? names_shm : !names_shm;
}

TransportKind detect_transport_kind(MPI_Comm comm) {
  // Split on every member, override or not: MPI_Comm_split_type is collective.
  MPI_Comm node = MPI_COMM_NULL;
  MESHNN_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  const bool spans_nodes = comm_size(node) < comm_size(comm);
  MESHNN_MPI_CHECK(MPI_Comm_free(&node));
  // vote[0]: this member's messages may cross a network; vote[1]: its override is malformed.
  int vote[2] = {0, 0};
  const std::string_view forced = env_or_empty("MESHNN_CCL_TRANSPORT");
  if (!forced.empty()) {
    vote[0] = forced == "net";
    vote[1] = forced != "net" && forced != "shm";
  } else {
    vote[0] = spans_nodes || mca_forces_network(env_or_empty("OMPI_MCA_pml"), env_or_empty("OMPI_MCA_btl"));
  }
  // Control plane, once per communicator: MPI's own collective is fine here. MAX makes every
  // member take the same answer, so no two members ever run different schedules.
  MESHNN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, vote, 2, MPI_INT, MPI_MAX, comm));
  if (vote[1]) throw Error("MESHNN_CCL_TRANSPORT must be shm or net (or unset) on every rank");
  return vote[0] ? TransportKind::NETWORK : TransportKind::SHARED_MEMORY;
}

}  // namespace meshnn
