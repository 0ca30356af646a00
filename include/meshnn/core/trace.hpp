// Per-rank timelines of what meshnn does: the ops, the collectives and each transfer of their
// schedules, the jobs' phases, on every rank and worker thread. Written as one Chrome trace-event
// JSON file (opens in Perfetto, ui.perfetto.dev) and summarised by --profile.
//
// Recording is off unless MESHNN_TRACE=FILE is set or an app is given --trace FILE / --profile
// (runtime/cli.hpp). Off, an instrumented call pays one relaxed atomic load; on, an event costs a
// clock read at each end and an append to its thread's buffer (no lock: each thread keeps its own;
// blocks of huge pages, so that events are never copied again and rarely touch a fresh page).
//
//   void my_op(...) {
//     trace::Scope scope("op", "my_op");
//     if (scope.active()) scope.describe(fmt::format("\"m\":{}", m), {.flops = 2.0 * m * n * k});
//     ...
//   }
//
// write_and_stop() merges every rank's events into one file on rank 0. The ranks' clocks are
// aligned by ping-pong with rank 0 (offset at the smallest round trip), so a send on one rank lines
// up with its receive on the other.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshnn::trace {

namespace detail {
extern std::atomic<bool> recording;
}

// Whether events are being recorded.
inline bool enabled() noexcept { return detail::recording.load(std::memory_order_relaxed); }

// Nanoseconds on this process's steady clock.
int64_t now_ns() noexcept;

// What an event's work amounts to, for the profile's rates: floating-point operations, bytes an op
// reads and writes, and for a collective its bus bytes (nccl-tests' convention: the bytes each
// member's busiest link carries) and the time it spent waiting with nothing left to do but wait.
struct Work {
  double flops = 0, bytes = 0, bus_bytes = 0;
  int64_t wait_ns = 0;
};

// A message of a collective's schedule: numbers only, formatted when the trace is written (a
// decode step has hundreds of them).
struct Transfer {
  int peer_rank = -1;  // MPI_COMM_WORLD rank of the peer; -1: the event is no transfer
  int step = 0, lane = 0;
  int64_t bytes = 0;
};

// One event in a thread's buffer.
struct Event {
  const char* category = "";  // "op", "ccl", "transfer", "phase": a string literal
  std::string name;
  int64_t begin_ns = 0, duration_ns = 0;
  std::string args;     // JSON object members shown in the trace, e.g. "\"peer\":1,\"bytes\":4096"
  Work work;
  bool overlapping = false;  // may overlap other events of its thread (a transfer): an async span
  Transfer transfer;
};

// A span of this thread from construction to destruction (or finish()). Nothing is recorded when
// tracing was off at construction.
class Scope {
 public:
  Scope(const char* category, std::string_view name) noexcept;
  ~Scope() { finish(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool active() const noexcept { return begin_ns_ >= 0; }
  // Arguments and work of the event (call only when active(): building them costs).
  void describe(std::string args, Work work = {});
  void add_wait(int64_t ns) noexcept { work_.wait_ns += ns; }
  void finish() noexcept;

 private:
  const char* category_;
  std::string_view name_;
  int64_t begin_ns_;
  std::string args_;
  Work work_;
};

// Records an event that already happened on this thread; `overlapping` as in Event.
void record(const char* category, std::string name, int64_t begin_ns, int64_t end_ns, std::string args = {},
            Work work = {}, bool overlapping = false);

// Records a transfer ("send" or "recv") from its posting to its completion, as an async span.
void record_transfer(bool is_send, int64_t begin_ns, int64_t end_ns, const Transfer& transfer);

// Names this thread's track ("main", "worker 1", ...).
void name_this_thread(std::string name);

// Starts recording into a fresh set of buffers (a second start keeps recording).
void start();

// Stops recording; collective over comm (MPI initialised): rank 0 gathers every rank's events, shifts
// them onto its own clock and writes `file` (Chrome trace-event JSON) when it is not empty. With
// MPI not initialised, writes this process's events alone. Returns this rank's events, its clock
// already aligned, for a profile. Throws meshnn::Error (on rank 0) if the file cannot be written.
std::vector<Event> write_and_stop(MPI_Comm comm, const std::string& file);

// Every rank's text on rank 0, in rank order (other ranks get an empty vector); by point-to-point
// messages. Collective over comm; with MPI not initialised or MPI_COMM_NULL, just {mine}.
std::vector<std::string> gather_to_rank0(MPI_Comm comm, std::string mine);

}  // namespace meshnn::trace
