#include "meshnn/ccl/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/core/trace.hpp"

namespace meshnn::ccl {
namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(const std::string&)>& stuck_handler() {
  static std::function<void(const std::string&)> h;
  return h;
}

}  // namespace

double watchdog_seconds_from_env() {
  if (const char* v = std::getenv("MESHNN_WATCHDOG_SECONDS")) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end != v && s > 0) return s;
  }
  return 600.0;
}

void set_stuck_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard lock(handler_mutex());
  stuck_handler() = std::move(handler);
}


namespace {
std::atomic<uint64_t> g_plans_built{0};
}  // namespace

uint64_t plans_built() { return g_plans_built.load(std::memory_order_relaxed); }

Plan::Plan(Transport& transport, std::string op_name, int tag_base, double watchdog_seconds)
    : transport_(transport), op_name_(std::move(op_name)), tag_base_(tag_base), watchdog_seconds_(watchdog_seconds) {
  g_plans_built.fetch_add(1, std::memory_order_relaxed);
}

OpId Plan::add(Op op, const Deps& after) {
  const OpId id = static_cast<OpId>(ops_.size());
  for (OpId d : after) {
    if (d < 0) continue;
    if (!ops_[d].done) {
      ++op.pending_deps;
      ops_[d].dependents.push_back(id);
    }
  }
  ops_.push_back(std::move(op));
  return id;
}

Plan::Op Plan::make_op(Kind kind, int peer, int lane, int step, void* buffer, size_t bytes, std::function<void()> then) {
  Op op;
  op.kind = kind;
  op.peer = peer;
  op.lane = lane;
  op.step = step;
  op.buffer = buffer;
  op.bytes = bytes;
  op.then = std::move(then);
  return op;
}

OpId Plan::send(int peer, int lane, int step, const void* src, size_t bytes, const Deps& after) {
  return add(make_op(Kind::SEND, peer, lane, step, const_cast<void*>(src), bytes, {}), after);
}

OpId Plan::recv(int peer, int lane, int step, void* dst, size_t bytes, const Deps& after, std::function<void()> then) {
  return add(make_op(Kind::RECV, peer, lane, step, dst, bytes, std::move(then)), after);
}

OpId Plan::local(int step, std::function<void()> fn, const Deps& after) {
  return add(make_op(Kind::LOCAL, -1, -1, step, nullptr, 0, std::move(fn)), after);
}

void Plan::trace_op(const Op& op, int64_t local_begin_ns) const {
  const int64_t now = trace::now_ns();
  if (op.kind == Kind::LOCAL) {
    trace::record("ccl", fmt::format("{} local step {}", op_name_, op.step), local_begin_ns, now);
    return;
  }
  trace::record_transfer(op.kind == Kind::SEND, op.posted_ns, now,
                         {transport_.world_rank(op.peer), op.step, op.lane, static_cast<int64_t>(op.bytes)});
}

void Plan::complete(OpId id) {
  Op& op = ops_[id];
  const bool tracing = trace::enabled();
  const int64_t local_begin = tracing && op.kind == Kind::LOCAL ? trace::now_ns() : 0;
  if (op.then) op.then();
  if (tracing) trace_op(op, local_begin);
  op.done = true;
  --remaining_;
  for (OpId d : op.dependents) {
    Op& dep = ops_[d];
    if (--dep.pending_deps == 0 && dep.kind == Kind::LOCAL) ready_locals_.push_back(d);
  }
}

