#include <fmt/format.h>

#include <algorithm>

#include "meshnn/ccl/transport.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/core/process_context.hpp"

namespace meshnn::ccl {

bool Transport::test_all(std::span<int> requests) {
  bool all = true;
  for (int& r : requests) {
    if (r < 0) continue;
    if (test(r)) r = -1;
    else all = false;
  }
  return all;
}

namespace {
// MPI_TAG_UB of the last communicator seen on this thread: collectives are created per call, and
// querying the attribute every time costs more than the small collective itself.
int tag_ub_of(MPI_Comm comm) {
  thread_local MPI_Comm last_comm = MPI_COMM_NULL;
  thread_local int last_tag_ub = 32767;
  if (comm != last_comm) {
    int flag = 0;
    int* tag_ub = nullptr;
    MESHNN_MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &flag));
    last_tag_ub = flag && tag_ub ? *tag_ub : 32767;
    last_comm = comm;
  }
  return last_tag_ub;
}
}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, TransportKind kind, std::function<std::string(int)> namer)
    : comm_(comm), kind_(kind), namer_(std::move(namer)) {
  rank_ = comm_rank(comm);
  size_ = comm_size(comm);
  max_tag_ = tag_ub_of(comm);
  yields_when_idle_ = ranks_share_cores();
}

MpiTransport::~MpiTransport() = default;

int MpiTransport::allocate_slot() {
  if (free_head_ >= 0) {
    const int id = free_head_;
    free_head_ = slot(id).next_free;
    return id;
  }
  const int id = used_++;
  if (id >= kInlineSlots) more_slots_.emplace_back();
  return id;
}

void MpiTransport::release_slot(int id) {
  slot(id).next_free = free_head_;
  free_head_ = id;
}

int MpiTransport::post(bool is_recv, int peer, int tag, void* data, size_t bytes) {
  const int id = allocate_slot();
  Slot& s = slot(id);
  s.pieces.clear();
  s.is_recv = is_recv;
  s.peer = peer;
  s.tag = tag;
  s.bytes = bytes;
  auto* p = static_cast<std::byte*>(data);
  auto start = [&](std::byte* at, size_t n, MPI_Request* r) {
    const int count = checked_mpi_count(static_cast<int64_t>(n));
    if (is_recv) MESHNN_MPI_CHECK(MPI_Irecv(at, count, MPI_BYTE, peer, tag, comm_, r));
    else MESHNN_MPI_CHECK(MPI_Isend(at, count, MPI_BYTE, peer, tag, comm_, r));
  };
  if (bytes <= kMaxPieceBytes) {
    start(p, bytes, &s.request);
    return id;
  }
  // Pieces of one message share the tag; MPI's non-overtaking rule keeps them in order.
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxPieceBytes, bytes - offset);
    s.pieces.push_back(MPI_REQUEST_NULL);
    start(p + offset, n, &s.pieces.back());
    offset += n;
  } while (offset < bytes);
  return id;
}

int MpiTransport::post_send(int peer, int tag, const void* data, size_t bytes) {
  return post(false, peer, tag, const_cast<void*>(data), bytes);
}

int MpiTransport::post_recv(int peer, int tag, void* data, size_t bytes) {
  return post(true, peer, tag, data, bytes);
}

// A shorter message than posted means the two sides disagree about the schedule.
void MpiTransport::check_received(const Slot& s, const MPI_Status* statuses) const {
  if (!s.is_recv) return;
  const size_t pieces = s.pieces.empty() ? 1 : s.pieces.size();
  for (size_t i = 0; i < pieces; ++i) {
    const size_t expected = std::min(kMaxPieceBytes, s.bytes - i * kMaxPieceBytes);
    int got = 0;
    MESHNN_MPI_CHECK(MPI_Get_count(&statuses[i], MPI_BYTE, &got));
    MESHNN_FATAL_IF(static_cast<size_t>(got) != expected, "ccl: received {} bytes from {} (tag {}), expected {}", got,
                    describe_member(s.peer), s.tag, expected);
  }
}

bool MpiTransport::test(int request) {
  Slot& s = slot(request);
  int done = 0;
  if (s.pieces.empty()) {
    MPI_Status status;
    MESHNN_MPI_CHECK(MPI_Test(&s.request, &done, &status));
    if (!done) return false;
    check_received(s, &status);
  } else {
    std::vector<MPI_Status> statuses(s.pieces.size());
    MESHNN_MPI_CHECK(MPI_Testall(static_cast<int>(s.pieces.size()), s.pieces.data(), &done, statuses.data()));
    if (!done) return false;
    check_received(s, statuses.data());
  }
  release_slot(request);
  return true;
}

bool MpiTransport::test_all(std::span<int> requests) {
  // One MPI_Testall over the single-piece requests; anything else goes through test().
  constexpr size_t kBatch = 32;
  MPI_Request reqs[kBatch];
  MPI_Status statuses[kBatch];
  int ids[kBatch];
  int k = 0;
  for (int r : requests) {
    if (r < 0) continue;
    if (k == static_cast<int>(kBatch) || !slot(r).pieces.empty()) return Transport::test_all(requests);
    ids[k] = r;
    reqs[k++] = slot(r).request;
  }
  if (k == 0) return true;
  int done = 0;
  MESHNN_MPI_CHECK(MPI_Testall(k, reqs, &done, statuses));
  if (!done) {
    // Testall completes all or nothing, but may have freed none: keep the handles as they were.
    return false;
  }
  for (int i = 0; i < k; ++i) {
    Slot& s = slot(ids[i]);
    s.request = reqs[i];
    check_received(s, &statuses[i]);
    release_slot(ids[i]);
  }
  for (int& r : requests) r = -1;
  return true;
}

int MpiTransport::world_rank(int position) const {
  if (world_ranks_.empty()) {
    MPI_Group mine, world;
    MESHNN_MPI_CHECK(MPI_Comm_group(comm_, &mine));
    MESHNN_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> positions(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) positions[static_cast<size_t>(i)] = i;
    world_ranks_.resize(static_cast<size_t>(size_));
    MESHNN_MPI_CHECK(MPI_Group_translate_ranks(mine, size_, positions.data(), world, world_ranks_.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
  }
  return world_ranks_[static_cast<size_t>(position)];
}

std::string MpiTransport::describe_member(int position) const {
  if (namer_) return namer_(position);
  return fmt::format("rank {}", position);
}

}  // namespace meshnn::ccl
