// broadcast on plain buffers: the root's buffer down one or two pipelined chains (or straight to
// every member for small messages). Every member receives a chunk into its final place and sends
// it on from there (NCCL's directRecvCopySend), so no staging and no copy.
#include <algorithm>

#include "builders.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::ccl {
namespace detail {
namespace {

// Members the forward chain reaches (at 1..ahead hops ahead of the root); the backward chain
// reaches the other n-1-ahead, behind it.
int members_ahead(Algorithm algorithm, int n, int root) {
  switch (algorithm) {
    case Algorithm::BIDIRECTIONAL_RING: return n / 2;  // ceil((n-1)/2)
    case Algorithm::LINE: return n - 1 - root;         // no wrap: toward each end of the line
    default: return n - 1;                             // RING
  }
}

}  // namespace
}  // namespace detail

BroadcastOps add_broadcast(Plan& plan, std::span<const int> members, int me, int root, std::byte* buffer, size_t bytes,
                           const Schedule& schedule, int num_links, int phase, const Deps& ready) {
  using namespace detail;
  const Algorithm algorithm = schedule.algorithm;
  const size_t chunk_bytes = schedule.chunk_bytes;
  const int n = static_cast<int>(members.size());
  const size_t chunks = chunk_count(bytes, chunk_bytes);
  BroadcastOps ops;
  ops.received.assign(chunks, -1);
  auto at = [&](int k) { return members[static_cast<size_t>(mod(k, n))]; };
  auto chunk = [&](size_t c, size_t& off, size_t& len) {
    off = c * chunk_bytes;
    len = std::min(chunk_bytes, bytes - off);
  };
  if (n == 1) return ops;
  if (algorithm == Algorithm::DIRECT) {
    // One step: the root sends each chunk to every member at increasing distance.
    for (size_t c = 0; c < chunks; ++c) {
      size_t off = 0, len = 0;
      chunk(c, off, len);
      const int lane = lane_of(static_cast<int>(c), 0, num_links, phase);
      if (me == root) {
        for (int q = 1; q < n; ++q) ops.sent.push_back(plan.send(at(root + q), lane, 0, buffer + off, len, ready));
      } else {
        ops.received[c] = plan.recv(at(root), lane, 0, buffer + off, len, ready);
      }
    }
    return ops;
  }
  const int ahead = members_ahead(algorithm, n, root), behind = n - 1 - ahead;
  // Where this member sits: hops from the root along its chain, and the chain's direction.
  const int fwd = mod(me - root, n), bwd = mod(root - me, n);
  const int dir = me == root ? -1 : fwd <= ahead ? 0 : 1;
  const int hop = dir == 0 ? fwd : bwd;
  const int step_of_me = me == root ? 0 : hop;
  // Chunk-major, so chunk c+1 enters each chain right behind chunk c and every lane carries its
  // chunks in the same order on both ends.
  for (size_t c = 0; c < chunks; ++c) {
    size_t off = 0, len = 0;
    chunk(c, off, len);
    if (me == root) {
      if (ahead > 0)
        ops.sent.push_back(plan.send(at(me + 1), lane_of(static_cast<int>(c), 0, num_links, phase), 0, buffer + off, len, ready));
      if (behind > 0)
        ops.sent.push_back(plan.send(at(me - 1), lane_of(static_cast<int>(c), 1, num_links, phase), 0, buffer + off, len, ready));
      continue;
    }
    const int d = dir == 0 ? 1 : -1, lane = lane_of(static_cast<int>(c), dir, num_links, phase);
    const OpId got = plan.recv(at(me - d), lane, step_of_me - 1, buffer + off, len, ready);
    ops.received[c] = got;
    // Send on unless this member ends its chain.
    if (hop < (dir == 0 ? ahead : behind)) ops.sent.push_back(plan.send(at(me + d), lane, step_of_me, buffer + off, len, {got}));
  }
  return ops;
}

namespace {

void broadcast(const CallContext& ctx, int root, void* buffer, size_t bytes,
               const std::function<void(size_t, size_t)>& on_chunk) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "broadcast: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  MESHNN_CHECK(root >= 0 && root < n, "broadcast: root must be 0..{} (the group's positions), got {}", n - 1, root);
  const Schedule sched =
      choose_schedule(Collective::BROADCAST, n, bytes, ctx.topology, ctx.transport.kind(), ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("broadcast") : std::string_view(ctx.op_name);
  const TracedCollective traced(name, n, bytes, sched.algorithm, static_cast<double>(bytes));
  Plan plan(t, std::string(name), ctx.tag_base, watchdog_seconds_for(ctx.options));
  std::vector<int> members(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) members[static_cast<size_t>(k)] = k;
  auto* data = static_cast<std::byte*>(buffer);
  const BroadcastOps ops = add_broadcast(plan, members, p, root, data, bytes, sched, ctx.num_links, 0);
  if (on_chunk) {
    // In offset order, each after its chunk's arrival and the previous call.
    OpId previous = -1;
    for (size_t c = 0; c < ops.received.size(); ++c) {
      Deps after;
      if (ops.received[c] >= 0) after.push_back(ops.received[c]);
      if (previous >= 0) after.push_back(previous);
      const size_t off = c * sched.chunk_bytes, len = std::min(sched.chunk_bytes, bytes - off);
      previous = plan.local(1, [&on_chunk, off, len] { on_chunk(off, len); }, after);
    }
  }
  plan.run();
}

}  // namespace

void broadcast_bytes(const CallContext& ctx, int root, void* buffer, size_t bytes) {
  broadcast(ctx, root, buffer, bytes, {});
}

void broadcast_bytes_each(const CallContext& ctx, int root, void* buffer, size_t bytes,
                          const std::function<void(size_t offset, size_t bytes)>& on_chunk) {
  MESHNN_CHECK(on_chunk, "broadcast_bytes_each needs a chunk consumer");
  broadcast(ctx, root, buffer, bytes, on_chunk);
}

}  // namespace meshnn::ccl
