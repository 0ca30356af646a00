#include "meshnn/core/trace.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <mutex>

#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::trace {
namespace detail {
std::atomic<bool> recording{false};
}

namespace {

// A thread's events, in blocks of 2 MiB mapped as huge pages where the system has them and never
// moved once written. A growing std::vector re-copied every event into fresh 4 KiB pages, and on a
// virtual machine each first touch of a page is a slow fault: that, not the clocks or the
// formatting, was most of what an event cost.
class EventLog {
 public:
  EventLog() = default;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog() { clear(); }

  void push_back(Event&& e) {
    if (blocks_.empty() || blocks_.back().count == kPerBlock) {
      std::byte* storage = allocate_buffer(kBlockBytes);
      if (storage == nullptr) throw std::bad_alloc();
      blocks_.push_back({reinterpret_cast<Event*>(storage), 0});
    }
    Block& b = blocks_.back();
    new (b.events + b.count) Event(std::move(e));
    ++b.count;
  }

  template <class Fn>
  void for_each(Fn&& fn) {
    for (Block& b : blocks_)
      for (size_t i = 0; i < b.count; ++i) fn(b.events[i]);
  }

  void clear() {
    for (Block& b : blocks_) {
      std::destroy_n(b.events, b.count);
      release_buffer(reinterpret_cast<std::byte*>(b.events));
    }
    blocks_.clear();
  }

 private:
  static constexpr size_t kBlockBytes = kHugePageBytes;
  static constexpr size_t kPerBlock = kBlockBytes / sizeof(Event);
  struct Block {
    Event* events;
    size_t count;
  };
  std::vector<Block> blocks_;
};

struct ThreadBuffer {
  int track = 0;  // the thread's track number within the rank (Chrome's tid)
  std::string name;
  EventLog events;
};

// Buffers outlive their threads: a worker pool may be gone by the time the trace is written.
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::atomic<uint64_t> generation{0};  // bumped by start(): threads re-register into the fresh set
};
Registry& registry() {
  static Registry r;
  return r;
}

struct ThreadSlot {
  ThreadBuffer* buffer = nullptr;
  uint64_t generation = ~uint64_t{0};
  std::string pending_name;
};
thread_local ThreadSlot slot;

ThreadBuffer& this_thread_buffer() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);  // taken once per thread and trace, not per event
  if (slot.buffer == nullptr || slot.generation != r.generation) {
    auto b = std::make_unique<ThreadBuffer>();
    b->track = static_cast<int>(r.buffers.size());
    b->name = slot.pending_name.empty() ? fmt::format("thread {}", b->track) : slot.pending_name;
    slot.buffer = b.get();
    slot.generation = r.generation;
    r.buffers.push_back(std::move(b));
  }
  return *slot.buffer;
}

ThreadBuffer& buffer() {
  // Registration is checked against the generation without the lock only after the first event.
  if (slot.buffer != nullptr && slot.generation == registry().generation) return *slot.buffer;
  return this_thread_buffer();
}

void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
}

// This rank's events as trace-event JSON objects (comma-separated, no brackets), times in
// microseconds on rank 0's clock.
std::string to_json(int rank, const std::vector<std::pair<int, std::string>>& tracks,
                    const std::vector<std::pair<int, Event>>& events, int64_t origin_ns, int64_t clock_offset_ns) {
  std::string out;
  out += fmt::format(R"({{"ph":"M","pid":{0},"name":"process_name","args":{{"name":"rank {0}","clock_offset_ns":{1}}}}})",
                     rank, clock_offset_ns);
  out += fmt::format(R"(,{{"ph":"M","pid":{0},"name":"process_sort_index","args":{{"sort_index":{0}}}}})", rank);
  for (const auto& [track, name] : tracks) {
    out += fmt::format(R"(,{{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":")", rank, track);
    append_escaped(out, name);
    out += "\"}}";
  }
  uint64_t async_id = static_cast<uint64_t>(rank) << 40;
  for (const auto& [track, e] : events) {
    const double begin_us = static_cast<double>(e.begin_ns - origin_ns) / 1e3;
    std::string args = e.args;
    if (e.transfer.peer_rank >= 0)
      args += fmt::format(R"({}"peer_rank":{},"bytes":{},"step":{},"lane":{})", args.empty() ? "" : ",",
                          e.transfer.peer_rank, e.transfer.bytes, e.transfer.step, e.transfer.lane);
    if (e.work.flops > 0) args += fmt::format("{}\"flops\":{}", args.empty() ? "" : ",", e.work.flops);
    if (e.work.bytes > 0) args += fmt::format("{}\"bytes_moved\":{}", args.empty() ? "" : ",", e.work.bytes);
    if (e.work.wait_ns > 0) args += fmt::format("{}\"wait_us\":{:.3f}", args.empty() ? "" : ",", e.work.wait_ns / 1e3);
    out += ",{\"name\":\"";
    append_escaped(out, e.name);
    if (e.overlapping) {
      // Async begin/end pairs: transfers of one thread overlap, which complete events may not.
      const uint64_t id = async_id++;
      out += fmt::format(R"(","cat":"{}","ph":"b","id":{},"pid":{},"tid":{},"ts":{:.3f},"args":{{{}}}}})", e.category,
                         id, rank, track, begin_us, args);
      out += ",{\"name\":\"";
      append_escaped(out, e.name);
      out += fmt::format(R"(","cat":"{}","ph":"e","id":{},"pid":{},"tid":{},"ts":{:.3f}}})", e.category, id, rank, track,
                         begin_us + static_cast<double>(e.duration_ns) / 1e3);
    } else {
      out += fmt::format(R"(","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{{}}}}})",
                         e.category, rank, track, begin_us, static_cast<double>(e.duration_ns) / 1e3, args);
    }
  }
  return out;
}

