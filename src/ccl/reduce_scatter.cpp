// reduce_scatter schedules: ring (either direction, whole or half slices), line, direct (direct.cpp).
#include <algorithm>
#include <cstring>
#include <functional>

#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn::ccl {
namespace detail {
namespace {

ElemRange part_of(const ElemRange& slice, int part, int parts) {
  if (parts == 1) return {0, slice.count};
  const int64_t half = slice.count / 2;
  return part == 0 ? ElemRange{0, half} : ElemRange{half, slice.count - half};
}

}  // namespace

std::vector<RangeOp> build_reduce_ring(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int d, int part, int parts,
                                       int64_t chunk_elems, int num_links, std::span<const OpId> produced) {
  Plan& plan = prims.plan();
  const int n = plan.size(), p = plan.position();
  const int dir = d > 0 ? 0 : 1;
  const int to = plan.peer(d), from = plan.peer(-d);
  // Element e of slice j is reduced along the chain j+d, j+2d, ..., j+(n-1)d, then j itself:
  // ((x[j+d] + x[j+2d]) + ...) + x[j], whatever the arrival order.
  auto own = [&](int j, int64_t offset) { return in + (slices[j].begin + offset) * 4; };
  auto ready = [&](int j) { return produced.empty() ? Deps{} : Deps{produced[j]}; };
  std::vector<RangeOp> finals;
  int64_t max_chunks = 0;
  for (const ElemRange& sl : slices) max_chunks = std::max(max_chunks, chunk_count(part_of(sl, part, parts).count, chunk_elems));
  // Chunk-major (see build_gather_relay): deadlock-free with >= 2 staging slots per lane.
  for (int64_t c = 0; c < max_chunks; ++c) {
    const int lane = lane_of(static_cast<int>(c), dir, num_links, 0);
    for (int s = 0; s + 1 < n; ++s) {
      const int j_send = mod(p - d * (s + 1), n), j_recv = mod(p - d * (s + 2), n);
      // Step 0: push our contribution to the slice whose chain starts here.
      const ElemRange rs = part_of(slices[j_send], part, parts);
      if (s == 0 && c < chunk_count(rs.count, chunk_elems)) {
        const int64_t off = rs.begin + c * chunk_elems, len = std::min(chunk_elems, rs.count - c * chunk_elems);
        prims.send_own(to, lane, 0, own(j_send, off), len, ready(j_send));
      }
      const ElemRange rr = part_of(slices[j_recv], part, parts);
      if (c >= chunk_count(rr.count, chunk_elems)) continue;
      const int64_t off = rr.begin + c * chunk_elems, len = std::min(chunk_elems, rr.count - c * chunk_elems);
      if (s + 2 < n) {
        // Steps 1..n-2: add our contribution to the passing partial and forward it.
        prims.recv_reduce_send(from, to, lane, s + 1, own(j_recv, off), len, ready(j_recv));
      } else {
        // Step n-1: the partial of our own slice arrives; adding our contribution completes it.
        const OpId op =
            prims.recv_reduce_copy(from, lane, s + 1, own(j_recv, off), out_slice + off * 4, len, true, ready(j_recv));
        finals.push_back({out_base + static_cast<size_t>(off) * 4, out_base + static_cast<size_t>(off + len) * 4, op});
      }
    }
  }
  return finals;
}

std::vector<RangeOp> build_reduce_line(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int64_t chunk_elems, int num_links,
                                       std::span<const OpId> produced) {
  Plan& plan = prims.plan();
  const int n = plan.size(), p = plan.position();
  auto own = [&](int j, int64_t offset) { return in + (slices[j].begin + offset) * 4; };
  auto ready = [&](int j) { return produced.empty() ? Deps{} : Deps{produced[j]}; };
  const ElemRange mine = slices[p];
  const int64_t nc = chunk_count(mine.count, chunk_elems);
  // Owner's result, per chunk: ((left partial (+) x[p]) (+) right partial), in that order.
  std::vector<OpId> left_done(nc, -1), finals_op(nc, -1);
  // Two chains toward every owner: rightward (d = +1, lane dir 0) carrying x[0] + ... + x[j-1],
  // leftward (d = -1, lane dir 1) carrying x[n-1] + ... + x[j+1]. Written once in "line
  // coordinates" i (distance from the chain's starting end).
  int64_t max_chunks = 0;
  for (const ElemRange& sl : slices) max_chunks = std::max(max_chunks, chunk_count(sl.count, chunk_elems));
  for (int64_t c = 0; c < max_chunks; ++c) {  // chunk-major, as in build_reduce_ring
    for (int dir = 0; dir < 2; ++dir) {
      const int d = dir == 0 ? 1 : -1;
      auto pos_of = [&](int i) { return d > 0 ? i : n - 1 - i; };
      const int i = d > 0 ? p : n - 1 - p;
      const int to = plan.peer(d), from = plan.peer(-d);
      const int lane = lane_of(static_cast<int>(c), dir, num_links, 0);
      const int64_t off = c * chunk_elems;
      if (i == 0 && dir == 0 && c < nc) {
        // The left end: no left partial for our slice, the result starts as our contribution.
        const int64_t len = std::min(chunk_elems, mine.count - off);
        left_done[c] = plan.local(0, [from_ptr = own(p, off), to_ptr = out_slice + off * 4, len] {
          std::memcpy(to_ptr, from_ptr, static_cast<size_t>(len) * 4);
        }, ready(p));
      }
      for (int s = 0; s + 1 < n; ++s) {
        // Step s at the starting end: push our contribution to the slice n-1-s hops down the line.
        if (i == 0) {
          const int j = pos_of(n - 1 - s);
          if (c < chunk_count(slices[j].count, chunk_elems))
            prims.send_own(to, lane, s, own(j, off), std::min(chunk_elems, slices[j].count - off), ready(j));
        }
        // Step s elsewhere: the partial of slice (line coordinate) n-s+i-2 arrives from behind.
        if (i >= 1 && s >= i - 1) {
          const int jq = n - s + i - 2, j = pos_of(jq);
          if (c >= chunk_count(slices[j].count, chunk_elems)) continue;
          const int64_t len = std::min(chunk_elems, slices[j].count - off);
          if (jq > i) {
            prims.recv_reduce_send(from, to, lane, s + 1, own(j, off), len, ready(j));
          } else if (dir == 0) {
            // Our slice's left partial: out = partial (+) x[p]; final if no right partial follows.
            left_done[c] =
                prims.recv_reduce_copy(from, lane, s + 1, own(p, off), out_slice + off * 4, len, p == n - 1, ready(p));
          } else {
            finals_op[c] = prims.recv_reduce_into(from, lane, s + 1, out_slice + off * 4, len, {left_done[c]}, true);
          }
        }
      }
    }
  }
  std::vector<RangeOp> finals;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t off = c * chunk_elems, len = std::min(chunk_elems, mine.count - off);
    finals.push_back({out_base + static_cast<size_t>(off) * 4, out_base + static_cast<size_t>(off + len) * 4,
                      finals_op[c] >= 0 ? finals_op[c] : left_done[c]});
  }
  return finals;
}

}  // namespace detail