void Plan::run() {
  // Queues per (peer, lane, kind) in plan order.
  // Few distinct (peer, lane, kind) triples: a linear scan beats a map for small collectives.
  std::vector<std::tuple<int, int, int>> queue_keys;
  queue_of_op_.assign(ops_.size(), -1);
  for (OpId id = 0; id < static_cast<OpId>(ops_.size()); ++id) {
    const Op& op = ops_[id];
    if (op.kind == Kind::LOCAL) {
      if (op.pending_deps == 0) ready_locals_.push_back(id);
      continue;
    }
    const std::tuple<int, int, int> key{op.peer, op.lane, static_cast<int>(op.kind)};
    size_t q = 0;
    while (q < queue_keys.size() && queue_keys[q] != key) ++q;
    if (q == queue_keys.size()) {
      queue_keys.push_back(key);
      queues_.emplace_back();
    }
    queues_[q].push_back(id);
    queue_of_op_[id] = static_cast<int>(q);
  }
  queue_heads_.assign(queues_.size(), 0);
  remaining_ = static_cast<int64_t>(ops_.size());

  std::vector<OpId> in_flight;
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  int idle_rounds = 0;
  int64_t idle_since_ns = -1;
  const bool yields = transport_.yields_when_idle();
  while (remaining_ > 0) {
    bool progress = false;
    // Post every queue head whose dependencies are done (receives first: a posted receive lets
    // the peer's rendezvous send start).
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t q = 0; q < queues_.size(); ++q) {
        auto& queue = queues_[q];
        size_t& head = queue_heads_[q];
        while (head < queue.size()) {
          Op& op = ops_[queue[head]];
          if ((op.kind == Kind::RECV) != (pass == 0)) break;
          if (op.pending_deps > 0) break;
          const OpId id = queue[head++];
          op.posted = true;
          if (trace::enabled()) op.posted_ns = trace::now_ns();
          if (op.bytes == 0) {  // both sides know the size: nothing to exchange
            complete(id);
          } else {
            const int tag = tag_base_ + op.lane;
            op.request = op.kind == Kind::SEND ? transport_.post_send(op.peer, tag, op.buffer, op.bytes)
                                               : transport_.post_recv(op.peer, tag, op.buffer, op.bytes);
            in_flight.push_back(id);
          }
          progress = true;
        }
      }
    }
    for (size_t i = 0; i < in_flight.size();) {
      const OpId id = in_flight[i];
      if (transport_.test(ops_[id].request)) {
        in_flight[i] = in_flight.back();
        in_flight.pop_back();
        complete(id);
        progress = true;
      } else {
        ++i;
      }
    }
    // One local action per round: the sends and receives it releases are posted before the next
    // one runs, so a long action (a fused matmul's product of one block) never holds back a
    // block's forwarding behind the product of the next.
    if (!ready_locals_.empty()) {
      const OpId id = ready_locals_.back();
      ready_locals_.pop_back();
      ops_[id].posted = true;
      complete(id);
      progress = true;
    }
    if (progress) {
      idle_rounds = 0;
      last_progress = Clock::now();
      if (idle_since_ns >= 0) {
        detail::traced_wait_ns() += trace::now_ns() - idle_since_ns;
        idle_since_ns = -1;
      }
      continue;
    }
    // Nothing to do but wait for peers: what the profile reports as the collective's waiting.
    if (idle_since_ns < 0 && trace::enabled()) idle_since_ns = trace::now_ns();
    // Members sharing cores must give theirs to the peer they wait for (Transport::yields_when_idle).
    if (++idle_rounds > 64 && yields) std::this_thread::yield();
    if ((idle_rounds & 255) == 0 &&
        std::chrono::duration<double>(Clock::now() - last_progress).count() > watchdog_seconds_)
      report_stuck();
  }
}

void Plan::report_stuck() {
  // The earliest incomplete transfer in plan order is what everything else waits behind.
  const Op* stuck = nullptr;
  size_t outstanding = 0;
  for (const Op& op : ops_) {
    if (op.done || op.kind == Kind::LOCAL) continue;
    outstanding += op.bytes;
    if (!stuck && op.posted) stuck = &op;
  }
  std::string message;
  if (stuck) {
    message = fmt::format("{} stuck at step {} waiting for peer {} to {} ({} bytes outstanding, {} s without progress)",
                          op_name_, stuck->step, transport_.describe_member(stuck->peer),
                          stuck->kind == Kind::SEND ? "receive" : "send", outstanding, watchdog_seconds_);
  } else {
    message = fmt::format("{} stuck with no transfer posted ({} bytes outstanding)", op_name_, outstanding);
  }
  detail::raise_stuck(message);
}

namespace detail {

double watchdog_seconds_for(const CclOptions& options) {
  if (options.watchdog_seconds > 0) return options.watchdog_seconds;
  static const double from_env = watchdog_seconds_from_env();
  return from_env;
}

void raise_stuck(const std::string& message) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard lock(handler_mutex());
    handler = stuck_handler();
  }
  if (handler) handler(message);
  fatal(message);
}