// Rank r's clock minus rank 0's, from ping-pongs with rank 0: at the round trip of least time the
// reply's timestamp is taken to sit halfway between send and receive. Collective over comm.
int64_t clock_offset_to_rank0(MPI_Comm comm) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  constexpr int kRounds = 16, kTag = 7301;
  int64_t my_offset = 0;
  for (int r = 1; r < size; ++r) {
    if (rank == 0) {
      int64_t best_rtt = INT64_MAX, offset = 0;
      for (int i = 0; i < kRounds; ++i) {
        const int64_t sent = now_ns();
        MESHNN_MPI_CHECK(MPI_Send(&sent, 1, MPI_INT64_T, r, kTag, comm));
        int64_t theirs = 0;
        MESHNN_MPI_CHECK(MPI_Recv(&theirs, 1, MPI_INT64_T, r, kTag, comm, MPI_STATUS_IGNORE));
        const int64_t received = now_ns();
        if (received - sent < best_rtt) {
          best_rtt = received - sent;
          offset = theirs - (sent + received) / 2;
        }
      }
      MESHNN_MPI_CHECK(MPI_Send(&offset, 1, MPI_INT64_T, r, kTag, comm));
    } else if (rank == r) {
      for (int i = 0; i < kRounds; ++i) {
        int64_t ping = 0;
        MESHNN_MPI_CHECK(MPI_Recv(&ping, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE));
        const int64_t mine = now_ns();
        MESHNN_MPI_CHECK(MPI_Send(&mine, 1, MPI_INT64_T, 0, kTag, comm));
      }
      MESHNN_MPI_CHECK(MPI_Recv(&my_offset, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE));
    }
  }
  return my_offset;
}

}  // namespace

std::vector<std::string> gather_to_rank0(MPI_Comm comm, std::string mine) {
  std::vector<std::string> all;
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (mpi_up == 0 || comm == MPI_COMM_NULL) {
    all.push_back(std::move(mine));
    return all;
  }
  constexpr int kTag = 7302;
  constexpr int64_t kPiece = int64_t{1} << 30;  // MPI counts are int: large texts go in pieces
  const int rank = comm_rank(comm), size = comm_size(comm);
  if (rank != 0) {
    const int64_t length = static_cast<int64_t>(mine.size());
    MESHNN_MPI_CHECK(MPI_Send(&length, 1, MPI_INT64_T, 0, kTag, comm));
    for (int64_t done = 0; done < length; done += kPiece)
      MESHNN_MPI_CHECK(MPI_Send(mine.data() + done, static_cast<int>(std::min(length - done, kPiece)), MPI_CHAR, 0,
                                kTag, comm));
    return all;
  }
  all.push_back(std::move(mine));
  for (int peer = 1; peer < size; ++peer) {
    int64_t length = 0;
    MESHNN_MPI_CHECK(MPI_Recv(&length, 1, MPI_INT64_T, peer, kTag, comm, MPI_STATUS_IGNORE));
    std::string theirs(static_cast<size_t>(length), '\0');
    for (int64_t done = 0; done < length; done += kPiece)
      MESHNN_MPI_CHECK(MPI_Recv(theirs.data() + done, static_cast<int>(std::min(length - done, kPiece)), MPI_CHAR, peer,
                                kTag, comm, MPI_STATUS_IGNORE));
    all.push_back(std::move(theirs));
  }
  return all;
}

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Scope::Scope(const char* category, std::string_view name) noexcept
    : category_(category), name_(name), begin_ns_(enabled() ? now_ns() : -1) {}