namespace {

// reduce_scatter_values, and reduce_scatter_values_each when produce is set.
void scatter(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red,
             const std::function<void(int member)>& produce) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "reduce_scatter: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (n == 1) {
    if (produce) produce(0);
    copy_bytes(dst, src, red.compute_bytes(count));
    red.finish(dst, count);
    return;
  }
  const Schedule sched = choose_schedule(Collective::REDUCE_SCATTER, n, red.compute_bytes(count) * n, ctx.topology,
                                         ctx.transport.kind(), ctx.options);
  const int64_t chunk = chunk_elems_for(sched.chunk_bytes);
  const double watchdog = watchdog_seconds_for(ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("reduce_scatter") : std::string_view(ctx.op_name);
  const TracedCollective traced(name, n, red.compute_bytes(count) * n, sched.algorithm,
                                static_cast<double>(red.compute_bytes(count)) * (n - 1));
  if (sched.algorithm == Algorithm::DIRECT) {
    // Each slice straight to its owner, who combines the n contributions in the ring's order.
    const Reduction r = direct_reduction(red);
    const size_t bytes = r.compute_bytes(count);
    ScratchScope scratch;
    std::byte* staging = scratch.acquire(bytes * (n - 1));
    auto staged = [&](int from) { return staging + bytes * mod(from - p - 1, n); };
    // What goes out must exist before it is posted; our own slice is only read on arrival.
    if (produce)
      for (int k = 1; k < n; ++k) produce(mod(p - k, n));
    exchange_direct(
        ctx, name, watchdog, bytes, static_cast<size_t>(chunk) * 4, [&](int to) { return src + bytes * to; }, staged,
        [&] {
          if (produce) produce(p);
        },
        [&](size_t offset, size_t len) {
          combine_in_ring_order(
              r, n, p, [&](int m) -> const std::byte* { return (m == p ? src + bytes * p : staged(m)) + offset; },
              dst + offset, static_cast<int64_t>(len / 4));
        });
    return;
  }
  std::vector<ElemRange> slices(n);
  for (int j = 0; j < n; ++j) slices[j] = {count * j, count};
  Plan plan(t, std::string(name), ctx.tag_base, watchdog);
  ScratchScope scratch;
  // The producer's calls, chained in the ring's order of use (p-1, p-2, ..., p): one per round
  // of the progress loop, with the transfers they release posted in between.
  std::vector<OpId> produced;
  if (produce) {
    produced.assign(static_cast<size_t>(n), -1);
    OpId previous = -1;
    for (int k = 1; k <= n; ++k) {
      const int j = mod(p - k, n);
      previous = produced[static_cast<size_t>(j)] = plan.local(0, [&produce, j] { produce(j); }, {previous});
    }
  }
  switch (sched.algorithm) {
    case Algorithm::LINE: {
      Prims prims(plan, scratch, &red, chunk, ctx.options.slots_per_lane);
      build_reduce_line(prims, src, slices, dst, 0, chunk, ctx.num_links, produced);
      plan.run();
      return;
    }
    case Algorithm::BIDIRECTIONAL_RING: {
      Prims prims(plan, scratch, &red, chunk, ctx.options.slots_per_lane);
      build_reduce_ring(prims, src, slices, dst, 0, +1, 0, 2, chunk, ctx.num_links, produced);
      build_reduce_ring(prims, src, slices, dst, 0, -1, 1, 2, chunk, ctx.num_links, produced);
      plan.run();
      return;
    }
    default: {
      Prims prims(plan, scratch, &red, chunk, ctx.options.slots_per_lane);
      build_reduce_ring(prims, src, slices, dst, 0, +1, 0, 1, chunk, ctx.num_links, produced);
      plan.run();
      return;
    }
  }
}

}  // namespace

void reduce_scatter_values(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red) {
  scatter(ctx, in, out, count, red, {});
}

void reduce_scatter_values_each(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red,
                                const std::function<void(int member)>& produce) {
  MESHNN_CHECK(produce, "reduce_scatter_values_each needs a slice producer");
  scatter(ctx, in, out, count, red, produce);
}

}  // namespace meshnn::ccl
