#include <fmt/format.h>

#include <algorithm>

#include "meshnn/ccl/transport.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::ccl {

// One posted transfer: one MPI request per piece of at most kMaxPieceBytes.
struct MpiTransport::Slot {
  std::vector<MPI_Request> requests;
  std::vector<MPI_Status> statuses;
  std::vector<int> piece_bytes;  // receives: the size each piece must arrive with
  bool is_recv = false;
  int peer = 0;
  int tag = 0;
};

MpiTransport::MpiTransport(MPI_Comm comm, std::function<std::string(int)> namer)
    : comm_(comm), namer_(std::move(namer)) {
  rank_ = comm_rank(comm);
  size_ = comm_size(comm);
  int flag = 0;
  int* tag_ub = nullptr;
  MESHNN_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &flag));
  if (flag && tag_ub) max_tag_ = *tag_ub;
}

MpiTransport::~MpiTransport() = default;

int MpiTransport::allocate_slot() {
  if (!free_slots_.empty()) {
    int id = free_slots_.back();
    free_slots_.pop_back();
    return id;
  }
  slots_.push_back(std::make_unique<Slot>());
  return static_cast<int>(slots_.size()) - 1;
}

int MpiTransport::post_send(int peer, int tag, const void* data, size_t bytes) {
  const int id = allocate_slot();
  Slot& s = *slots_[id];
  s.requests.clear();
  s.piece_bytes.clear();
  s.is_recv = false;
  s.peer = peer;
  s.tag = tag;
  const auto* p = static_cast<const std::byte*>(data);
  // Pieces of one message share the tag; MPI's non-overtaking rule keeps them in order.
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxPieceBytes, bytes - offset);
    MPI_Request r;
    MESHNN_MPI_CHECK(MPI_Isend(p + offset, checked_mpi_count(static_cast<int64_t>(n)), MPI_BYTE, peer, tag, comm_, &r));
    s.requests.push_back(r);
    offset += n;
  } while (offset < bytes);
  return id;
}

int MpiTransport::post_recv(int peer, int tag, void* data, size_t bytes) {
  const int id = allocate_slot();
  Slot& s = *slots_[id];
  s.requests.clear();
  s.piece_bytes.clear();
  s.is_recv = true;
  s.peer = peer;
  s.tag = tag;
  auto* p = static_cast<std::byte*>(data);
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxPieceBytes, bytes - offset);
    MPI_Request r;
    const int count = checked_mpi_count(static_cast<int64_t>(n));
    MESHNN_MPI_CHECK(MPI_Irecv(p + offset, count, MPI_BYTE, peer, tag, comm_, &r));
    s.requests.push_back(r);
    s.piece_bytes.push_back(count);
    offset += n;
  } while (offset < bytes);
  return id;
}

bool MpiTransport::test(int request) {
  Slot& s = *slots_[request];
  int done = 0;
  s.statuses.resize(s.requests.size());
  MESHNN_MPI_CHECK(MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done, s.statuses.data()));
  if (!done) return false;
  if (s.is_recv) {
    // A shorter message than posted means the two sides disagree about the schedule.
    for (size_t i = 0; i < s.piece_bytes.size(); ++i) {
      int got = 0;
      MESHNN_MPI_CHECK(MPI_Get_count(&s.statuses[i], MPI_BYTE, &got));
      MESHNN_FATAL_IF(got != s.piece_bytes[i], "ccl: received {} bytes from {} (tag {}), expected {}", got,
                      describe_member(s.peer), s.tag, s.piece_bytes[i]);
    }
  }
  free_slots_.push_back(request);
  return true;
}

std::string MpiTransport::describe_member(int position) const {
  if (namer_) return namer_(position);
  return fmt::format("rank {}", position);
}

}  // namespace meshnn::ccl