void Scope::describe(std::string args, Work work) {
  args_ = std::move(args);
  const int64_t wait = work_.wait_ns;
  work_ = work;
  work_.wait_ns += wait;
}

void Scope::finish() noexcept {
  if (begin_ns_ < 0) return;
  try {
    record(category_, std::string(name_), begin_ns_, now_ns(), std::move(args_), work_);
  } catch (...) {
    // Out of memory while tracing: lose the event rather than the job.
  }
  begin_ns_ = -1;
}

void record(const char* category, std::string name, int64_t begin_ns, int64_t end_ns, std::string args, Work work,
            bool overlapping) {
  if (!enabled()) return;
  buffer().events.push_back(
      Event{category, std::move(name), begin_ns, std::max<int64_t>(0, end_ns - begin_ns), std::move(args), work, overlapping});
}

void record_transfer(bool is_send, int64_t begin_ns, int64_t end_ns, const Transfer& transfer) {
  if (!enabled()) return;
  Event e;
  e.category = "transfer";
  e.name = is_send ? "send" : "recv";
  e.begin_ns = begin_ns;
  e.duration_ns = std::max<int64_t>(0, end_ns - begin_ns);
  e.overlapping = true;
  e.transfer = transfer;
  buffer().events.push_back(std::move(e));
}

void name_this_thread(std::string name) {
  slot.pending_name = name;
  if (slot.buffer != nullptr) {
    std::lock_guard lock(registry().mutex);
    if (slot.generation == registry().generation) slot.buffer->name = std::move(name);
  }
}

void start() {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (detail::recording.load()) return;
    r.buffers.clear();
    ++r.generation;
  }
  detail::recording.store(true);
}

std::vector<Event> write_and_stop(MPI_Comm comm, const std::string& file) {
  detail::recording.store(false);
  Registry& r = registry();
  std::vector<std::pair<int, std::string>> tracks;
  std::vector<std::pair<int, Event>> events;
  {
    std::lock_guard lock(r.mutex);
    for (auto& b : r.buffers) {
      tracks.emplace_back(b->track, b->name);
      b->events.for_each([&](Event& e) { events.emplace_back(b->track, std::move(e)); });
      b->events.clear();
    }
  }
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.second.begin_ns < b.second.begin_ns; });

  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  const bool distributed = mpi_up != 0 && comm != MPI_COMM_NULL;
  const int rank = distributed ? comm_rank(comm) : 0;
  const int64_t offset = distributed ? clock_offset_to_rank0(comm) : 0;
  for (auto& [track, e] : events) e.begin_ns -= offset;
  // The first event of rank 0 (every rank's, on one clock) is time zero.
  int64_t origin = events.empty() ? INT64_MAX : events.front().second.begin_ns;
  if (distributed) MESHNN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &origin, 1, MPI_INT64_T, MPI_MIN, comm));
  if (origin == INT64_MAX) origin = 0;

  const std::vector<std::string> all = gather_to_rank0(distributed ? comm : MPI_COMM_NULL, to_json(rank, tracks, events, origin, offset));
  std::string message;
  bool write_ok = true;
  if (rank == 0 && !file.empty()) {
    // Written under a temporary name and renamed when complete: a killed job leaves no half trace.
    const std::string partial = fmt::format("{}.tmp.{}", file, static_cast<long>(getpid()));
    std::FILE* f = std::fopen(partial.c_str(), "w");
    write_ok = f != nullptr;
    if (f != nullptr) {
      std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
      for (size_t i = 0; i < all.size(); ++i) {
        if (i > 0) std::fputc(',', f);
        std::fwrite(all[i].data(), 1, all[i].size(), f);
      }
      std::fputs("]}\n", f);
      write_ok = std::fclose(f) == 0 && std::rename(partial.c_str(), file.c_str()) == 0;
      if (!write_ok) std::remove(partial.c_str());
    }
    if (!write_ok) message = fmt::format("cannot write the trace to '{}'", file);
  }
  if (distributed) agree_on_failure(comm, "writing the trace", write_ok, message);
  else MESHNN_CHECK(write_ok, "{}", message);

  std::vector<Event> result;
  result.reserve(events.size());
  for (auto& [track, e] : events) {
    e.begin_ns -= origin;
    result.push_back(std::move(e));
  }
  return result;
}

}  // namespace meshnn::trace