void DirectExchange::add(int peer, int lane, void* buffer, size_t bytes, bool is_send) {
  const size_t pieces =
      bytes > kPieceBytes && bytes <= kPieceBytes * kMaxPieces ? (bytes + kPieceBytes - 1) / kPieceBytes : 1;
  MESHNN_FATAL_IF(count_ + static_cast<int>(pieces) > kMaxTransfers, "ccl: DirectExchange holds at most {} transfers",
                  kMaxTransfers);
  for (size_t k = 0; k < pieces; ++k) {
    const size_t offset = k * kPieceBytes, len = pieces == 1 ? bytes : std::min(kPieceBytes, bytes - offset);
    transfers_[count_] = {peer, lane, static_cast<std::byte*>(buffer) + offset, len, is_send};
    requests_[count_++] = -1;
  }
}

int64_t& traced_wait_ns() {
  thread_local int64_t waited = 0;
  return waited;
}

TracedCollective::TracedCollective(std::string_view name, int members, size_t bytes, Algorithm algorithm,
                                   double bus_bytes)
    : scope_("ccl", name), wait_before_(traced_wait_ns()) {
  if (scope_.active())
    scope_.describe(fmt::format(R"("members":{},"bytes":{},"algorithm":"{}")", members, bytes, to_string(algorithm)),
                    {.bus_bytes = bus_bytes});
}

TracedCollective::~TracedCollective() {
  if (scope_.active()) scope_.add_wait(traced_wait_ns() - wait_before_);
}

void DirectExchange::post() {
  if (trace::enabled()) posted_ns_ = trace::now_ns();
  // Receives first: a posted receive lets the peer's rendezvous send start.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count_; ++i) {
      const Transfer& m = transfers_[i];
      if (m.is_send != (pass == 1) || m.bytes == 0) continue;  // empty: both sides know, nothing to exchange
      const int tag = tag_base_ + m.lane;
      requests_[i] = m.is_send ? transport_.post_send(m.peer, tag, m.buffer, m.bytes)
                               : transport_.post_recv(m.peer, tag, m.buffer, m.bytes);
    }
  }
}

void DirectExchange::wait(std::string_view op_name, double watchdog_seconds) {
  const int64_t wait_begin = trace::enabled() ? trace::now_ns() : -1;
  wait_for_all(op_name, watchdog_seconds);
  if (wait_begin < 0) return;
  // Everything was posted: the whole wait is waiting for peers.
  const int64_t end = trace::now_ns();
  traced_wait_ns() += end - wait_begin;
  for (int i = 0; i < count_; ++i) {
    const Transfer& m = transfers_[i];
    trace::record_transfer(m.is_send, posted_ns_, end,
                           {transport_.world_rank(m.peer), 0, m.lane, static_cast<int64_t>(m.bytes)});
  }
}

void DirectExchange::wait_for_all(std::string_view op_name, double watchdog_seconds) {
  using Clock = std::chrono::steady_clock;
  const std::span<int> requests(requests_, static_cast<size_t>(count_));
  Clock::time_point last_progress{};
  bool clock_started = false;
  int idle_rounds = 0;
  const bool yields = transport_.yields_when_idle();
  while (!transport_.test_all(requests)) {
    // Members sharing cores must give theirs to the peer they wait for (Transport::yields_when_idle).
    if (++idle_rounds > 64 && yields) std::this_thread::yield();
    if ((idle_rounds & 255) != 0) continue;
    // Rarely: see which transfers finished (progress restarts the watchdog), then the clock.
    bool progress = false;
    for (int& r : requests)
      if (r >= 0 && transport_.test(r)) {
        r = -1;
        progress = true;
      }
    const auto now = Clock::now();
    if (!clock_started || progress) {
      last_progress = now;
      clock_started = true;
    } else if (std::chrono::duration<double>(now - last_progress).count() > watchdog_seconds) {
      report_stuck(op_name, watchdog_seconds);
    }
  }
}

void DirectExchange::report_stuck(std::string_view op_name, double watchdog_seconds) const {
  // As Plan: the earliest incomplete transfer in plan order (all are posted here), step 0.
  const Transfer* stuck = nullptr;
  size_t outstanding = 0;
  for (int i = 0; i < count_; ++i) {
    if (requests_[i] < 0) continue;
    outstanding += transfers_[i].bytes;
    if (!stuck) stuck = &transfers_[i];
  }
  std::string message;
  if (stuck) {
    message = fmt::format("{} stuck at step {} waiting for peer {} to {} ({} bytes outstanding, {} s without progress)",
                          op_name, 0, transport_.describe_member(stuck->peer), stuck->is_send ? "receive" : "send",
                          outstanding, watchdog_seconds);
  } else {
    message = fmt::format("{} stuck with no transfer posted ({} bytes outstanding)", op_name, outstanding);
  }
  raise_stuck(message);
}

}  // namespace detail

// ---- primitives ----

Prims::Prims(Plan& plan, ScratchScope& scratch, const Reduction* reduction, int64_t max_chunk_count,
             int slots_per_lane)
    : plan_(plan),
      scratch_(scratch),
      reduction_(reduction),
      slot_bytes_(reduction ? reduction->wire_bytes(max_chunk_count) : 0),
      slots_per_lane_(std::max(2, slots_per_lane)) {}  // one slot per lane could wait in a circle

Prims::Slot& Prims::next_slot(int pool) {
  const int lane = pool;
  if (lane >= static_cast<int>(lanes_.size())) {
    lanes_.resize(lane + 1);
    lane_cursor_.resize(lane + 1, 0);
  }
  auto& slots = lanes_[lane];
  if (slots.size() < static_cast<size_t>(slots_per_lane_)) {
    slots.push_back({scratch_.acquire(slot_bytes_), -1});
    return slots.back();
  }
  return slots[lane_cursor_[lane]++ % slots.size()];
}

OpId Prims::send_own(int peer, int lane, int step, const void* own, int64_t count, const Deps& own_ready) {
  const Reduction& r = *reduction_;
  if (r.wire_is_compute()) return plan_.send(peer, lane, step, own, r.wire_bytes(count), own_ready);
  // A pool apart from the receive slots: a send's slot frees only when the peer receives, so
  // sharing one pool with our own receives could wait in a circle.
  Slot& slot = next_slot(2 * lane + 1);
  std::byte* wire = slot.data;
  Deps convert_after = own_ready;
  convert_after.push_back(slot.release);
  const OpId convert = plan_.local(step, [&r, own, wire, count] { r.to_wire(own, wire, count); }, convert_after);
  slot.release = plan_.send(peer, lane, step, wire, r.wire_bytes(count), {convert});
  return slot.release;
}

OpId Prims::recv_reduce_send(int from, int to, int lane, int step, const void* own, int64_t count,
                             const Deps& own_ready) {
  const Reduction& r = *reduction_;
  Slot& slot = next_slot(2 * lane);
  std::byte* wire = slot.data;
  Deps after = own_ready;
  after.push_back(slot.release);
  const OpId in = plan_.recv(from, lane, step, wire, r.wire_bytes(count), after,
                             [&r, wire, own, count] { r.combine_into_wire(wire, own, count); });
  slot.release = plan_.send(to, lane, step, wire, r.wire_bytes(count), {in});
  return slot.release;
}

OpId Prims::recv_reduce_copy(int from, int lane, int step, const void* own, void* out, int64_t count, bool finish,
                             const Deps& own_ready) {
  const Reduction& r = *reduction_;
  Slot& slot = next_slot(2 * lane);
  std::byte* wire = slot.data;
  const ResultStores stores = result_stores_;
  Deps after = own_ready;
  after.push_back(slot.release);
  slot.release = plan_.recv(from, lane, step, wire, r.wire_bytes(count), after, [&r, wire, own, out, count, finish, stores] {
    r.combine_wire_to(wire, own, out, count, stores);
    if (finish) r.finish(out, count);
  });
  return slot.release;
}

OpId Prims::recv_reduce_into(int from, int lane, int step, void* out, int64_t count, const Deps& after, bool finish) {
  const Reduction& r = *reduction_;
  Slot& slot = next_slot(2 * lane);
  std::byte* wire = slot.data;
  const OpId in = plan_.recv(from, lane, step, wire, r.wire_bytes(count), {slot.release});
  Deps deps = after;
  deps.push_back(in);
  const ResultStores stores = result_stores_;
  slot.release = plan_.local(step, [&r, wire, out, count, finish, stores] {
    r.accumulate_wire(out, wire, count, stores);
    if (finish) r.finish(out, count);
  }, deps);
  return slot.release;
}

}  // namespace meshnn::ccl
